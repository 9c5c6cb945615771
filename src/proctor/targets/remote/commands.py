"""Commands on far targets, for any registered kind that declares FAR (and AGENT for the
server workflow): acquire the machine(s) through the registry, run, release on failure.

    run_far(options, job, ...)          `proctor run --target X`: one job, or the same job on
                                         every machine of a group at once (a thread each)
    run_workflow(options, command, ...) `proctor serve|drain|flow|bench|eval|sweep --target X`:
                                         through the far agent (AGENT), or on a kind that makes
                                         local run directories (PLAN: Slurm) as one planned job
    acts_here(options, runs_dir, RUN)    whether serve start|ready|stop, drain and inspect act
                                         here, on local run directories of that kind

The CLI only prints what these return.
"""

from __future__ import annotations

import contextlib
import io
import json
import threading
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, Any

from proctor.errors import ProctorError, UsageError
from proctor.jobs.command import CommandJob, from_flags
from proctor.record.rundir import RunDir, write_atomic
from proctor.record.schema import read_view, view_record
from proctor.spec.config import ProjectConfig
from proctor.spec.plan import RunFlags
from proctor.targets.base import AGENT, FAR, PLAN, JobSpec, Target
from proctor.targets.kinds import time_left
from proctor.targets.registry import (
    Acquired,
    TargetContext,
    TargetOptions,
    acquire,
    kind_named,
    open_target,
)
from proctor.targets.remote.orchestrate import (
    Completion,
    RemoteOptions,
    apply_fetch,
    index_local,
    release_into,
    run_remote,
    source_view,
)
from proctor.targets.remote.requests import CommandRequest, SubmitRequest
from proctor.targets.remote.shipfiles import ship_files
from proctor.targets.remote.workflow import (
    ChildRun,
    WorkflowCommand,
    WorkflowResult,
    job_for,
    run_workflow_remote,
)


def job_from_flags(flags: RunFlags, config: ProjectConfig) -> JobSpec:
    """The far job of `proctor run --target T -- CMD`: its CommandJob (the flags the user set)
    laid over [run] in proctor.toml, as the JobSpec that travels."""
    if not flags.argv:
        raise UsageError(
            "no command given", hint="write it after --: proctor run --target T -- CMD"
        )
    return job_spec(from_flags(flags).with_defaults(config.run))


def job_spec(job: CommandJob) -> JobSpec:
    """What a target runs for `job` (the wire form the far side reads: targets/base.py)."""
    return JobSpec(
        argv=list(job.argv),
        name=job.name,
        env=job.env_table(),
        secret_names=list(job.secret_names),
        timeout_s=job.timeout_s,
        grace_s=job.grace_s,
        gpu_sample_s=job.gpu_sample,
        key=job.key,
        cwd=job.cwd,
        allow_unhealthy_gpu=job.allow_unhealthy_gpu,
    )


def setup_script(config: ProjectConfig) -> str | None:
    value = config.table("remote").get("setup") or (config.model_extra or {}).get("setup")
    return str(value) if value else None


def _require(options: TargetOptions, capability: str, what: str) -> None:
    kind = kind_named(options.kind)
    if capability not in kind.capabilities:
        raise UsageError(
            f"a {kind.kind} target cannot run {what}",
            hint="use a target with proctor's far-side agent, e.g. ssh:// or "
            "runpod (docs/remote.md)",
        )


@dataclass
class GroupRun:
    """What `run_far` did: one completion per machine; `group` names a group of several."""

    completions: list[Completion]
    group: str | None = None
    report: dict[str, Any] = field(default_factory=dict)
    report_path: Path | None = None


def run_far(
    options: TargetOptions,
    job: JobSpec,
    identity: Any,
    config: ProjectConfig,
    runs_dir: Path,
    out: IO[bytes],
    remote: RemoteOptions,
) -> GroupRun:
    """`job` on the machine(s) `options` names; see the module docstring."""
    _require(options, FAR, "a far run")
    acquired = acquire(options, TargetContext(config, runs_dir), identity)
    left = time_left(acquired, from_start=True)
    if left is not None:
        # The far wrapper stops the command at the budget even without this controller.
        job.timeout_s = min(job.timeout_s or left, left)
    targets = acquired.targets
    job.group = acquired.group if len(targets) > 1 else None
    try:
        completions = run_group(targets, identity, job, runs_dir, remote, out)
    except ProctorError:
        release_all(targets)
        raise
    finally:
        for t in targets:
            t.close()
    if len(completions) == 1:
        return GroupRun(completions)
    group = str(acquired.group)
    report, path = group_report(group, completions, runs_dir)
    return GroupRun(completions, group, report, path)


def release_all(targets: list[Target]) -> None:
    """Give every machine back (idempotent; a failure to is in each target's own report)."""
    for target in targets:
        with contextlib.suppress(ProctorError):
            target.release()


def run_group(
    targets: list[Target],
    identity: Any,
    job: JobSpec,
    runs_dir: Path,
    options: RemoteOptions,
    out: IO[bytes],
) -> list[Completion]:
    """The same job on every target at once, each its own run; one completion per target."""
    if len(targets) == 1:
        return [run_remote(targets[0], identity, job, runs_dir, out, options)]
    results: list[Completion | BaseException | None] = [None] * len(targets)

    def one(i: int, target: Target) -> None:
        try:
            results[i] = run_remote(
                target, identity, JobSpec(**{**job.__dict__}), runs_dir, io.BytesIO(), options
            )
        except BaseException as error:
            results[i] = error

    threads = [threading.Thread(target=one, args=(i, t)) for i, t in enumerate(targets)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    done: list[Completion] = []
    for i, result in enumerate(results):
        if isinstance(result, Completion):
            done.append(result)
        else:
            info = targets[i].describe().to_record()
            failed = Completion(
                None,
                None,
                info,
                {"source_id": identity.source_id},
                error=str(result),
                error_type=type(result).__name__,
            )
            if isinstance(result, ProctorError):
                failed.error = result.one_line()
            done.append(failed)
    return done


def group_report(
    group: str, completions: list[Completion], runs_dir: Path
) -> tuple[dict[str, Any], Path]:
    """The group's report, written to <runs>/.groups/<group>.json; (report, path)."""
    data = {
        "group": group,
        "runs": [c.to_dict() for c in completions],
        "all_known": all(c.result_known for c in completions),
        "all_verified": all(c.logs_verified for c in completions),
        "all_released": all(c.release_verified for c in completions),
    }
    path = runs_dir / ".groups" / f"{group}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(data, indent=2, default=str, allow_nan=False) + "\n")
    return data, path


def group_exit_status(completions: list[Completion]) -> int:
    """The worst status of the group; the first deciding error is raised."""
    codes: list[int] = []
    errors: list[ProctorError] = []
    for c in completions:
        try:
            codes.append(c.exit_status())
        except ProctorError as error:
            errors.append(error)
    if errors:
        raise errors[0]
    return max(codes) if codes else 0


@dataclass
class WorkflowRun:
    result: WorkflowResult
    view_key: str | None = None
    view: dict[str, Any] | None = None
    text: str | None = None


def run_workflow(
    options: TargetOptions,
    command: WorkflowCommand,
    identity: Any,
    config: ProjectConfig,
    runs_dir: Path,
    out: IO[bytes],
    remote: RemoteOptions,
    *,
    keep_for_server: bool = False,
) -> WorkflowRun:
    """`command` (a proctor command line) on the one machine `options` names, as one far job
    (or one agent call, command.direct); the machine is released as its kind says (a pod
    hosting a server that outlives the command is kept)."""
    kind = kind_named(options.kind)
    if AGENT not in kind.capabilities and PLAN in kind.capabilities:
        if (command.leave_live or command.direct) and not command.detach:
            raise UsageError(
                f"a {kind.kind} target runs `{command.request.title()}` as one job "
                "to its end: it cannot leave it running",
                hint="drop --detach (a server: serve start --target)",
            )
        # Self-contained (flow, bench, eval, sweep): one job whose directory holds its runs.
        request = with_server_url(command.request, options, runs_dir)
        if command.detach:
            # Detached here: the job itself runs the command to its end, followed by its tracker.
            request = not_detached(request)
        planned = replace(command, nested=True, request=request)
        return WorkflowRun(
            run_planned(
                options,
                planned,
                identity,
                config,
                runs_dir,
                out,
                remote.store_path,
                detach=command.detach,
            )
        )
    _require(options, AGENT, "proctor's server workflow (serve, drain, flow, bench, eval)")
    acquired: Acquired = acquire(
        options, TargetContext(config, runs_dir, keep_for_server=keep_for_server), identity
    )
    if len(acquired.targets) != 1:
        release_all(acquired.targets)
        for t in acquired.targets:
            t.close()
        raise UsageError(
            f"this command runs on one machine, not {len(acquired.targets)}",
            hint="set [runpod] pods = 1, or name one pod: runpod:POD_ID",
        )
    target = acquired.targets[0]
    left = time_left(acquired)
    if left is not None:
        command.timeout_s = left
    try:
        result = run_workflow_remote(target, identity, command, runs_dir, out, remote)
        if command.direct:  # no job, so nothing released it yet (kept: its server lives)
            release_into(target, result.completion, None)
    except ProctorError:
        release_all([target])  # run_remote released already where it could; idempotent
        raise
    finally:
        target.close()
    view = acquired.view() if acquired.view is not None else None
    text = acquired.text(view) if acquired.text is not None and view is not None else None
    return WorkflowRun(result, acquired.view_key if view is not None else None, view, text)


def run_planned(
    options: TargetOptions,
    command: WorkflowCommand,
    identity: Any,
    config: ProjectConfig,
    runs_dir: Path,
    out: IO[bytes],
    store_path: Path | None = None,
    *,
    detach: bool = False,
) -> WorkflowResult:
    """A self-contained workflow command (flow, bench, eval, sweep: its runs live inside the
    job's own run directory) on a target that makes local run directories (PLAN: Slurm): one
    job, followed, its directory verified against its manifest; the runs it made are found
    among its steps (the flow's record, the answer of --json) and indexed in the local store.
    `detach`: submitted, not followed; the job's tracker fetches, verifies and indexes it."""
    from proctor.targets.service import guard_start

    target = open_target(options, TargetContext(config, runs_dir, one_machine=True))
    completion = Completion(None, None, target.describe().to_record(), source_view(identity))
    # Ctrl-C/SIGTERM from here on stop the job (scancel through its tracker) and the command
    # ends 130 once its end is recorded: nothing is left in the queue.
    interrupts = guard_start()
    try:
        prepared = target.prepare()
        if command.shipment:  # no agent to store them with: refused, never read from its path
            shipped = ship_files(target, prepared.workspace, command.request, command.shipment)
            command = replace(command, request=shipped)
        job = job_for(command)
        job.argv[0] = prepared.python
        started = target.start(job)
        local = runs_dir / started.run_id
        interrupts.attach(RunDir(local))
        completion.run_id, completion.local_dir = started.run_id, str(local)
        if detach:
            completion.detached = True
            interrupts.raise_if_hit()
            return WorkflowResult(completion)
        status = target.follow(started.run_id, out)
        completion.result_known = status.state == "finished" and status.exit_code is not None
        completion.exit_code, completion.exit_signal = status.exit_code, status.exit_signal
        completion.outcome = status.outcome if completion.result_known else "unknown"
        apply_fetch(completion, target.fetch(started.run_id, local))
        release_into(target, completion, None)
        if completion.outcome == "stopped" and not interrupts.hit:
            # Stopped, and not by this proctor: the summary says by whom (Slurm's reason).
            completion.stopped_by = str(read_view(local).fact("reason") or "outside proctor")
    finally:
        interrupts.__exit__()
        target.close()
    result = WorkflowResult(completion)
    for path in sorted(local.glob("**/answer.json"))[:1]:
        with contextlib.suppress(OSError, ValueError):
            result.answer = json.loads(path.read_text(encoding="utf-8"))
    for path in sorted(local.glob("**/steps/*/record.json")):
        run = RunDir(path.parent)
        record = run.read_json("record.json") or {}
        typed = view_record(record, run.run_id)
        if typed.kind == "flow":
            result.flow = record
        code, outcome = _exit_code(run), typed.outcome if record else None
        if code is None and outcome in (None, "running", "starting"):
            outcome = "unknown"  # the job is over: a step with no exit status never finished
        result.children.append(
            ChildRun(
                run.run_id,
                str(run.path),
                outcome=outcome,
                verified=completion.logs_verified,
                exit_code=code,
            )
        )
        if completion.logs_verified:
            index_local(run.path, store_path)
    interrupts.raise_if_hit()
    return result


def _exit_code(run: RunDir) -> int | None:
    from proctor.record.status import read_exit_status

    status = read_exit_status(run)  # "143 SIGTERM" for a death by signal
    return status.code if status is not None else None


def not_detached(request: CommandRequest | SubmitRequest) -> CommandRequest | SubmitRequest:
    """The request without its --detach (a job that runs it to its end)."""
    if isinstance(request, SubmitRequest):
        return SubmitRequest.of(request.parsed().model_copy(update={"detach": False}))
    params = {k: v for k, v in request.params.items() if k != "detach"}
    return request.model_copy(update={"params": params})


def with_server_url(
    request: CommandRequest | SubmitRequest, options: TargetOptions, runs_dir: Path
) -> CommandRequest | SubmitRequest:
    """`--server RUN` (bench, eval, sweep) on a kind whose runs are local run directories: the
    server's record is here, not in the job's own runs dir, so the job is given the live
    server's URL and recorded model instead (an explicit --base-url/--model wins). The server
    must have run on the same kind (a local server's 127.0.0.1 is not the node's)."""
    from proctor.errors import TargetUnavailable
    from proctor.record.status import run_state
    from proctor.supervise.refs import SERVER_KINDS, resolve_run
    from proctor.targets.registry import kind_of_run

    submission = request.parsed() if isinstance(request, SubmitRequest) else None
    if submission is not None:
        ref: object = submission.server.run if submission.server else None
    else:
        assert isinstance(request, CommandRequest)
        ref = request.params.get("server")
    if not isinstance(ref, str) or not ref:
        return request
    run = resolve_run(runs_dir, ref, SERVER_KINDS)
    ran_on = kind_of_run(run.path)
    if ran_on.kind != options.kind:
        raise UsageError(
            f"server run {run.run_id} ran on a {ran_on.kind} target, not {options.kind}",
            hint="--base-url URL names any server",
        )
    facts = read_view(run.path).fact("server")
    if not isinstance(facts, dict) or not facts.get("port"):
        raise UsageError(
            f"run {run.run_id} is not a server run",
            hint="start one with proctor serve start --target ...",
        )
    if run_state(run).state not in ("running", "starting"):
        raise TargetUnavailable(
            f"server run {run.run_id} is not running; refusing to "
            "benchmark whatever listens on its port now",
            hint="start a server with `proctor serve start`",
        )
    base_url = f"http://{facts.get('host') or '127.0.0.1'}:{facts['port']}"
    model = facts.get("served_model_name") or facts.get("model")
    if submission is not None:
        # The job's unset fields (Submission.server.fills) take the server's; no --server left.
        filled = submission.with_server_facts({"base_url": base_url, "checked_model": model})
        return SubmitRequest.of(filled.model_copy(update={"server": None}))
    assert isinstance(request, CommandRequest)
    params = {k: v for k, v in request.params.items() if k != "server"}
    params.setdefault("base_url", base_url)
    if model:
        params.setdefault("model", str(model))
    return request.model_copy(update={"params": params})


def acts_here(
    options: TargetOptions, runs_dir: Path, run_ref: str | None = None, *, new_run: bool = False
) -> bool:
    """Whether a command that acts on runs of the runs dir (serve start|ready|stop, drain,
    inspect) runs in this process for a `--target` of this kind: yes when the kind keeps its
    runs as local run directories (PLAN, no far agent: Slurm's tracker and group record are
    here). Unless it starts a `new_run` (serve start), it must name its RUN, and that run must
    have run on that kind (its record says so): the runs dir also holds runs of other kinds."""
    from proctor.supervise.launch import resolve_run
    from proctor.targets.registry import kind_of_run

    kind = kind_named(options.kind)
    if AGENT in kind.capabilities or PLAN not in kind.capabilities:
        return False
    if new_run:
        return True
    if not run_ref:
        raise UsageError(
            f"with --target {options.url}, name the run to act on",
            hint="RUN: the id serve start printed",
        )
    run = resolve_run(runs_dir, run_ref)
    ran_on = kind_of_run(run.path)
    if ran_on.kind != kind.kind:
        raise UsageError(
            f"run {run.run_id} ran on a {ran_on.kind} target, not {kind.kind}",
            hint=f"drop --target, or give a run of {kind.syntax}",
        )
    return True


__all__ = [
    "GroupRun",
    "WorkflowRun",
    "acts_here",
    "group_exit_status",
    "group_report",
    "job_from_flags",
    "job_spec",
    "not_detached",
    "release_all",
    "run_far",
    "run_group",
    "run_planned",
    "run_workflow",
    "setup_script",
]

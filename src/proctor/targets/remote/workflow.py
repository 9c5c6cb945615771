"""The server workflow and workloads on a remote target (`--target` for serve, drain, inspect,
flow, bench, sweep, eval, offline): each command's typed request (a job's submission, or a
step) runs on the far side, next to the GPU, through `python -m proctor.jobs`.

One command = one supervised far job (run_remote: prepare with the far venv, sync the exact
source, setup once, start, follow, fetch + verify, release) whose command is
`python -m proctor.targets.remote.step` (step.py). Where the inner command's runs go:

  nested (flow)   inside the job's run dir, `steps/`: every step's run directory (server,
                  workload, the flow record) is fetched and verified with the job, under its one
                  manifest, and indexed in the local store.
  shared (others) the far runs dir itself (`<ws>/proctor/runs`), so a server started by
                  `serve start --target` is found by later `serve ready|stop`, `drain`,
                  `bench --server`, `eval --server` with the same --target, and drain sees the
                  bench runs that name it, as locally. The runs the command made or touched
                  (from its --json answer) are fetched next to the job as their own local runs,
                  each with `.remote.json`, unless still live (a started server): those are
                  fetched by the `serve stop --target` that ends them, or `runs attach`.

The local exit code is the inner command's (the job's status passes through), after the
usual completion checks (unknown 6 > unverified 2 > cleanup 69 > time limit 4).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, Any

from proctor.errors import FaultDetected
from proctor.record.finish import now_iso
from proctor.record.recorder import Recorder
from proctor.record.rundir import RunDir, write_atomic
from proctor.record.schema import view_record
from proctor.results.cost import read_cost
from proctor.source.identity import SourceIdentity
from proctor.targets.base import AGENT, JobSpec, Prepared, Target, capable
from proctor.targets.remote.orchestrate import (
    FAR_PYTHON,
    REMOTE_FILE,
    Completion,
    RemoteOptions,
    finish_remote,
    read_remote,
    run_remote,
    run_setup,
)
from proctor.targets.remote.requests import StepRequest, SubmitRequest
from proctor.targets.remote.shipfiles import Shipment, ship_files, shipped_digests
from proctor.targets.remote.step import REQUEST_ENV, run_ids_in

STEP_MODULE = "proctor.targets.remote.step"


@dataclass
class WorkflowCommand:
    """A proctor command to run far away, as a typed request: a typed job's submission
    (bench, sweep, eval, offline, flow, server grid), or a server workflow step (serve
    start|ready|stop, drain, inspect); with `answer`, the request asks for its JSON answer and
    its stdout is kept."""

    request: SubmitRequest | StepRequest
    nested: bool = False
    answer: bool = False
    leave_live: bool = False  # serve start: its server keeps running; do not wait for it
    direct: bool = False  # run it in an agent call, not a job (it only starts detached runs)
    # The user's --detach (bench, eval): a kind that runs the command as one job (Slurm)
    # submits it and returns its run id; `proctor runs wait|attach RUN` follow it.
    detach: bool = False
    name: str | None = None
    grace_s: float | None = 120.0  # a stopped flow still tears its server down
    timeout_s: float | None = None  # the far wrapper's own cap (a pod's time budget)
    shipment: Shipment = field(default_factory=Shipment)  # read by the command: shipped first


@dataclass
class ChildRun:
    run_id: str
    local_dir: str
    live: bool = False
    verified: bool = False
    outcome: str | None = None
    exit_code: int | None = None
    cost: dict[str, Any] | None = None  # a bench's .cost.json on a priced machine

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class WorkflowResult:
    completion: Completion
    answer: Any = None
    children: list[ChildRun] = field(default_factory=list)
    flow: dict[str, Any] | None = None  # the flow's record (nested)
    direct_exit: int | None = None  # a direct command's own exit code (no job)
    stderr: str = ""  # a direct command's stderr (its messages)

    def to_dict(self) -> dict[str, Any]:
        return {
            "completion": self.completion.to_dict(),
            "answer": self.answer,
            "children": [c.to_dict() for c in self.children],
            "flow": self.flow,
            "exit_code": self.direct_exit,
        }

    def exit_status(self) -> int:
        """The job's status (raising what decides it); then children fetched unverified: 2."""
        code = self.direct_exit if self.direct_exit is not None else self.completion.exit_status()
        bad = [c.run_id for c in self.children if not c.live and not c.verified]
        if bad:
            raise FaultDetected(
                f"fetched runs do not match their far manifests: {', '.join(bad)}",
                hint="fetch again: proctor runs attach ID",
            )
        return code


def job_for(command: WorkflowCommand) -> JobSpec:
    argv = [FAR_PYTHON, "-m", STEP_MODULE, "--steps", "nested" if command.nested else "shared"]
    argv += ["--answer"] if command.answer else []
    request = command.request
    # The request reaches the step through the job's environment only (it may hold --env
    # values): masked in every record; the record keeps the command and its job's (or step's)
    # kind.
    if isinstance(request, SubmitRequest):
        said: dict[str, Any] = {"command": request.command, "job": request.parsed().kind}
    else:
        said = {"command": request.command, "step": request.step.kind}
    return JobSpec(
        argv=argv,
        name=command.name or f"remote-{'-'.join(request.command)}",
        env={REQUEST_ENV: request.model_dump_json()},
        secret_names=[REQUEST_ENV],
        grace_s=command.grace_s,
        timeout_s=command.timeout_s,
        gpu_sample_s=0,
        extra={"request": said},
    )


def run_workflow_remote(
    target: Target,
    identity: SourceIdentity,
    command: WorkflowCommand,
    runs_dir: Path,
    out: IO[bytes],
    options: RemoteOptions | None = None,
) -> WorkflowResult:
    """Run `command` on `target` as one far job; fetch what it made; see the module docstring."""
    opts = options or RemoteOptions()
    if command.direct:
        return _run_direct(target, identity, command, runs_dir, opts)
    if command.shipment:
        opts = replace(
            opts, before_start=lambda far, prepared, job: _ship(far, prepared, job, command)
        )
    completion = run_remote(target, identity, job_for(command), runs_dir, out, opts)
    result = WorkflowResult(completion)
    if completion.local_dir is None or not completion.logs_local:
        return result
    local = Path(completion.local_dir)
    base = read_remote(local)
    answer_file = local / "answer.json"
    if answer_file.is_file():
        try:
            result.answer = json.loads(answer_file.read_text(encoding="utf-8"))
        except json.JSONDecodeError:
            result.answer = None
    children = _read_json(local / "children.json")
    if command.nested:
        steps = local / "steps"
        for run_id in children.get("runs", []):
            run = RunDir(steps / run_id)
            record = run.read_json("record.json") or {}
            typed = view_record(record, run.run_id)
            if typed.kind == "flow":
                result.flow = record
            child = ChildRun(
                run_id,
                str(run.path),
                verified=completion.logs_verified,
                outcome=typed.outcome if record else None,
                exit_code=_exit_code(run),
                cost=read_cost(run.path),
            )
            result.children.append(child)
        return result
    for run_id in children.get("runs", []):
        result.children.append(_adopt(target, base, runs_dir / run_id, run_id, command, opts))
    return result


def _ship(target: Target, prepared: Prepared, job: JobSpec, command: WorkflowCommand) -> None:
    """Store the command's files in the far workspace; the job's request names the far copies."""
    assert isinstance(command.request, SubmitRequest)  # a step reads no local file
    request = ship_files(target, prepared.workspace, command.request, command.shipment)
    job.env[REQUEST_ENV] = request.model_dump_json()
    job.extra["request"]["files"] = shipped_digests(command.shipment)


def _run_direct(
    target: Target,
    identity: SourceIdentity,
    command: WorkflowCommand,
    runs_dir: Path,
    opts: RemoteOptions,
) -> WorkflowResult:
    """Prepare, sync, setup, then `proctor ARGS` in one agent call (agent.run_proctor)."""
    from proctor.errors import ProctorError, UsageError
    from proctor.targets.remote.orchestrate import source_view

    far = capable(target, AGENT)
    if far is None:
        raise UsageError(f"target {target.kind} cannot run proctor commands directly")
    info = target.describe()
    completion = Completion(None, None, info.to_record(), source_view(identity))
    try:
        prepared = target.prepare()
        synced = target.sync_source(identity, existing=opts.existing_checkout)
        setup = run_setup(target, opts.setup_script, synced.checkout)
        far_runs = f"{prepared.workspace}/proctor/runs"
        shipped: SubmitRequest | StepRequest = command.request
        if command.shipment:  # a step reads no local file: only a submission ships any
            assert isinstance(shipped, SubmitRequest)
            shipped = ship_files(target, prepared.workspace, shipped, command.shipment)
        request = {
            "request": shipped.model_dump(mode="json"),
            "checkout": synced.checkout,
            "runs_dir": far_runs,
            "identity": identity.model_dump(mode="json"),
        }
        answer = far.agent("proctor", request, timeout=600)
    except ProctorError as error:
        completion.error, completion.error_type = error.one_line(), type(error).__name__
        raise
    completion.source = source_view(identity, synced)
    completion.far = {
        "workspace": prepared.workspace,
        "python": prepared.python,
        "env_sh": prepared.env_sh,
        "setup": setup,
        "checkout": synced.checkout,
        "venv": (prepared.found.get("venv") or {}).get("venv"),
    }
    completion.result_known, completion.exit_code = True, int(answer["exit_code"])
    result = WorkflowResult(
        completion, direct_exit=int(answer["exit_code"]), stderr=str(answer.get("stderr") or "")
    )
    try:
        result.answer = json.loads(str(answer.get("stdout") or ""))
    except json.JSONDecodeError:
        result.answer = None
    base = {
        "schema_version": 1,
        "target": info.to_record(),
        "prepared": {**prepared.to_record(), "setup": setup},
        "remote_dir": f"{far_runs}/_",
        "source": completion.source,
        "run_id": None,
    }
    step_ids = run_ids_in(result.answer)
    for run_id in step_ids:
        result.children.append(_adopt(target, base, runs_dir / run_id, run_id, command, opts))
    return result


def _adopt(
    target: Target,
    job: dict[str, Any],
    local: Path,
    run_id: str,
    command: WorkflowCommand,
    opts: RemoteOptions,
) -> ChildRun:
    """Make a far run of the shared runs dir a local remote run: `.remote.json`, then (unless
    it is still live and meant to stay so) wait, fetch, verify and index it."""
    local.mkdir(parents=True, exist_ok=True)
    remote_dir = str(Path(str(job["remote_dir"])).parent / run_id)
    existing = _read_json(local / REMOTE_FILE)
    view = {
        **job,
        "run_id": run_id,
        "remote_dir": remote_dir,
        "log": None,
        "attached": False,
        "job": existing.get("job") or {"made_by": job["run_id"]},
        "release": {"on_finish": False},  # the machine is released by the command's own job
        "created_at": existing.get("created_at") or now_iso(),
    }
    write_atomic(
        local / REMOTE_FILE, json.dumps(view, indent=2, default=str, allow_nan=False) + "\n"
    )
    status = target.status(run_id)
    if command.leave_live and not status.done:
        if not (local / "record.json").exists():
            Recorder(RunDir(local), {}).start(
                {
                    "kind": "remote",
                    "outcome": "running",
                    "target": job["target"],
                    "remote_dir": remote_dir,
                    "source": job.get("source"),
                }
            )
        return ChildRun(run_id, str(local), live=True, outcome="running")
    done = finish_remote(
        target, local, None, follow=False, release=False, store_path=opts.store_path
    )
    return ChildRun(
        run_id,
        str(local),
        verified=done.logs_verified,
        outcome=done.outcome,
        exit_code=done.exit_code,
        cost=done.cost,
    )


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def _exit_code(run: RunDir) -> int | None:
    from proctor.record.status import read_exit_status

    status = read_exit_status(run)  # "130 stopped 143 SIGTERM": its first word
    return status.code if status is not None else None


__all__ = ["ChildRun", "WorkflowCommand", "WorkflowResult", "job_for", "run_workflow_remote"]

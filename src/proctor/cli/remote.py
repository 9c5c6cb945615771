"""What `proctor run --target ...` and `proctor runs ...` use for remote runs (thin glue).

Flags over proctor.toml: `[remote]` (workspace, python, env_sh, setup, identity_file,
known_hosts, jump) and `[runpod]` (gpu_type, gpu_count, pods, image, cloud_type, data_center,
container_disk_gb, volume, volume_mount_path, max_time, max_cost, name). A top-level
`setup = "scripts/setup.sh"` is read too.

`--target` on serve/drain/flow/bench/eval: `remote_command(ctx, target, ...)` forwards the
options the user set to the same command run far away (targets/remote/workflow.py).
"""

from __future__ import annotations

import io
import json
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import click

from proctor.cli.output import err_console, print_json
from proctor.errors import ProctorError, UsageError
from proctor.record.rundir import new_run_id, write_atomic
from proctor.source.identity import source_identity
from proctor.spec.config import ProjectConfig
from proctor.spec.durations import parse_duration
from proctor.spec.plan import RunFlags
from proctor.targets.base import JobSpec, Target
from proctor.targets.remote.orchestrate import (
    Completion,
    RemoteOptions,
    _release_into,
    resume_remote,
    run_remote,
)
from proctor.targets.ssh import SshOptions, SshTarget, parse_ssh_url

if TYPE_CHECKING:
    from proctor.targets.remote.workflow import WorkflowResult


@dataclass
class RemoteFlags:
    target: str
    identity_file: str | None = None
    known_hosts: str | None = None
    insecure_accept_host_key: bool = False
    jump: str | None = None
    workspace: str | None = None
    remote_python: str | None = None
    remote_checkout: str | None = None
    reuse_pods: list[str] = field(default_factory=list)
    pods: int | None = None
    gpu_type: str | None = None
    gpu_count: int | None = None
    image: str | None = None
    max_time: str | None = None
    max_cost: float | None = None
    keep: bool = False
    terminate: bool = False
    allow_terminate: bool = False
    allow_create_volume: bool = False
    allow_other_volume: bool = False
    allow_gpu_substitution: bool = False
    allow_more_capacity: bool = False
    api_url: str | None = None


def job_from_flags(flags: RunFlags, config: ProjectConfig) -> JobSpec:
    if not flags.argv:
        raise UsageError("no command given", hint="write it after --: proctor run --target T -- CMD")
    env = dict(config.run.env)
    for item in flags.env:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise UsageError(f"invalid --env {name!r}", hint="write --env NAME=VALUE")
        env[name] = value
    timeout = flags.timeout or config.run.timeout
    grace = flags.grace or config.run.grace
    return JobSpec(
        argv=list(flags.argv), name=flags.name, env=env,
        secret_names=list(config.run.secret_names),
        timeout_s=parse_duration(timeout, option="--timeout") if timeout else None,
        grace_s=parse_duration(grace, option="--grace") if grace else None,
        gpu_sample_s=flags.gpu_sample if flags.gpu_sample is not None else config.run.gpu_sample,
        key=flags.key, cwd=flags.cwd,
    )  # fmt: skip


def ssh_options(rf: RemoteFlags, config: ProjectConfig, url: str | None) -> SshOptions:
    remote = config.table("remote")

    def pick(flag: Any, key: str) -> Any:
        return flag if flag not in (None, "") else remote.get(key)

    kwargs: dict[str, Any] = {
        "identity_file": pick(rf.identity_file, "identity_file"),
        "known_hosts": pick(rf.known_hosts, "known_hosts"),
        "insecure_accept_host_key": rf.insecure_accept_host_key,
        "jump": pick(rf.jump, "jump"),
        "workspace": pick(rf.workspace, "workspace"),
        "remote_python": pick(rf.remote_python, "python"),
        "env_sh": remote.get("env_sh"),
        "venv_base": remote.get("venv_base"),
    }
    if not rf.insecure_accept_host_key and remote.get("insecure_accept_host_key"):
        kwargs["insecure_accept_host_key"] = True
    for key in ("connect_budget_s", "reconnect_s"):
        if remote.get(key) is not None:
            kwargs[key] = float(remote[key])
    if url is None:
        return SshOptions(host="", **kwargs)
    return parse_ssh_url(url, **kwargs)


def setup_script(config: ProjectConfig) -> str | None:
    value = config.table("remote").get("setup") or (config.model_extra or {}).get("setup")
    return str(value) if value else None


def run_with_target(flags: RunFlags, rf: RemoteFlags, config: ProjectConfig, runs_dir: Path,
                    as_json: bool) -> int:  # fmt: skip
    """`proctor run --target ...`: returns the exit code (raising the deciding ProctorError)."""
    job = job_from_flags(flags, config)
    identity = source_identity(Path(flags.cwd or ".").resolve())
    options = RemoteOptions(existing_checkout=rf.remote_checkout, setup_script=setup_script(config),
                            detach=flags.detach)  # fmt: skip
    if is_runpod_target(rf.target):
        return _run_runpod(identity, job, rf, config, runs_dir, as_json, options)
    if not rf.target.startswith("ssh://"):
        raise UsageError(f"unknown --target {rf.target!r}",
                         hint="use local, ssh://user@host[:port] or runpod")  # fmt: skip
    target = SshTarget(ssh_options(rf, config, rf.target))
    try:
        completion = run_remote(target, identity, job, runs_dir, _log_out(as_json), options)
    finally:
        target.close()
    return report(completion, as_json)


def report(completion: Completion, as_json: bool) -> int:
    if as_json:
        print_json(completion.to_dict())
    elif completion.detached:
        err_console.print(f"proctor: started remote run {completion.run_id} ({completion.local_dir})")
        sys.stdout.write(f"{completion.run_id}\n")
    else:
        err_console.print(completion.text(), highlight=False, markup=False)
    return completion.exit_status()


def attach(local_dir: Path, *, follow: bool, as_json: bool) -> int:
    """`proctor runs attach|wait ID` for a remote run: reconnect, fetch, verify, release."""
    out = _log_out(as_json) if follow else None
    return report(resume_remote(local_dir, out, follow=follow), as_json)


def _run_runpod(identity: Any, job: JobSpec, rf: RemoteFlags, config: ProjectConfig,
                runs_dir: Path, as_json: bool, options: RemoteOptions) -> int:  # fmt: skip
    from proctor.targets.runpod.target import release_all

    if rf.target.startswith("runpod:"):
        choice = parse_runpod_target(rf.target)
        rf.reuse_pods = [*rf.reuse_pods, *choice.reuse]
    targets, budget, group = acquire_pods(identity, rf, config)
    if budget.max_time_s is not None:
        # The far wrapper stops the command at the budget even without this controller.
        left = max(1.0, budget.deadline() - budget.started_at)
        job.timeout_s = min(job.timeout_s or left, left)
    job.group = group if len(targets) > 1 else None
    try:
        completions = run_group(targets, identity, job, runs_dir, options, _log_out(as_json))
    except ProctorError:
        release_all(targets)
        raise
    finally:
        for t in targets:
            t.close()
    if len(completions) == 1:
        return report(completions[0], as_json)
    return group_report(group, completions, runs_dir, as_json)


@dataclass
class PodChoice:
    """What a `--target runpod[:ID[,ID]][?keep&max-cost=N...]` string asks for."""

    reuse: list[str] = field(default_factory=list)
    keep: bool = False
    terminate: bool = False
    allow_terminate: bool = False
    max_time: str | None = None
    max_cost: float | None = None


RUNPOD_TARGET_HINT = ("use runpod (a new pod from [runpod] in proctor.toml), runpod:POD_ID to "
                      "reuse a pod, options after ?: keep, terminate, allow-terminate, "
                      "max-time=30m, max-cost=2.5 (e.g. runpod:abc123?keep)")  # fmt: skip


def is_runpod_target(target: str) -> bool:
    return target == "runpod" or target.startswith(("runpod:", "runpod?"))


def parse_runpod_target(target: str) -> PodChoice:
    """`runpod`, `runpod:ID`, `runpod://ID,ID2`, each optionally `?keep&max-cost=2.5`."""
    head, _, query = target.partition("?")
    if head != "runpod" and not head.startswith("runpod:"):
        raise UsageError(f"not a Runpod target: {target!r}", hint=RUNPOD_TARGET_HINT)
    ids = head[len("runpod:"):].lstrip("/") if head.startswith("runpod:") else ""
    choice = PodChoice(reuse=[i for i in ids.split(",") if i])
    for item in (q for q in query.split("&") if q):
        key, sep, value = item.partition("=")
        flag = key.replace("_", "-")
        if flag in ("keep", "terminate", "allow-terminate") and not sep:
            setattr(choice, flag.replace("-", "_"), True)
        elif flag == "max-time" and value:
            choice.max_time = value
        elif flag == "max-cost" and value:
            try:
                choice.max_cost = float(value)
            except ValueError:
                raise UsageError(f"max-cost={value!r} in --target is not a number",
                                 hint="write e.g. runpod?max-cost=2.5") from None  # fmt: skip
        else:
            raise UsageError(f"unknown option {item!r} in --target {head}", hint=RUNPOD_TARGET_HINT)
    if choice.keep and choice.terminate:
        raise UsageError("keep and terminate contradict each other", hint="pick one")
    return choice


def acquire_pods(
    identity: Any, rf: RemoteFlags, config: ProjectConfig
) -> tuple[list[Any], Any, str]:
    """Resolve the pod configuration (flags over [runpod]), the budget (starting now) and the
    volume; acquire or reuse the pods. Returns (targets, budget, group run id)."""
    from proctor.targets.runpod import Budget, Grants, PodSpec, RunpodClient, resolve_volume
    from proctor.targets.runpod.target import ReleasePolicy, acquire_targets

    rp = config.table("runpod")
    max_time = rf.max_time or rp.get("max_time")
    max_cost = rf.max_cost if rf.max_cost is not None else rp.get("max_cost")
    budget = Budget.starting_now(
        parse_duration(str(max_time), option="--max-time") if max_time else None,
        float(max_cost) if max_cost is not None else None,
    )
    gpu_type = rf.gpu_type or rp.get("gpu_type")
    image = rf.image or rp.get("image")
    if not rf.reuse_pods and (not gpu_type or not image):
        raise UsageError("a new pod needs a GPU type and an image",
                         hint="pass --gpu-type and --image, or set them in [runpod], or --pod ID")  # fmt: skip
    spec = PodSpec(
        gpu_type=str(gpu_type or "unknown"), image=str(image or "unknown"),
        gpu_count=int(rf.gpu_count or rp.get("gpu_count") or 1),
        pod_count=int(rf.pods or rp.get("pods") or 1),
        cloud_type=rp.get("cloud_type", "SECURE"), data_center=rp.get("data_center"),
        container_disk_gb=int(rp.get("container_disk_gb", 50)),
        volume_mount_path=str(rp.get("volume_mount_path", "/workspace")),
        name=str(rp.get("name", "proctor")),
    )  # fmt: skip
    policy = ReleasePolicy(keep=rf.keep, terminate=rf.terminate, allow_terminate=rf.allow_terminate)
    grants = Grants(rf.allow_gpu_substitution, rf.allow_more_capacity, rf.allow_terminate)
    if policy.terminate and not policy.allow_terminate:
        from proctor.errors import NotAuthorised

        raise NotAuthorised("--terminate deletes the pod disk; stop keeps it",
                            flag="--allow-terminate")  # fmt: skip
    group = new_run_id()
    with RunpodClient(base_url=rf.api_url or rp.get("api_url")) as client:
        volume = None
        if rp.get("volume") or rf.allow_create_volume:
            project = str(rp.get("project") or Path(identity.repo_root or ".").name)
            volume = resolve_volume(
                client, project=project, name=rp.get("volume"), data_center=spec.data_center,
                allow_create_volume=rf.allow_create_volume,
                allow_other_volume=rf.allow_other_volume,
            ).volume  # fmt: skip
        targets = acquire_targets(
            client, spec, run_id=group, ssh_base=ssh_options(rf, config, None),
            volume=volume, reuse_ids=rf.reuse_pods, grants=grants, policy=policy,
            budget=budget, api_url=client.base_url,
        )  # fmt: skip
    return targets, budget, group


def _log_out(as_json: bool) -> IO[bytes]:
    # With --json, stdout carries only the report; the followed log goes to stderr.
    return sys.stderr.buffer if as_json else sys.stdout.buffer


def run_group(targets: list[Any], identity: Any, job: JobSpec, runs_dir: Path,
              options: RemoteOptions, out: IO[bytes]) -> list[Completion]:  # fmt: skip
    """The same job on every target at once, each its own run; one completion per target."""
    if len(targets) == 1:
        return [run_remote(targets[0], identity, job, runs_dir, out, options)]
    results: list[Completion | BaseException | None] = [None] * len(targets)

    def one(i: int, target: Target) -> None:
        try:
            results[i] = run_remote(target, identity, JobSpec(**{**job.__dict__}), runs_dir,
                                    io.BytesIO(), options)  # fmt: skip
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
            failed = Completion(None, None, info, {"source_id": identity.source_id},
                                error=str(result), error_type=type(result).__name__)  # fmt: skip
            if isinstance(result, ProctorError):
                failed.error = result.one_line()
            done.append(failed)
    return done


def group_report(group: str, completions: list[Completion], runs_dir: Path, as_json: bool) -> int:
    codes: list[int] = []
    errors: list[ProctorError] = []
    for c in completions:
        try:
            codes.append(c.exit_status())
        except ProctorError as error:
            errors.append(error)
    data = {"group": group, "runs": [c.to_dict() for c in completions],
            "all_known": all(c.result_known for c in completions),
            "all_verified": all(c.logs_verified for c in completions),
            "all_released": all(c.release_verified for c in completions)}  # fmt: skip
    path = runs_dir / ".groups" / f"{group}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(data, indent=2, default=str) + "\n")
    if as_json:
        print_json(data)
    else:
        for c in completions:
            err_console.print(c.text(), highlight=False, markup=False)
        err_console.print(f"group {group}: {len(completions)} runs; report {path}")
    if errors:
        raise errors[0]
    return max(codes) if codes else 0


# -- the workflow commands with --target -----------------------------------------------------
TARGET_HELP = ("ssh://user@host[:port] or runpod[:POD_ID][?keep&max-cost=N]: run this command "
               "there, next to the GPU, with proctor in <ws>/proctor/venv; SSH settings from "
               "[remote], pods from [runpod] in proctor.toml (docs/remote.md, docs/runpod.md).")  # fmt: skip
# Options whose meaning is local (where the local runs go, how output is shown): not forwarded.
LOCAL_ONLY = {"target", "runs_dir", "as_json", "json_out"}


def command_names(ctx: click.Context) -> list[str]:
    """["serve", "start"] for `proctor serve start`."""
    names: list[str] = []
    while ctx.parent is not None:
        names.append(str(ctx.info_name))
        ctx = ctx.parent
    return names[::-1]


def forward_args(ctx: click.Context, *, as_json: bool = False) -> list[str]:
    """The command line for the far side: the command's names and every option and argument
    the user set (defaults stay the far side's defaults); `--json` where asked."""
    argv = command_names(ctx) + (["--json"] if as_json else [])
    positional: list[str] = []
    rest: list[str] = []
    for param in ctx.command.params:
        name = param.name
        if name is None or name in LOCAL_ONLY:
            continue
        source = ctx.get_parameter_source(name)
        value = ctx.params.get(name)
        if source in (None, click.core.ParameterSource.DEFAULT) or value is None:
            continue
        if isinstance(param, click.Argument):
            values = [str(v) for v in value] if isinstance(value, (list, tuple)) else [str(value)]
            (rest if param.nargs == -1 else positional).extend(values)
            continue
        if not isinstance(param, click.Option):
            continue
        if param.is_flag:
            if param.secondary_opts:
                argv.append(param.opts[0] if value else param.secondary_opts[0])
            elif value:
                argv.append(param.opts[0])
        elif isinstance(value, (list, tuple)):
            for item in value:
                argv += [param.opts[0], str(item)]
        else:
            argv += [param.opts[0], str(value)]
    argv += positional
    if rest:
        argv += ["--", *rest]
    return argv


def remote_command(ctx: click.Context, target: str, *, runs_dir: str | None, as_json: bool,
                   nested: bool = False, answer: bool = False, leave_live: bool = False,
                   print_run: bool = False, direct: bool = False) -> int:  # fmt: skip
    """Run the current command on `target`; returns its exit code (raising what decides it)."""
    from proctor.spec.config import load_config
    from proctor.spec.plan import resolve_runs_dir, resolve_store_path
    from proctor.targets.remote.workflow import WorkflowCommand, run_workflow_remote

    if not target.startswith("ssh://") and not is_runpod_target(target):
        raise UsageError(f"--target {target!r} is not supported for this command",
                         hint="use ssh://user@host[:port] or runpod[:POD_ID]")  # fmt: skip
    config = load_config()
    local_runs = Path(resolve_runs_dir(runs_dir, config).value)
    command = WorkflowCommand(forward_args(ctx, as_json=answer), nested=nested, answer=answer,
                              leave_live=leave_live, direct=direct)  # fmt: skip
    options = RemoteOptions(setup_script=setup_script(config),
                            store_path=Path(resolve_store_path(config, local_runs).value))  # fmt: skip
    identity = source_identity(Path(".").resolve())
    pod: dict[str, Any] | None = None
    result: WorkflowResult
    if is_runpod_target(target):
        command.name = f"runpod-{'-'.join(a for a in command.args[:2] if not a.startswith('-'))}"
        result, pod = _workflow_on_pod(ctx, target, command, config, identity, local_runs,
                                       options, _log_out(as_json))  # fmt: skip
    else:
        ssh = SshTarget(ssh_options(RemoteFlags(target), config, target))
        try:
            result = run_workflow_remote(ssh, identity, command, local_runs, _log_out(as_json),
                                         options)  # fmt: skip
        finally:
            ssh.close()
    if result.stderr and not as_json:
        sys.stderr.write(result.stderr)
    if as_json:
        print_json({**result.to_dict(), **({"pod": pod} if pod is not None else {})})
        return result.exit_status()
    if pod is not None:
        err_console.print(pod_text(pod), highlight=False, markup=False)
    if result.direct_exit is None:
        err_console.print(result.completion.text(), highlight=False, markup=False)
    for child in result.children:
        state = "live" if child.live else (
            f"{child.outcome}, exit {child.exit_code}, "
            + ("verified" if child.verified else "NOT verified"))  # fmt: skip
        err_console.print(f"proctor: run {child.run_id}: {state} ({child.local_dir})",
                          highlight=False, markup=False)  # fmt: skip
    if print_run and result.children:
        live = [c.run_id for c in result.children if c.live] or [result.children[0].run_id]
        sys.stdout.write(f"{live[0]}\n")
    return result.exit_status()


# Commands whose server outlives them on the pod: its pod is kept running unless told otherwise.
_SERVER_LIVES = {("serve", "start"), ("serve", "ready"), ("drain",)}


def _workflow_on_pod(ctx: click.Context, target: str, command: Any, config: ProjectConfig,
                     identity: Any, local_runs: Path, options: RemoteOptions,
                     out: IO[bytes]) -> tuple[WorkflowResult, dict[str, Any]]:  # fmt: skip
    """`--target runpod...` on a workflow command: acquire or reuse the pod, run the command
    there as for ssh://, release with the final state verified; the result and the pod view."""
    from proctor.targets.remote.workflow import run_workflow_remote
    from proctor.targets.runpod.target import RunpodTarget

    choice = parse_runpod_target(target)
    names = tuple(command_names(ctx))
    server_lives = command.leave_live or names[:2] in _SERVER_LIVES or (
        names[:1] in _SERVER_LIVES) or (
        names[:1] in (("bench",), ("eval",)) and bool(ctx.params.get("server")))  # fmt: skip
    keep = choice.keep or (server_lives and not choice.terminate)
    rf = RemoteFlags(target, reuse_pods=choice.reuse, max_time=choice.max_time,
                     max_cost=choice.max_cost, keep=keep, terminate=choice.terminate,
                     allow_terminate=choice.allow_terminate)  # fmt: skip
    targets, budget, _ = acquire_pods(identity, rf, config)
    if len(targets) != 1:
        for t in targets:
            t.release()
            t.close()
        raise UsageError(f"this command runs on one pod, not {len(targets)}",
                         hint="set [runpod] pods = 1, or name one pod: runpod:POD_ID")  # fmt: skip
    pod: RunpodTarget = targets[0]
    if budget.max_time_s is not None:
        command.timeout_s = max(1.0, budget.deadline() - time.time())
    try:
        result = run_workflow_remote(pod, identity, command, local_runs, out, options)
        if command.direct:  # no job, so nothing released it yet (kept: its server lives)
            _release_into(pod, result.completion, None)
    except ProctorError:
        pod.release()  # run_remote released already where it could; this is idempotent
        raise
    finally:
        pod.close()
    released = pod.released
    view = {"pod_id": pod.pod_id, "pod": pod.pod, "kept": keep,
            "kept_because": "a server or detached run lives on it" if keep and not choice.keep
            else None,
            "release": released.to_record() if released else None,
            "release_verified": released.verified if released else None,
            "budget": pod.budget_view(), "watchdog": pod.watchdog}  # fmt: skip
    return result, view


def pod_text(view: dict[str, Any]) -> str:
    pod = view.get("pod") or {}
    release = view.get("release") or {}
    state = ", ".join(f"{s.get('desired_status') or 'gone'}" for s in release.get("states") or [])
    gpu = pod.get("gpu_name") or pod.get("gpu_type_id")
    verified = "(verified through the API)" if view.get("release_verified") else "(NOT verified)"
    lines = [f"pod {view['pod_id']}: {pod.get('gpu_count')}x {gpu}, {pod.get('cost_per_hr')}/hr; "
             f"final state {state or 'unknown'} {verified}"]  # fmt: skip
    if view.get("kept_because"):
        lines.append(f"  kept running: {view['kept_because']}")
    budget = view.get("budget") or {}
    if budget.get("max_time_s") or budget.get("max_cost"):
        stopped = budget.get("limit_reached")
        lines.append(f"  budget: {budget.get('elapsed_s')}s, spent {budget.get('spent')} of "
                     f"max_time {budget.get('max_time_s')}s / max_cost {budget.get('max_cost')}"
                     + (f"; STOPPED: {stopped}" if stopped else ""))  # fmt: skip
    return "\n".join(lines)


def hand_off(target: str, *, runs_dir: str | None, as_json: bool, **how: bool) -> None:
    """From inside a command given `--target`: run it there, exit with its code."""
    code = remote_command(click.get_current_context(), target, runs_dir=runs_dir,
                          as_json=as_json, **how)  # fmt: skip
    if code:
        raise click.exceptions.Exit(code)


__all__ = ["TARGET_HELP", "PodChoice", "RemoteFlags", "acquire_pods", "attach", "forward_args",
           "hand_off", "is_runpod_target", "job_from_flags", "parse_runpod_target", "pod_text",
           "remote_command", "report", "run_with_target", "ssh_options"]  # fmt: skip

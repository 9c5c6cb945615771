"""What `proctor run --target ...` and `proctor runs ...` use for remote runs (thin glue).

Flags over proctor.toml: `[remote]` (workspace, python, env_sh, setup, identity_file,
known_hosts, jump) and `[runpod]` (gpu_type, gpu_count, pods, image, cloud_type, data_center,
container_disk_gb, volume, volume_mount_path, max_time, max_cost, name). A top-level
`setup = "scripts/setup.sh"` is read too.
"""

from __future__ import annotations

import io
import json
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from proctor.cli.output import err_console, print_json
from proctor.errors import ProctorError, UsageError
from proctor.record.rundir import new_run_id, write_atomic
from proctor.source.identity import source_identity
from proctor.spec.config import ProjectConfig
from proctor.spec.durations import parse_duration
from proctor.spec.plan import RunFlags
from proctor.targets.base import JobSpec, Target
from proctor.targets.remote.orchestrate import Completion, RemoteOptions, resume_remote, run_remote
from proctor.targets.ssh import SshOptions, SshTarget, parse_ssh_url


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
    }
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
    if rf.target == "runpod" or rf.target.startswith("runpod:"):
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
    from proctor.targets.runpod import Budget, Grants, PodSpec, RunpodClient, resolve_volume
    from proctor.targets.runpod.target import ReleasePolicy, acquire_targets, release_all

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
    with RunpodClient(base_url=rf.api_url) as client:
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
    if budget.max_time_s is not None:
        # The controller's own enforcement: the far wrapper stops the command at the budget.
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


__all__ = ["RemoteFlags", "attach", "job_from_flags", "report", "run_with_target", "ssh_options"]

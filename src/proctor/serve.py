"""The inference-server workflow as a library: start a server as a detached run, gate on its
readiness, drain its workload, inspect a hang, stop it and give its GPU memory back.

A server is a run of kind "server" whose record carries a `server` section (engine, model,
port, the env and args its profiles applied, the GPU memory baseline at start). Everything
else here reads that record, so each step works from any shell and after a dead controller.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from proctor.errors import TargetUnavailable, UsageError
from proctor.monitors.watch import ProcStatus
from proctor.record.rundir import RunDir, is_run_id
from proctor.record.schema import LaunchedRecord, read_view
from proctor.record.status import run_state
from proctor.spec.config import ProjectConfig
from proctor.spec.plan import RunFlags
from proctor.spec.profiles.models import EngineProfile
from proctor.spec.server import (
    ServerRequest as ServerRequest,
)
from proctor.spec.server import applied_facts, server_plan
from proctor.spec.server import (
    build_command as build_command,
)
from proctor.spec.server import (
    profiles_for as profiles_for,
)
from proctor.spec.server import (
    server_command as server_command,
)
from proctor.spec.server import (
    server_name as server_name,
)
from proctor.supervise.launch import (
    RunSpec,
    Started,
    key_lock,
    live_keyed_run,
    record_of,
    start_run,
)
from proctor.targets.service import SupervisedRun

if TYPE_CHECKING:
    from proctor.targets.base import ServedRun, ServerLaunch
    from proctor.targets.registry import TargetOptions


class RunWatch:
    """A run's main process as monitors see it: alive while the run is; then its exit code."""

    def __init__(self, run: RunDir) -> None:
        self.run = run

    def status(self) -> ProcStatus:
        state = run_state(self.run)
        if state.state in ("running", "starting"):
            return ProcStatus(alive=True)
        return ProcStatus(
            alive=False,
            exit_code=state.exit.code if state.exit else None,
            stopped_by=stopped_by_proctor(self.run),
        )


def stopped_by_proctor(run: RunDir) -> str | None:
    """Why proctor stopped the run itself ("stop: stop requested", "timeout: time limit of 5s
    reached"), or None. The run's supervisor writes that event before it sends a signal."""
    try:
        record = json.loads(run.record_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    events = record.get("events") if isinstance(record, dict) else None
    for event in events if isinstance(events, list) else []:
        if isinstance(event, dict) and event.get("event") in ("stop", "timeout"):
            return f"{event['event']}: {event.get('detail') or ''}".rstrip(": ")
    return None


# -- pre-flight -------------------------------------------------------------------------------
def looks_local(model: str) -> bool:
    """A model that can only be a path on this machine: absolute, relative with ./ or ../ or
    ~, or with more than one slash. `org/model` (a hub name) and a bare name are not."""
    return (
        model.startswith(("/", "./", "../", "~"))
        or model in (".", "..")
        or model.count("/") >= 2
        or model.endswith("/")
    )


def check_startable(request: ServerRequest, config: ProjectConfig) -> None:
    """Refuse, before anything is started or written, a server that cannot start here: a local
    model path that does not exist (64), an engine whose module or command its python cannot
    run (69). `serve start`, `flow` and a server sweep call it first."""
    from proctor.spec.profiles.command import check_runnable

    if looks_local(request.model) and not Path(request.model).exists():
        raise UsageError(
            f"model path {request.model} does not exist",
            hint="give an existing directory or file, or a hub name such as org/model",
        )
    _, _, argv, _, _ = server_command(request, profiles_for(config))
    check_runnable(request.engine, argv)


def port_in_use(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return True
    return False


def preflight(request: ServerRequest, runs_dir: Path) -> dict[str, Any]:
    """Refuse what cannot work (port taken, no disk); report what may hurt (GPU memory held)."""
    if port_in_use(request.host, request.port):
        holder = ""
        with contextlib.suppress(Exception):
            from proctor.monitors.proctree import listener_on_port

            ident = listener_on_port(request.port)
            if ident is not None:
                holder = f" by pid {ident.pid}"
        raise TargetUnavailable(
            f"port {request.port} on {request.host} is already in use{holder}",
            hint="stop that server (proctor serve stop --port P) or choose another --port",
        )
    runs_dir.mkdir(parents=True, exist_ok=True)
    free_gib = shutil.disk_usage(runs_dir).free / 2**30
    if free_gib < request.min_free_disk_gib:
        raise TargetUnavailable(
            f"only {free_gib:.1f} GiB free under {runs_dir}",
            hint=f"free disk space or lower --min-free-disk (now {request.min_free_disk_gib} GiB)",
        )
    from proctor.monitors.gpu import gpu_holders, memory_snapshot

    return {
        "free_disk_gib": round(free_gib, 1),
        "gpu_baseline_mib": {str(k): v for k, v in memory_snapshot().items()},
        "gpu_held_by_others": [{"pid": pid, "mib": mib} for pid, mib in gpu_holders()],
    }


# -- start ------------------------------------------------------------------------------------
def start_server(
    request: ServerRequest,
    config: ProjectConfig,
    *,
    flags: RunFlags | None = None,
    on_applied: Callable[[dict[str, Any]], None] | None = None,
    group: str | None = None,
) -> tuple[Started, dict[str, Any]]:
    """Pre-flight, then the server as a detached run. Returns at once with the run."""
    profiles = profiles_for(config)
    engine, model_profile, argv, env, chat = server_command(request, profiles)
    plan = server_plan(
        flags or RunFlags(argv=argv),
        config,
        argv=argv,
        name=server_name(request),
        env=env,
        origin=f"profile:{engine.name}/{model_profile}",
    )
    applied = applied_facts(
        request,
        plan.redactor(),
        engine=engine.name,
        model_profile=model_profile,
        argv=argv,
        plan=plan,
        chat=chat,
    )
    live = _live_keyed(Path(plan.runs_dir.value), plan.key.value)
    if live is not None:
        # Attach before the pre-flight: the port is taken by this very server, not a conflict.
        recorded = recorded_server(live)
        applied = recorded if "applied_env" in recorded else {**applied, "preflight": {}}
        if on_applied is not None:
            on_applied(applied)
        return Started(live, True, plan.redactor()), applied
    check_startable(request, config)  # after attaching: a live server started already
    applied["preflight"] = preflight(request, Path(plan.runs_dir.value))
    if on_applied is not None:
        on_applied(applied)
    spec = RunSpec(kind="server", group=group, extra={"server": applied})
    return start_run(plan, spec), applied


def _live_keyed(runs_dir: Path, key: object) -> RunDir | None:
    """The live run holding `key`, if any (start_run checks again under its lock)."""
    if not key:
        return None
    with key_lock(runs_dir, str(key)) as key_file:
        return live_keyed_run(key_file)


def start_server_on(
    target: TargetOptions | None,
    request: ServerRequest,
    config: ProjectConfig,
    *,
    flags: RunFlags | None = None,
    launch: ServerLaunch | None = None,
    on_applied: Callable[[dict[str, Any]], None] | None = None,
) -> ServedRun:
    """The server on `target` when its kind starts servers itself (SERVE: Slurm), else here
    (start_server). Either way a local run of kind "server" that `serve ready|stop` and
    `drain` act on."""
    from proctor.targets.base import SERVE, ServedRun, ServerLaunch, capable
    from proctor.targets.registry import TargetContext, kind_named, open_target

    flags = flags or RunFlags(argv=[])
    if target is None or SERVE not in kind_named(target.kind).capabilities:
        if launch is not None and launch != ServerLaunch():
            raise UsageError(
                "--nodes, --parallel, --rpc-port and --wait need a target that "
                "starts servers itself",
                hint="--target slurm://...",
            )
        started, applied = start_server(request, config, flags=flags, on_applied=on_applied)
        return ServedRun(started, applied)
    runs_dir = Path(flags.runs_dir) if flags.runs_dir else None
    opened = open_target(target, TargetContext(config, runs_dir))
    try:
        server = capable(opened, SERVE)
        assert server is not None  # the kind declares SERVE
        served = server.start_server(request, config, flags, launch or ServerLaunch())
    finally:
        opened.close()
    if on_applied is not None:
        on_applied(served.applied)
    return served


# -- finding servers --------------------------------------------------------------------------
def live_runs(runs_dir: Path, kind: str | None = None) -> list[RunDir]:
    if not runs_dir.is_dir():
        return []
    found: list[RunDir] = []
    for path in sorted(runs_dir.iterdir(), reverse=True):
        if not (path.is_dir() and is_run_id(path.name)):
            continue
        run = RunDir(path)
        if kind is not None and read_view(run.path).kind != kind:
            continue
        if run_state(run).state in ("running", "starting"):
            found.append(run)
    return found


def find_server(runs_dir: Path, ref: str | None, port: int | None) -> RunDir | None:
    """The server run named by `ref`, else the live server run on `port`, else the newest live."""
    from proctor.supervise.refs import SERVER_KINDS, resolve_run

    if ref:  # 'last' and a name: the newest server run
        return resolve_run(runs_dir, ref, SERVER_KINDS)
    servers = live_runs(runs_dir, "server")
    if port is not None:
        servers = [s for s in servers if recorded_server(s).get("port") == port]
    return servers[0] if servers else None


def recorded_server(run: RunDir) -> dict[str, Any]:
    """The applied server spec a run records: a server run's, or a Slurm serve group's."""
    facts = read_view(run.path).fact("server")
    return facts if isinstance(facts, dict) else {}


def server_facts(run: RunDir) -> dict[str, Any]:
    facts = read_view(run.path).fact("server")
    if not isinstance(facts, dict):
        raise UsageError(
            f"run {run.run_id} is not a server run", hint="start one with proctor serve start"
        )
    return facts


def engine_of(run: RunDir, config: ProjectConfig) -> EngineProfile:
    return profiles_for(config).engine(str(server_facts(run)["engine"]))


# -- stop -------------------------------------------------------------------------------------
@dataclass
class StopReport:
    run_id: str | None
    was_running: bool
    outcome: str
    gpu_killed: list[int] = field(default_factory=list)
    memory_ok: bool = True
    memory_now_mib: dict[str, float] = field(default_factory=dict)
    baseline_mib: dict[str, float] = field(default_factory=dict)
    holders: list[dict[str, float]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def stop_server(
    run: RunDir,
    *,
    gpu_processes: bool = False,
    vram_timeout_s: float = 60.0,
    wait_s: float = 120.0,
) -> StopReport:
    """Stop a server run (idempotent) and wait for its GPUs to return to the start baseline."""
    from proctor.monitors.gpu import gpu_holders, memory_back_to_baseline

    facts = recorded_server(run)
    supervised = SupervisedRun(run)
    sent = supervised.stop()
    state = supervised.wait(wait_s) if sent else run_state(run)
    baseline = {
        int(k): float(v)
        for k, v in ((facts.get("preflight") or {}).get("gpu_baseline_mib") or {}).items()
    }
    report = StopReport(
        run.run_id, sent, state.state, baseline_mib={str(k): v for k, v in baseline.items()}
    )
    if gpu_processes and baseline:
        for pid, _ in gpu_holders(baseline.keys()):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, 9)
                report.gpu_killed.append(pid)
    if baseline:
        ok, now = memory_back_to_baseline(baseline, timeout_s=vram_timeout_s)
        report.memory_ok = ok
        report.memory_now_mib = {str(k): v for k, v in now.items()}
        if not ok:
            report.holders = [{"pid": pid, "mib": mib} for pid, mib in gpu_holders(baseline.keys())]
    return report


def worker_pids(run: RunDir, engine: EngineProfile) -> list[int]:
    """The server's worker processes (within its tree only), else the server process itself."""
    from proctor.monitors.proctree import ProcessIdentity, descendants, find_workers

    record = read_view(run.path)
    process = record.process if isinstance(record, LaunchedRecord) else None
    if process is None:
        return []
    root = ProcessIdentity(process.pid, process.create_time)
    if not root.is_alive():
        return []
    workers = find_workers(root, engine.worker_patterns)
    pids = [w.pid for w in workers] or [root.pid]
    if root.pid not in pids:
        pids.insert(0, root.pid)
    # Helpers the server spawned outside the patterns are worth a stack too, up to a few.
    extra = [d.pid for d in descendants(root) if d.pid not in pids][:4]
    return pids + extra


__all__ = [
    "RunWatch",
    "ServerRequest",
    "StopReport",
    "engine_of",
    "find_server",
    "live_runs",
    "preflight",
    "profiles_for",
    "record_of",
    "recorded_server",
    "server_facts",
    "start_server",
    "start_server_on",
    "stop_server",
    "worker_pids",
]

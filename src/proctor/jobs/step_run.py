"""`run_step(step, target=None)`: a server workflow step (jobs/steps.py: serve start|ready|stop,
drain, inspect) here, or on a target. What the commands call for both cases, and what the far
side of `--target` calls again (`python -m proctor.jobs step`, the StepRequest on stdin): no CLI
on that path.

Here: the step acts on this runs dir (a server started, gated, drained, inspected, stopped) and
says what it did through a `StepVoice`; under `answer` its JSON document goes to `voice.answer`.
A ready gate or drain that ends otherwise than well returns its exit code (or raises the error
that says why).

With a target: where the target's kind keeps its runs as local run directories (Slurm:
`acts_here`), the step runs here as above, a new server started through the target; else the
step travels as a typed request (targets/remote/requests.py StepRequest) to run there, as one
far job in the far runs dir, or, `Step.direct`, through one agent call; the runs it made or
touched come back as local runs. The machine is kept where `Step.server_lives` says so.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from proctor.errors import FaultDetected, ProctorError, UsageError
from proctor.jobs.steps import (
    AnyStep,
    DrainStep,
    InspectStep,
    ServeReadyStep,
    ServeStartStep,
    ServeStopStep,
)
from proctor.jobs.submit import Submitted, Voice, run_far
from proctor.record.rundir import RunDir
from proctor.record.schema import health_of

if TYPE_CHECKING:
    from proctor.spec.config import ProjectConfig
    from proctor.targets.base import ServedRun
    from proctor.targets.registry import TargetOptions
    from proctor.targets.remote.commands import WorkflowRun

Evidence = Callable[[Sequence[object], Mapping[str, Sequence[str]] | None], None]


def _evidence(faults: Sequence[object], tails: Mapping[str, Sequence[str]] | None) -> None:
    for match in faults[:10]:
        print(f"fault: {match}", file=sys.stderr, flush=True)
    for path, lines in (tails or {}).items():
        print(f"--- last lines of {path} ---", file=sys.stderr, flush=True)
        for line in lines:
            print(line, file=sys.stderr, flush=True)


def _row(row: dict[str, Any]) -> None:
    print({k: str(v) for k, v in row.items()}, flush=True)


@dataclass
class StepVoice(Voice):
    """A Voice (say, echo, answer) with what a step shows besides lines: a ready gate's or a
    drain's `evidence` (fault lines, log tails: stderr), the server's `applied` settings
    (serve start; None: not shown), and `row`, one row of what `inspect` took (stdout)."""

    evidence: Evidence = _evidence
    applied: Callable[[dict[str, Any]], None] | None = None
    row: Callable[[dict[str, Any]], None] = _row


def run_step(
    step: AnyStep,
    target: str | TargetOptions | None = None,
    *,
    answer: bool = False,
    runs_dir: str | None = None,
    voice: StepVoice | None = None,
    target_flags: Mapping[str, Any] | None = None,
    config: ProjectConfig | None = None,
) -> Submitted:
    """Run `step` here, or on `target` (`target_flags`: the target's own options, Slurm's
    --nodes ...; `config`: default the project's proctor.toml); see the module docstring."""
    from proctor.spec.config import load_config

    voice = voice or StepVoice()
    config = config or load_config()
    spec = None
    if target is not None or target_flags:
        from proctor.spec.plan import resolve_runs_dir
        from proctor.targets.registry import target_options
        from proctor.targets.remote.commands import acts_here

        if isinstance(target, str) or target is None:
            spec = target_options(target, config, **dict(target_flags or {}))
        else:
            spec = target
        local_runs = Path(resolve_runs_dir(runs_dir, config).value)
        new_run = isinstance(step, ServeStartStep)
        if not acts_here(spec, local_runs, step.run_ref, new_run=new_run):
            far = run_step_far(step, spec, answer=answer, runs_dir=runs_dir, log=voice.log)
            return Submitted(far=far)
    code = step_here(step, answer=answer, runs_dir=runs_dir, voice=voice, spec=spec, config=config)
    return Submitted(exit_code=code)


def step_here(
    step: AnyStep,
    *,
    answer: bool,
    runs_dir: str | None,
    voice: StepVoice,
    spec: TargetOptions | None = None,
    config: ProjectConfig | None = None,
) -> int:
    """The step in this process, on this runs dir; its exit code (raising what decides it)."""
    from proctor.spec.config import load_config
    from proctor.spec.plan import resolve_runs_dir

    config = config or load_config()
    if isinstance(step, ServeStartStep):
        return _start(step, answer, runs_dir, voice, spec, config)
    directory = Path(resolve_runs_dir(runs_dir, config).value)
    if isinstance(step, ServeReadyStep):
        return _ready(step, answer, directory, voice, config)
    if isinstance(step, ServeStopStep):
        return _stop(step, answer, directory, voice)
    if isinstance(step, DrainStep):
        return _drain(step, answer, directory, voice, config)
    return _inspect(step, answer, directory, voice, config)


def _start(
    step: ServeStartStep,
    answer: bool,
    runs_dir: str | None,
    voice: StepVoice,
    spec: TargetOptions | None,
    config: ProjectConfig,
) -> int:
    from proctor.serve import start_server_on
    from proctor.spec.plan import RunFlags
    from proctor.targets.base import ServerLaunch

    launch = None
    if (step.parallel, step.rpc_port, step.wait) != (None, None, None):
        wait = step.wait if step.wait is not None else 600.0
        launch = ServerLaunch(step.parallel, step.rpc_port, wait)
    flags = RunFlags(
        argv=[],
        name=step.name,
        runs_dir=runs_dir,
        gpu_sample=step.gpu_sample,
        env=list(step.server.env),
        key=step.key,
        allow_unhealthy_gpu=step.allow_unhealthy_gpu or None,
    )
    served = start_server_on(
        spec,
        step.server.request(step.min_free_disk),
        config,
        flags=flags,
        launch=launch,
        on_applied=None if answer else voice.applied,
    )
    tell_started(served, answer, voice)
    return 0


def tell_started(served: ServedRun, answer: bool, voice: StepVoice) -> None:
    """serve start's report, whichever target started the server: its JSON document, or a
    line and the run id on stdout."""
    run, started = served.started.run, served.started
    if answer:
        voice.answer(
            {
                "run_id": run.run_id,
                "dir": str(run.path),
                "log": str(run.log_path()),
                "attached": started.attached,
                **served.facts,
                "server": served.applied,
                "gpu_health": health_of(run.path),
            }
        )
        return
    verb = "attached to running server" if started.attached else "server starting as run"
    where = "".join(f", {k} {v}" for k, v in served.facts.items() if k in ("job_id", "url"))
    voice.say(f"proctor: {verb} {run.run_id}{where}; log {run.log_path()}")
    health = None if started.attached else health_of(run.path)
    if health is not None:
        from proctor.monitors.gpu_health import one_line

        voice.say(f"proctor: {one_line(health)}")
    voice.echo(run.run_id)


def _ready(
    step: ServeReadyStep, answer: bool, directory: Path, voice: StepVoice, config: ProjectConfig
) -> int:
    from proctor.monitors.ready import ready_for_engine
    from proctor.serve import RunWatch, engine_of, find_server, profiles_for, server_facts

    run = find_server(directory, step.run, step.port)
    status = None if answer else voice.say
    if run is not None:
        facts = server_facts(run)
        result = ready_for_engine(
            engine_of(run, config),
            int(facts["port"]),
            host=str(facts.get("host") or step.host),
            process=RunWatch(run),
            logs=[run.log_path()],
            timeout_s=step.timeout,
            poll_s=step.poll,
            on_status=status,
        )
    elif step.port is not None:
        from proctor.monitors.proctree import listener_on_port, stdout_log_of

        ident = listener_on_port(step.port)
        log = stdout_log_of(ident.pid) if ident is not None else None
        result = ready_for_engine(
            profiles_for(config).engine(step.engine),
            step.port,
            host=step.host,
            logs=[log] if log else [],
            from_end=True,
            timeout_s=step.timeout,
            poll_s=step.poll,
            on_status=status,
        )
    else:
        raise UsageError("no server run to gate", hint="pass RUN or --port P")
    if answer:
        voice.answer(result.to_dict() if hasattr(result, "to_dict") else result.__dict__)
    elif result.exit_code == 0:
        voice.say(f"proctor: ready after {result.elapsed_s:.1f}s")
    else:
        voice.evidence(result.faults, result.tails)
    error = result.error() if hasattr(result, "error") else None
    if isinstance(error, ProctorError):
        raise error
    return int(result.exit_code)


def _stop(step: ServeStopStep, answer: bool, directory: Path, voice: StepVoice) -> int:
    from proctor.serve import find_server, live_runs, stop_server

    if step.mine:
        runs = live_runs(directory, "server")
    else:
        run = find_server(directory, step.run, step.port)
        runs = [run] if run is not None else []
    reports = [
        stop_server(r, gpu_processes=step.gpu_processes, vram_timeout_s=step.vram_timeout)
        for r in runs
    ]
    if answer:
        voice.answer([r.to_dict() for r in reports])
    elif not reports:
        voice.say("proctor: no live server run to stop (nothing to do)")
    for report in reports:
        if not answer:
            state = "stopped" if report.was_running else f"was not running ({report.outcome})"
            voice.say(f"proctor: server {report.run_id} {state}")
        if not report.memory_ok:
            if not answer:
                voice.echo(
                    f"GPU memory still held: now {report.memory_now_mib} MiB, "
                    f"baseline {report.baseline_mib}; holders {report.holders}"
                )
            raise FaultDetected(
                f"GPU memory of server {report.run_id} did not return to its baseline",
                hint="see the holders above; --gpu-processes stops GPU processes on those GPUs",
            )
    return 0


def _drain(
    step: DrainStep, answer: bool, directory: Path, voice: StepVoice, config: ProjectConfig
) -> int:
    from proctor.monitors.drain import DrainConfig, check_client_pattern, drain_for_engine
    from proctor.record.schema import read_view
    from proctor.serve import RunWatch, engine_of, find_server, profiles_for, recorded_server
    from proctor.supervise.launch import resolve_run

    check_client_pattern(step.client_pattern)
    cfg = DrainConfig(
        max_s=step.max_,
        poll_s=step.poll,
        stuck_polls=step.stuck_polls,
        startup_max_s=step.startup_max,
        offline=step.offline is not None,
        error_streak=step.error_streak,
    )
    say = (lambda line: None) if answer else voice.say
    extra_logs = [Path(p) for p in step.log]
    if step.offline is not None:
        job = resolve_run(directory, step.offline)  # an offline job: any run that runs one
        engine = (read_view(job.path).fact("offline") or {}).get("engine", step.engine)
        result = drain_for_engine(
            profiles_for(config).engine(engine),
            cfg,
            offline=RunWatch(job),
            server_log=job.log_path(),
            reused_logs=extra_logs,
            on_status=say,
        )
    else:
        server = find_server(directory, step.run, step.port)
        if server is None and step.port is None:
            raise UsageError("no server run to drain", hint="pass RUN or --port P")
        clients = [resolve_run(directory, c) for c in step.client]
        if server is not None:
            facts = recorded_server(server)
            clients += _clients_of(directory, server.run_id, clients)
            result = drain_for_engine(
                engine_of(server, config),
                cfg,
                port=int(facts.get("port") or step.port or 8000),
                host=str(facts.get("host") or step.host),
                server=RunWatch(server),
                server_log=server.log_path(),
                extra_logs=[c.log_path() for c in clients],
                reused_logs=extra_logs,
                clients=[RunWatch(c) for c in clients],
                client_pattern=step.client_pattern,
                on_status=say,
            )
        else:
            from proctor.monitors.proctree import listener_on_port, stdout_log_of
            from proctor.monitors.watch import IdentityWatch

            assert step.port is not None
            ident = listener_on_port(step.port)
            if ident is None:
                raise UsageError(
                    f"nothing listens on port {step.port}", hint="start the server first"
                )
            result = drain_for_engine(
                profiles_for(config).engine(step.engine),
                cfg,
                port=step.port,
                host=step.host,
                server=IdentityWatch(ident),
                server_log=stdout_log_of(ident.pid),
                extra_logs=extra_logs,
                clients=[RunWatch(c) for c in clients],
                client_pattern=step.client_pattern,
                from_end=True,
                on_status=say,
            )
    if answer:
        voice.answer(result.to_dict())
    else:
        voice.evidence(result.faults, result.tails)
        voice.say(f"proctor: {result.message()}")
    error = result.error()
    if error is not None:
        raise error
    return 0


def _clients_of(runs_dir: Path, server_id: str, known: list[RunDir]) -> list[RunDir]:
    """Workload runs proctor started for this server (their record names it)."""
    from proctor.record.rundir import is_run_id
    from proctor.record.schema import read_view

    have = {c.run_id for c in known}
    found = []
    if runs_dir.is_dir():
        for path in sorted(runs_dir.iterdir()):
            if is_run_id(path.name) and path.name not in have:
                run = RunDir(path)
                if read_view(run.path).fact("server_run") == server_id:
                    found.append(run)
    return found


def _inspect(
    step: InspectStep, answer: bool, directory: Path, voice: StepVoice, config: ProjectConfig
) -> int:
    from proctor.serve import engine_of, find_server, worker_pids
    from proctor.supervise.inspect import inspect
    from proctor.targets.registry import kind_of_run

    server = find_server(directory, step.run, step.port)
    if server is None:
        raise UsageError("no live server run to inspect", hint="pass RUN or --port P")
    kind = kind_of_run(server.path)
    if kind.inspect_run is not None:  # its processes are where its kind runs them
        patterns = tuple(engine_of(server, config).worker_patterns)
        rows = kind.inspect_run(server.path, step.timeout, patterns, tuple(step.pid))
    else:
        pids = list(step.pid) or worker_pids(server, engine_of(server, config))
        if not pids:
            raise UsageError(
                f"server run {server.run_id} has no live process to inspect",
                hint="start a server, or pass --pid",
            )
        rows = [r.to_dict() for r in inspect(pids, server.path / "inspect", step.timeout)]
    if answer:
        voice.answer(rows)
    else:
        for row in rows:
            voice.row(row)
    return 0


# -- on a target -------------------------------------------------------------------------------
def run_step_far(
    step: AnyStep,
    spec: TargetOptions,
    *,
    answer: bool = False,
    runs_dir: str | None = None,
    log: IO[bytes] | None = None,
) -> WorkflowRun:
    """Send the step to the target's machine and run it there, in the far runs dir (see the
    module docstring); the machine is kept where the step's server outlives it."""
    from proctor.targets.remote.requests import StepRequest
    from proctor.targets.remote.workflow import WorkflowCommand

    # Under --json the far step answers in JSON too: its error comes back as one (reason, fix).
    answer = answer or step.answers
    command = WorkflowCommand(
        StepRequest(step=step, answer=answer),
        answer=answer,
        leave_live=step.leaves_live,
        direct=step.direct,
    )
    return run_far(command, spec, runs_dir=runs_dir, log=log, keep_for_server=step.server_lives)


__all__ = ["StepVoice", "run_step", "run_step_far", "step_here", "tell_started"]

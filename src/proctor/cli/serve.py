"""`proctor serve start|ready|stop`: an inference server as a supervised, detached run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from proctor.cli.helptext import (
    EXTRA_ENGINE_HELP,
    GPU_SAMPLE_HELP,
    HOST_HELP,
    JSON_HELP,
    RUNS_DIR_HELP,
    ref_help,
)
from proctor.cli.jobopts import JobGroup, JobValues, job_command
from proctor.cli.output import console, err_console, print_evidence, print_json, styled
from proctor.cli.targethelp import RUN_TARGET_HELP, SERVE_TARGET_HELP
from proctor.errors import FaultDetected, ProctorError, UsageError
from proctor.jobs.options import validated
from proctor.jobs.serve import ServeJob
from proctor.monitors.ready import ReadyResult
from proctor.record.rundir import RunDir
from proctor.serve import (
    RunWatch,
    engine_of,
    find_server,
    live_runs,
    profiles_for,
    server_facts,
    start_server_on,
    stop_server,
)
from proctor.spec.config import ProjectConfig, load_config
from proctor.spec.durations import parse_duration
from proctor.spec.plan import RunFlags, resolve_runs_dir
from proctor.targets.base import ServedRun, ServerLaunch

app = typer.Typer(
    help="Start, gate and stop an inference server (a detached run).",
    no_args_is_help=True,
)


def runs_dir_of(flag: str | None, config: ProjectConfig) -> Path:
    return Path(resolve_runs_dir(flag, config).value)


def serve_job(job: JobValues, extra: list[str], *, what: str) -> ServeJob:
    """The server the options describe (the engine's own arguments after --)."""
    if not job.values.get("engine") or not job.values.get("model"):
        raise UsageError(f"{what} needs --engine and --model")
    return validated(
        ServeJob, {**job.values, "extra": extra}, what="invalid option", hint="see --help"
    )


def print_applied(applied: dict[str, Any]) -> None:
    """A required model-family setting that was not applied must be impossible to miss."""
    env = applied["applied_env"]
    err_console.print(
        styled(f"proctor: engine {applied['engine']}, model profile ", "", "")
        + styled(str(applied["model_profile"]), "bold")
        + (f", add-ons {', '.join(applied['addons'])}" if applied["addons"] else "")
    )
    err_console.print(
        "proctor: env applied: " + (" ".join(f"{k}={v}" for k, v in env.items()) or "(none)")
    )
    err_console.print("proctor: command: " + " ".join(applied["argv"]), highlight=False)
    held = applied["preflight"].get("gpu_held_by_others")
    if held:
        err_console.print(styled(f"proctor: GPU memory already held by: {held}", "yellow"))


def _start(
    *,
    job: JobValues,
    name: str = typer.Option(None, "--name", help="Run name (default serve-ENGINE-MODEL-pPORT)."),
    key: str = typer.Option(
        None, "--key", help="Attach to a live server run with this key instead of starting another."
    ),
    gpu_sample: float = typer.Option(None, "--gpu-sample", help=GPU_SAMPLE_HELP),
    allow_unhealthy_gpu: bool = typer.Option(
        False,
        "--allow-unhealthy-gpu",
        help="Start even when the GPU preflight fails (another process holds GPU memory, ECC errors, a hardware Xid, clocks held down, a failed CUDA check); without it the server is refused with exit 69. docs/gpu-health.md.",
    ),
    min_free_disk: float = typer.Option(
        1.0, "--min-free-disk", help="GiB that must be free under the runs dir."
    ),
    runs_dir: str = typer.Option(None, "--runs-dir", help=RUNS_DIR_HELP),
    extra: list[str] = typer.Argument(
        None, metavar="[-- EXTRA ENGINE ARGS]", help=EXTRA_ENGINE_HELP
    ),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
    target: str = typer.Option(None, "--target", help=SERVE_TARGET_HELP),
    nodes: int = typer.Option(
        None, "--nodes", "-N", help="Slurm: nodes of the allocation (default 1 or [slurm] nodes)."
    ),
    gpus_per_node: int = typer.Option(
        None, "--gpus-per-node", help="Slurm: GPUs per node (default 0 or [slurm])."
    ),
    partition: str = typer.Option(None, "--partition", help="Slurm partition."),
    time_limit: str = typer.Option(None, "--time", help="Slurm time limit: 30m, 2h, 1:30:00."),
    parallel: str = typer.Option(
        None,
        "--parallel",
        help="Slurm: the engine profile's multi-node launch, e.g. dp or pp (default: its first).",
    ),
    rpc_port: int = typer.Option(
        None,
        "--rpc-port",
        min=1,
        max=65535,
        help="Slurm: the head's rendezvous port (default: the profile's).",
    ),
    wait: str = typer.Option(
        None,
        "--wait",
        help="Slurm: how long the allocation may pend before it is cancelled (exit 5; default 10m).",
    ),
) -> None:
    """Start an inference server as a detached run; print its id.

    Refused before anything starts (one line): the engine cannot start with its python (69),
    a local model path does not exist (64), the port is taken (69), too little disk (69).
    GPU memory held by others is reported. The server runs detached with its own log; this
    returns at once with the run id. Gate with `serve ready`.
    On Slurm: returns once the head node is known (the server's run is local)."""
    spec = None
    launch = (
        None
        if parallel is None and rpc_port is None and wait is None
        else ServerLaunch(parallel, rpc_port, parse_duration(wait or "10m", option="--wait"))
    )
    if target or nodes or gpus_per_node or partition or time_limit:
        from proctor.cli.remote import hand_off_or_here

        spec = hand_off_or_here(
            target,
            runs_dir=runs_dir,
            as_json=as_json,
            new_run=True,
            answer=True,
            leave_live=True,
            print_run=True,
            direct=True,
            target_flags={
                "nodes": nodes,
                "gpus_per_node": gpus_per_node,
                "partition": partition,
                "time_limit": time_limit,
            },
        )
        if spec is None:
            return
    config = load_config()
    served_job = serve_job(job, extra or [], what="serve start")
    request = served_job.request(min_free_disk)
    flags = RunFlags(
        argv=[],
        name=name,
        runs_dir=runs_dir,
        gpu_sample=gpu_sample,
        env=list(served_job.env),
        key=key,
        allow_unhealthy_gpu=allow_unhealthy_gpu or None,
    )
    served = start_server_on(
        spec,
        request,
        config,
        flags=flags,
        launch=launch,
        on_applied=None if as_json else print_applied,
    )
    print_started(served, as_json)


start = app.command("start")(job_command(_start, JobGroup("job", ServeJob)))


def print_started(served: ServedRun, as_json: bool) -> None:
    """serve start's report, whichever target started the server: the run id on stdout."""
    from proctor.cli.run import health_of

    run, started = served.started.run, served.started
    if as_json:
        print_json(
            {
                "run_id": run.run_id,
                "dir": str(run.path),
                "log": str(run.log_path()),
                "attached": started.attached,
                **served.facts,
                "server": served.applied,
                "gpu_health": health_of(run),
            }
        )
        return
    verb = "attached to running server" if started.attached else "server starting as run"
    where = "".join(f", {k} {v}" for k, v in served.facts.items() if k in ("job_id", "url"))
    err_console.print(f"proctor: {verb} {run.run_id}{where}; log {run.log_path()}", highlight=False)
    if not started.attached:
        from proctor.cli.run import print_health

        print_health(run)
    typer.echo(run.run_id)


def _server_or_fail(ref: str | None, port: int | None, runs_dir: Path) -> RunDir:
    run = find_server(runs_dir, ref, port)
    if run is None:
        where = f"on port {port}" if port else "in " + str(runs_dir)
        raise UsageError(f"no live server run {where}", hint="start one with proctor serve start")
    return run


def print_ready(result: ReadyResult) -> None:
    print_evidence(result.faults, result.tails)


@app.command("ready")
def ready(
    ref: str = typer.Argument(
        None,
        help=ref_help("Server run (default: the live one on --port, else the newest live one)"),
    ),
    port: int = typer.Option(
        None,
        "--port",
        "-p",
        min=1,
        max=65535,
        help="PORT: its live server run, else a server proctor did not start.",
    ),
    timeout: str = typer.Option(
        "15m", "--timeout", help="Give up after this duration (exit 5), e.g. 90s, 15m."
    ),
    poll: str = typer.Option(
        "15s",
        "--poll",
        help="A status line this often while nothing changes (a change prints at once);"
        " detection never waits for it.",
    ),
    engine: str = typer.Option(
        "vllm", "--engine", help="Engine profile for a server proctor did not start."
    ),
    host: str = typer.Option("127.0.0.1", "--host", help=HOST_HELP),
    runs_dir: str = typer.Option(None, "--runs-dir", help=RUNS_DIR_HELP),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
    target: str = typer.Option(None, "--target", help=RUN_TARGET_HELP),
) -> None:
    """Wait until a server answers; the one gate before a workload.

    Exit 0 ready; 2 startup fault; 3 server exited; 5 not ready in time."""
    if target:
        from proctor.cli.remote import hand_off_or_here

        if hand_off_or_here(target, runs_dir=runs_dir, as_json=as_json, run_ref=ref) is None:
            return
    from proctor.monitors.ready import ready_for_engine

    config = load_config()
    directory = runs_dir_of(runs_dir, config)
    run = find_server(directory, ref, port)
    timeout_s = parse_duration(timeout, option="--timeout")
    poll_s = parse_duration(poll, option="--poll")
    status = None if as_json else (lambda line: err_console.print(line, highlight=False))
    if run is not None:
        facts = server_facts(run)
        profile = engine_of(run, config)
        result = ready_for_engine(
            profile,
            int(facts["port"]),
            host=str(facts.get("host") or host),
            process=RunWatch(run),
            logs=[run.log_path()],
            timeout_s=timeout_s,
            poll_s=poll_s,
            on_status=status,
        )
    elif port is not None:
        from proctor.monitors.proctree import listener_on_port, stdout_log_of

        profile = profiles_for(config).engine(engine)
        ident = listener_on_port(port)
        log = stdout_log_of(ident.pid) if ident is not None else None
        result = ready_for_engine(
            profile,
            port,
            host=host,
            logs=[log] if log else [],
            from_end=True,
            timeout_s=timeout_s,
            poll_s=poll_s,
            on_status=status,
        )
    else:
        raise UsageError("no server run to gate", hint="pass RUN or --port P")
    if as_json:
        print_json(result.to_dict() if hasattr(result, "to_dict") else result.__dict__)
    elif result.exit_code == 0:
        err_console.print(f"proctor: ready after {result.elapsed_s:.1f}s")
    else:
        print_ready(result)
    error = result.error() if hasattr(result, "error") else None
    if isinstance(error, ProctorError):
        raise error
    if result.exit_code:
        raise typer.Exit(result.exit_code)


@app.command("stop")
def stop(
    ref: str = typer.Argument(None, help=ref_help("Server run to stop")),
    port: int = typer.Option(
        None,
        "--port",
        "-p",
        min=1,
        max=65535,
        help="Stop the live server run proctor started on this port.",
    ),
    mine: bool = typer.Option(False, "--mine", help="Stop every live server run in the runs dir."),
    gpu_processes: bool = typer.Option(
        False,
        "--gpu-processes",
        help="Also SIGKILL GPU compute processes left on the GPUs the run used.",
    ),
    vram_timeout: str = typer.Option(
        "60s",
        "--vram-timeout",
        help="How long to wait for GPU memory to return to the start baseline.",
    ),
    runs_dir: str = typer.Option(None, "--runs-dir", help=RUNS_DIR_HELP),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
    target: str = typer.Option(None, "--target", help=RUN_TARGET_HELP),
) -> None:
    """Stop a server run and wait for its GPU memory to come back.

    Idempotent and scoped: the kill ladder on the server's process group and every
    descendant, then wait for its GPUs' memory to return to the pre-start baseline (exit 2 with
    the holders if it does not). Never kills by a machine-wide name pattern."""
    if target:
        from proctor.cli.remote import hand_off_or_here

        if (
            hand_off_or_here(target, runs_dir=runs_dir, as_json=as_json, run_ref=ref, answer=True)
            is None
        ):
            return
    config = load_config()
    directory = runs_dir_of(runs_dir, config)
    if mine:
        runs = live_runs(directory, "server")
    else:
        run = find_server(directory, ref, port)
        runs = [run] if run is not None else []
    vram_s = parse_duration(vram_timeout, option="--vram-timeout")
    reports = [stop_server(r, gpu_processes=gpu_processes, vram_timeout_s=vram_s) for r in runs]
    if as_json:
        print_json([r.to_dict() for r in reports])
    elif not reports:
        err_console.print("proctor: no live server run to stop (nothing to do)")
    for report in reports:
        if not as_json:
            state = "stopped" if report.was_running else f"was not running ({report.outcome})"
            err_console.print(f"proctor: server {report.run_id} {state}")
        if not report.memory_ok:
            if not as_json:
                console.print(
                    f"GPU memory still held: now {report.memory_now_mib} MiB, "
                    f"baseline {report.baseline_mib}; holders {report.holders}"
                )
            raise FaultDetected(
                f"GPU memory of server {report.run_id} did not return to its baseline",
                hint="see the holders above; --gpu-processes stops GPU processes on those GPUs",
            )

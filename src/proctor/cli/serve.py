"""`proctor serve start|ready|stop`: an inference server as a supervised, detached run.

Each command builds its step (jobs/steps.py: its options are the step's fields) and hands it
to `proctor.jobs.step_run.run_step`, here or on `--target` (cli/remote.py step_command)."""

from __future__ import annotations

from typing import Any, TypeVar

import typer
from pydantic import BaseModel

from proctor.cli.helptext import EXTRA_ENGINE_HELP, JSON_HELP, RUNS_DIR_HELP, ref_help
from proctor.cli.jobopts import JobGroup, JobValues, job_command
from proctor.cli.output import err_console, styled
from proctor.cli.targethelp import RUN_TARGET_HELP, SERVE_TARGET_HELP
from proctor.errors import UsageError
from proctor.jobs.options import validated
from proctor.jobs.serve import ServeJob
from proctor.jobs.steps import ServeReadyStep, ServeStartStep, ServeStopStep

app = typer.Typer(
    help="Start, gate and stop an inference server (a detached run).",
    no_args_is_help=True,
)


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
    step: JobValues,
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
) -> None:
    """Start an inference server as a detached run; print its id.

    Refused before anything starts (one line): the engine cannot start with its python (69),
    a local model path does not exist (64), the port is taken (69), too little disk (69).
    GPU memory held by others is reported. The server runs detached with its own log; this
    returns at once with the run id. Gate with `serve ready`.
    On Slurm: returns once the head node is known (the server's run is local)."""
    from proctor.cli.remote import step_command

    server = serve_job(job, extra or [], what="serve start")
    started = _step(ServeStartStep, {**step.values, "server": server})
    machine = {
        "nodes": nodes,
        "gpus_per_node": gpus_per_node,
        "partition": partition,
        "time_limit": time_limit,
    }
    flags = machine if any(machine.values()) else None
    step_command(started, target, runs_dir=runs_dir, as_json=as_json, target_flags=flags)


start = app.command("start")(
    job_command(_start, JobGroup("job", ServeJob), JobGroup("step", ServeStartStep))
)

S = TypeVar("S", bound=BaseModel)


def _step(model: type[S], values: dict[str, Any]) -> S:
    """The step the options describe (a rejected value: one usage error, exit 64)."""
    return validated(model, values, what="invalid option", hint="see --help")


def _ready(
    *,
    step: JobValues,
    ref: str = typer.Argument(
        None,
        help=ref_help("Server run (default: the live one on --port, else the newest live one)"),
    ),
    runs_dir: str = typer.Option(None, "--runs-dir", help=RUNS_DIR_HELP),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
    target: str = typer.Option(None, "--target", help=RUN_TARGET_HELP),
) -> None:
    """Wait until a server answers; the one gate before a workload.

    Exit 0 ready; 2 startup fault; 3 server exited; 5 not ready in time."""
    from proctor.cli.remote import step_command

    ready = _step(ServeReadyStep, {**step.values, "run": ref})
    step_command(ready, target, runs_dir=runs_dir, as_json=as_json)


ready = app.command("ready")(job_command(_ready, JobGroup("step", ServeReadyStep)))


def _stop(
    *,
    step: JobValues,
    ref: str = typer.Argument(None, help=ref_help("Server run to stop")),
    runs_dir: str = typer.Option(None, "--runs-dir", help=RUNS_DIR_HELP),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
    target: str = typer.Option(None, "--target", help=RUN_TARGET_HELP),
) -> None:
    """Stop a server run and wait for its GPU memory to come back.

    Idempotent and scoped: the kill ladder on the server's process group and every
    descendant, then wait for its GPUs' memory to return to the pre-start baseline (exit 2 with
    the holders if it does not). Never kills by a machine-wide name pattern."""
    from proctor.cli.remote import step_command

    stop = _step(ServeStopStep, {**step.values, "run": ref})
    step_command(stop, target, runs_dir=runs_dir, as_json=as_json)


stop = app.command("stop")(job_command(_stop, JobGroup("step", ServeStopStep)))

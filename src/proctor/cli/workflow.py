"""`proctor drain`, `proctor inspect` and `proctor flow`: the server workflow's later steps
(drain and inspect: typed steps, jobs/steps.py, run by `proctor.jobs.step_run.run_step`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from proctor.cli.helptext import EXTRA_ENGINE_HELP, JSON_HELP, RUNS_DIR_HELP, ref_help
from proctor.cli.jobopts import JobGroup, JobValues, job_command
from proctor.cli.output import err_console
from proctor.cli.targethelp import RUN_TARGET_HELP, TARGET_HELP
from proctor.errors import UsageError
from proctor.flow import load_flow_file, resume_flow
from proctor.jobs.flow import FlowJob, flow_job
from proctor.jobs.options import validated
from proctor.jobs.serve import ServeJob
from proctor.jobs.steps import DrainStep, InspectStep
from proctor.spec.config import load_config


def _say(as_json: bool) -> Any:
    return (
        (lambda line: None)
        if as_json
        else (lambda line: err_console.print(line, highlight=False, markup=False))
    )


def register(app: typer.Typer) -> None:
    def drain(
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
        """Wait for a server's workload to end; catch hangs and faults.

        Exit 0 drained; 1 hang; 2 fault; 3 server died or offline job failed; 4 time limit or
        no client. Status lines on change, else every 15 s; log tails on failure."""
        from proctor.cli.remote import step_command

        drained = validated(
            DrainStep, {**step.values, "run": ref}, what="invalid option", hint="see --help"
        )
        step_command(drained, target, runs_dir=runs_dir, as_json=as_json)

    app.command("drain")(job_command(drain, JobGroup("step", DrainStep)))

    def inspect_command(
        *,
        step: JobValues,
        ref: str = typer.Argument(
            None,
            help=ref_help("Server run (default: the live one on --port, else the newest live one)"),
        ),
        runs_dir: str = typer.Option(None, "--runs-dir", help=RUNS_DIR_HELP),
        as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
        target: str = typer.Option(
            None, "--target", help="Inspect the server where it runs. " + RUN_TARGET_HELP
        ),
    ) -> None:
        """Take the stacks of a hung server's workers; kill nothing.

        py-spy dump, and gdb/cuda-gdb/rocgdb in batch mode (detach before quit), into
        RUN/inspect/PID-TOOL.txt. Kills nothing. Run it before `serve stop`.
        A server on a Slurm allocation is inspected on every node: RUN/inspect/NODE/PID-TOOL.txt."""
        from proctor.cli.remote import step_command

        inspected = validated(
            InspectStep, {**step.values, "run": ref}, what="invalid option", hint="see --help"
        )
        step_command(inspected, target, runs_dir=runs_dir, as_json=as_json)

    app.command("inspect")(job_command(inspect_command, JobGroup("step", InspectStep)))

    def flow(
        *,
        server: JobValues,
        settings: JobValues,
        workload_cmd: str = typer.Option(
            None, "--workload-cmd", help="The workload, as a shell-quoted command line."
        ),
        file: Path = typer.Option(
            None,
            "--file",
            "-f",
            help="Flow file (TOML, a [flow] table with these options, and [[flow.workload]] entries run in order); flags win.",
        ),
        resume: str = typer.Option(
            None, "--resume", help="Continue this flow after a dead controller (no second server)."
        ),
        runs_dir: str = typer.Option(None, "--runs-dir", help=RUNS_DIR_HELP),
        extra: list[str] = typer.Argument(
            None, metavar="[-- EXTRA ENGINE ARGS]", help=EXTRA_ENGINE_HELP
        ),
        as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
        target: str = typer.Option(None, "--target", help=TARGET_HELP),
    ) -> None:
        """The whole workflow: start a server, run workloads, stop it.

        stop -> start -> ready -> (workload -> drain)... -> inspect on hang -> stop, teardown
        always. A flow file's [[flow.workload]] list runs in order against the same server,
        stopping at the first failure unless continue_on_failure. Exit code: the first failing
        step's (as `serve ready` and `drain`)."""
        if resume:
            if target:
                raise UsageError(
                    "--resume continues a flow of this machine's runs dir",
                    hint="drop --target (a far flow is followed with `proctor runs attach`)",
                )
            code = resume_flow(resume, load_config(), runs_dir, _say(as_json))
            if code:
                raise typer.Exit(code)
            return
        if not file and extra and extra[0].endswith(".toml") and Path(extra[0]).is_file():
            # `proctor flow f.toml` would pass the file to the engine as an argument.
            raise UsageError(
                f"{extra[0]} would be an argument of the engine",
                hint=f"give a flow file with --file: proctor flow --file {extra[0]}",
            )
        from proctor.cli.remote import submit_command
        from proctor.jobs.submission import Submission

        # Only what the user set is laid over the flow file.
        given = {
            **settings.set_by_user(),
            "server": server.set_by_user(),
            "workload_cmd": workload_cmd,
            "extra": extra,
            "runs_dir": runs_dir,
        }
        table = load_flow_file(file) if file else {}
        if table.get("sweep") is not None:
            from proctor.cli.sweeps import grid_of, submit_grid

            # A flow file with a [sweep] table: each server point its own flow.
            flow = flow_job(given, table, file, need_workload=False)
            grid = grid_of(flow, table["sweep"], file)
            submit_grid(grid, target, runs_dir=runs_dir, as_json=as_json)
            return
        # Here, or on --target as one far job that keeps every step's run inside it.
        submission = Submission(job=flow_job(given, table, file), answer=as_json)
        submit_command(submission, target, runs_dir=runs_dir, as_json=as_json)

    app.command("flow")(
        job_command(flow, JobGroup("server", ServeJob), JobGroup("settings", FlowJob))
    )


__all__ = ["register"]

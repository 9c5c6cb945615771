"""`proctor drain`, `proctor inspect` and `proctor flow`: the server workflow's later steps."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from proctor.cli.helptext import (
    EXTRA_ENGINE_HELP,
    HOST_HELP,
    JSON_HELP,
    RUNS_DIR_HELP,
    ref_help,
)
from proctor.cli.jobopts import JobGroup, JobValues, job_command
from proctor.cli.output import console, err_console, print_evidence, print_json
from proctor.cli.serve import print_ready, runs_dir_of
from proctor.cli.targethelp import RUN_TARGET_HELP, TARGET_HELP
from proctor.errors import ProctorError, UsageError
from proctor.flow import load_flow_file, resume_flow
from proctor.jobs.flow import FlowJob, flow_job
from proctor.jobs.serve import ServeJob
from proctor.monitors.drain import DrainConfig
from proctor.record.schema import read_view
from proctor.serve import (
    RunWatch,
    engine_of,
    find_server,
    profiles_for,
    recorded_server,
    worker_pids,
)
from proctor.spec.config import load_config
from proctor.spec.durations import parse_duration
from proctor.supervise.launch import resolve_run


def _say(as_json: bool) -> Any:
    return (
        (lambda line: None)
        if as_json
        else (lambda line: err_console.print(line, highlight=False, markup=False))
    )


def register(app: typer.Typer) -> None:
    @app.command("drain")
    def drain(
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
            help="PORT of the server: its live server run, else a server proctor did not start.",
        ),
        max_: str = typer.Option("30m", "--max", help="Give up after this long (exit 4)."),
        poll: str = typer.Option(
            "10s", "--poll", help="Progress poll; faults are caught within 1 s regardless."
        ),
        stuck_polls: int = typer.Option(
            6, "--stuck-polls", help="Polls without progress, work in flight: hang (exit 1)."
        ),
        error_streak: int = typer.Option(
            5,
            "--error-streak",
            min=1,
            help="Generation answers in a row that are errors: fault (exit 2), pattern or not.",
        ),
        startup_max: str = typer.Option(
            "15m", "--startup-max", help="No client seen by then: exit 4."
        ),
        log: list[Path] = typer.Option(
            None,
            "--log",
            help="Extra log to scan for faults (repeatable); with --port and no signal from the engine, its growth is progress too.",
        ),
        client: list[str] = typer.Option(
            None, "--client", help="A workload run to wait for (repeatable)."
        ),
        client_pattern: str = typer.Option(
            None,
            "--client-pattern",
            help="Also count foreign client processes whose command line matches.",
        ),
        offline: str = typer.Option(
            None,
            "--offline",
            help="Offline mode: wait for this offline run and report its own status.",
        ),
        engine: str = typer.Option(
            "vllm", "--engine", help="Engine profile when the run does not name one."
        ),
        host: str = typer.Option("127.0.0.1", "--host", help=HOST_HELP),
        runs_dir: str = typer.Option(None, "--runs-dir", help=RUNS_DIR_HELP),
        as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
        target: str = typer.Option(None, "--target", help=RUN_TARGET_HELP),
    ) -> None:
        """Wait for a server's workload to end; catch hangs and faults.

        Exit 0 drained; 1 hang; 2 fault; 3 server died or offline job failed; 4 time limit or
        no client. Status lines on change, else every 15 s; log tails on failure."""
        if target:
            from proctor.cli.remote import hand_off_or_here

            if (
                hand_off_or_here(target, runs_dir=runs_dir, as_json=as_json, run_ref=ref or offline)
                is None
            ):
                return
        from proctor.monitors.drain import check_client_pattern, drain_for_engine

        check_client_pattern(client_pattern)
        config = load_config()
        directory = runs_dir_of(runs_dir, config)
        cfg = DrainConfig(
            max_s=parse_duration(max_, option="--max"),
            poll_s=parse_duration(poll, option="--poll"),
            stuck_polls=stuck_polls,
            startup_max_s=parse_duration(startup_max, option="--startup-max"),
            offline=offline is not None,
            error_streak=error_streak,
        )
        say = _say(as_json)
        extra_logs = list(log or [])
        if offline is not None:
            job = resolve_run(directory, offline)  # an offline job: any run that runs one
            profile = profiles_for(config).engine(
                (read_view(job.path).fact("offline") or {}).get("engine", engine)
            )
            result = drain_for_engine(
                profile,
                cfg,
                offline=RunWatch(job),
                server_log=job.log_path(),
                reused_logs=extra_logs,
                on_status=say,
            )
        else:
            server = find_server(directory, ref, port)
            if server is None and port is None:
                raise UsageError("no server run to drain", hint="pass RUN or --port P")
            clients = [resolve_run(directory, c) for c in client or []]
            if server is not None:
                profile = engine_of(server, config)
                facts = recorded_server(server)
                clients += _clients_of(directory, server.run_id, clients)
                result = drain_for_engine(
                    profile,
                    cfg,
                    port=int(facts.get("port") or port or 8000),
                    host=str(facts.get("host") or host),
                    server=RunWatch(server),
                    server_log=server.log_path(),
                    extra_logs=[c.log_path() for c in clients],
                    reused_logs=extra_logs,
                    clients=[RunWatch(c) for c in clients],
                    client_pattern=client_pattern,
                    on_status=say,
                )
            else:
                from proctor.monitors.proctree import listener_on_port, stdout_log_of
                from proctor.monitors.watch import IdentityWatch

                ident = listener_on_port(int(port))
                if ident is None:
                    raise UsageError(
                        f"nothing listens on port {port}", hint="start the server first"
                    )
                profile = profiles_for(config).engine(engine)
                result = drain_for_engine(
                    profile,
                    cfg,
                    port=port,
                    host=host,
                    server=IdentityWatch(ident),
                    server_log=stdout_log_of(ident.pid),
                    extra_logs=extra_logs,
                    clients=[RunWatch(c) for c in clients],
                    client_pattern=client_pattern,
                    from_end=True,
                    on_status=say,
                )
        if as_json:
            print_json(result.to_dict())
        else:
            print_evidence(result.faults, result.tails)
            err_console.print(f"proctor: {result.message()}", highlight=False)
        error = result.error()
        if error is not None:
            raise error

    @app.command("inspect")
    def inspect_command(
        ref: str = typer.Argument(
            None,
            help=ref_help("Server run (default: the live one on --port, else the newest live one)"),
        ),
        port: int = typer.Option(
            None, "--port", "-p", min=1, max=65535, help="PORT: the live server run on it."
        ),
        pid: list[int] = typer.Option(
            None,
            "--pid",
            help="Inspect these pids instead of the server's workers (on Slurm: pids of the run's processes on its nodes).",
        ),
        timeout: str = typer.Option(
            "90s", "--timeout", help="Limit per tool and process, a duration such as 90s."
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
        if target:
            from proctor.cli.remote import hand_off_or_here

            if (
                hand_off_or_here(
                    target,
                    runs_dir=runs_dir,
                    as_json=as_json,
                    run_ref=ref,
                    answer=True,
                    direct=True,
                )
                is None
            ):
                return
        from proctor.supervise.inspect import inspect
        from proctor.targets.registry import kind_of_run

        config = load_config()
        directory = runs_dir_of(runs_dir, config)
        server = find_server(directory, ref, port)
        if server is None:
            raise UsageError("no live server run to inspect", hint="pass RUN or --port P")
        timeout_s = parse_duration(timeout, option="--timeout")
        kind = kind_of_run(server.path)
        if kind.inspect_run is not None:  # its processes are where its kind runs them
            patterns = tuple(engine_of(server, config).worker_patterns)
            rows = kind.inspect_run(server.path, timeout_s, patterns, tuple(pid or ()))
        else:
            pids = list(pid or []) or worker_pids(server, engine_of(server, config))
            if not pids:
                raise UsageError(
                    f"server run {server.run_id} has no live process to inspect",
                    hint="start a server, or pass --pid",
                )
            results = inspect(pids, server.path / "inspect", timeout_s)
            rows = [r.to_dict() for r in results]
        if as_json:
            print_json(rows)
            return
        for row in rows:
            console.print({k: str(v) for k, v in row.items()})

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


def _clients_of(runs_dir: Path, server_id: str, known: list[Any]) -> list[Any]:
    """Workload runs proctor started for this server (their record names it)."""
    from proctor.record.rundir import RunDir, is_run_id

    have = {c.run_id for c in known}
    found = []
    if runs_dir.is_dir():
        for path in sorted(runs_dir.iterdir()):
            if is_run_id(path.name) and path.name not in have:
                run = RunDir(path)
                if read_view(run.path).fact("server_run") == server_id:
                    found.append(run)
    return found


__all__ = ["ProctorError", "print_ready", "register"]

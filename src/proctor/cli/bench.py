"""`proctor bench`: a serving benchmark against any OpenAI-compatible server.

Mount either way: `register(root)` adds the top-level `proctor bench` command;
`app` is a group whose `serve` command is the same thing.
"""

from __future__ import annotations

import os
from pathlib import Path

import typer
from pydantic import SecretStr, ValidationError

from proctor.cli.helptext import EXTRA_ENGINE_HELP, JSON_HELP, RUNS_DIR_HELP
from proctor.cli.jobopts import JobGroup, JobValues, job_command
from proctor.cli.output import console, print_json
from proctor.cli.targethelp import TARGET_HELP
from proctor.errors import UsageError, invalid
from proctor.jobs.bench import BenchJob
from proctor.jobs.grid import ServerGridJob
from proctor.jobs.options import validated
from proctor.jobs.submission import ServerField, ServerRef, Submission
from proctor.jobs.sweep import SweepJob
from proctor.workloads.loadgen.printed import result_lines
from proctor.workloads.loadgen.runner import (
    check_outcome,
    result_document,
    run_benchmark,
    write_outputs,
)
from proctor.workloads.loadgen.server_run import live_server_facts

TRACE_SPEED_HELP = "trace: replay the trace's clock this many times faster (2 = twice as fast)."

app = typer.Typer(
    help="Serving benchmarks against OpenAI-compatible servers.", no_args_is_help=True
)


def bench_job(job: JobValues, *, port: int, json_out: bool, own: str) -> BenchJob:
    """The bench job the options describe: what the user set, then the defaults (--port's
    URL); a --server run's facts fill the rest where the job runs (Submission.server). The API
    key comes from OPENAI_API_KEY only."""
    values = dict(job.values)
    if "base_url" not in job.given:
        values["base_url"] = f"http://127.0.0.1:{port}"
    values["progress"] = not json_out
    api_key = os.environ.get("OPENAI_API_KEY")
    job_ = validated(BenchJob, values, what="invalid option", hint=f"see proctor {own} --help")
    return job_.model_copy(update={"api_key": SecretStr(api_key)}) if api_key else job_


def _bench(
    *,
    job: JobValues,
    output_dir: Path | None = typer.Option(
        None,
        "--output-dir",
        "-o",
        help="Run in-process and write metrics.json here instead of making a supervised run.",
    ),
    server: str | None = typer.Option(
        None,
        "--server",
        help="A server run (id or 'last') to benchmark; gives base URL and model.",
    ),
    name: str | None = typer.Option(None, "--name", help="Run name (default bench-ISL-OSL-cCONC)."),
    key: str | None = typer.Option(
        None,
        "--key",
        help="Attach key (a second bench with the same key and settings attaches to the live run instead of starting another).",
    ),
    detach: bool = typer.Option(False, "--detach", "-d", help="Start the run and return its id."),
    timeout: str | None = typer.Option(None, "--timeout", help="Time limit of the run (exit 4)."),
    runs_dir: str | None = typer.Option(None, "--runs-dir", help=RUNS_DIR_HELP),
    port: int = typer.Option(
        8000, "--port", min=1, max=65535, help="Port on 127.0.0.1 when no --base-url."
    ),
    json_out: bool = typer.Option(False, "--json", help="Print metrics.json to stdout."),
    target: str | None = typer.Option(None, "--target", help=TARGET_HELP),
    allow_unhealthy_gpu: bool = typer.Option(
        False,
        "--allow-unhealthy-gpu",
        help="Run even when the GPU preflight fails (uncorrected ECC errors, pending page retirement or row remapping, a hardware Xid since boot, clocks held down for heat); without it such a bench is refused with exit 69. The server's processes on the GPUs are recorded, not judged. docs/gpu-health.md.",
    ),
) -> None:
    """Run a serving benchmark against a server, as a supervised run.

    Its log holds vLLM's `Serving Benchmark Result` block and progress lines; metrics.json
    and the store hold the metrics. Exit 3 if
    more requests failed than --max-error-rate allows (default: any), 69 if the server cannot be
    reached or the --server run has ended or serves another model, or the GPU preflight
    failed."""
    if output_dir is None:
        # Bad input is refused here, before a run (or a far machine) exists; the --server run
        # is resolved where the bench runs (the far runs dir under --target).
        job_ = bench_job(job, port=port, json_out=json_out, own="bench")
        submission = Submission(
            job=job_,
            name=name,
            key=key,
            detach=detach,
            timeout=timeout,
            server=server_ref(server, job, BENCH_FILLS),
            allow_unhealthy_gpu=allow_unhealthy_gpu,
            answer=json_out,
        )
        from proctor.cli.remote import submit_command

        return submit_command(submission, target, runs_dir=runs_dir, as_json=json_out)
    if target:
        raise UsageError(
            "--output-dir runs the bench in this process; --target runs it there",
            hint="drop one of them",
        )
    cfg = bench_job(job, port=port, json_out=json_out, own="bench")
    if server:
        here = Submission(job=cfg, server=server_ref(server, job, BENCH_FILLS))
        filled = here.with_server_facts(live_server_facts(server, runs_dir)).job
        assert isinstance(filled, BenchJob)
        cfg = filled
    if json_out:
        # In-process with --json: nothing but the JSON (the supervised run's log keeps its lines).
        cfg = cfg.model_copy(update={"log_every_s": 0.0})
    result = run_benchmark(cfg, output_dir)
    write_outputs(result, output_dir)
    if json_out:
        print_json(result_document(result))
    else:
        for line in result_lines(result):
            console.print(line, markup=False, highlight=False, soft_wrap=True)
    check_outcome(result)


bench = job_command(_bench, JobGroup("job", BenchJob))

# What a --server run's facts fill in a bench job where the user did not set them.
BENCH_FILLS: tuple[ServerField, ...] = ("base_url", "model", "endpoint")


def server_ref(
    server: str | None, job: JobValues, fills: tuple[ServerField, ...]
) -> ServerRef | None:
    """`--server RUN` as the submission's: the run, and the job's fields it fills (those of
    `fills` the user did not set)."""
    if not server:
        return None
    return ServerRef(run=server, fills=[f for f in fills if f not in job.given])


app.command("serve")(bench)


def register(root: typer.Typer) -> None:
    root.command("bench")(bench)
    register_sweep(root)


def _server_grid(
    axes: list[str],
    file: Path | None,
    group: str | None,
    engine: str | None,
    model: str | None,
    tp: int | None,
    port: int,
    poll: str | None,
    runs_dir: str | None,
    extra: list[str],
    bench: dict[str, object],
) -> ServerGridJob:
    """The server grid job of `--server-grid` and the bench flags, or of a flow file's [sweep]."""
    from proctor.cli.sweeps import grid_of, grid_table
    from proctor.flow import load_flow_file
    from proctor.jobs.flow import flow_job

    if file is not None:
        table = load_flow_file(file)
        if not isinstance(table.get("sweep"), dict):
            raise UsageError(f"flow file {file} has no [sweep] table")
        # The server flags the user set win over the file's [flow] table, as for `flow --file`.
        set_here = {"engine": engine, "model": model, "tp": tp}
        given: dict[str, object] = {
            "runs_dir": runs_dir,
            "server": {k: v for k, v in set_here.items() if v is not None},
            **({"poll": poll} if poll else {}),
            **({"extra": extra} if extra else {}),
        }
        options = flow_job(given, table, file, need_workload=False)
        return grid_of(options, table["sweep"], file, group)
    server = {"engine": engine, "model": model, "tp": tp, "port": port}
    given = {
        "server": {k: v for k, v in server.items() if v is not None},
        **({"poll": poll} if poll else {}),
        "runs_dir": runs_dir,
        "extra": extra,
    }
    options = flow_job(given, {}, None, need_workload=False)
    return grid_of(options, grid_table(axes, bench), None, group)


def sweep_job(
    sweep: JobValues,
    bench: JobValues,
    *,
    port: int,
    runs_dir: str | None,
) -> SweepJob:
    """The sweep job the options describe: its bench job built as `bench` builds it, checked at
    every point (concurrency x rate) and its dataset file read now (its path made absolute), so
    a bad option fails before the first point."""
    from proctor.workloads.loadgen.datafiles import checked_dataset

    base = bench_job(bench, port=port, json_out=True, own="sweep")
    base = base.updated(dataset=checked_dataset(base.dataset))
    values = {**sweep.values, "bench": base, "runs_dir": runs_dir}
    job = validated(SweepJob, values, what="invalid option", hint="see proctor sweep --help")
    for conc in job.concurrency:
        for rate in job.request_rate or [base.request_rate]:
            try:
                job.point(concurrency=conc, request_rate=rate)
            except ValidationError as e:
                raise invalid(e, what="invalid option", hint="see proctor sweep --help") from None
    return job


def _sweep(
    *,
    sweep: JobValues,
    bench: JobValues,
    server: str | None = typer.Option(
        None, "--server", help="A server run (id or 'last') to benchmark."
    ),
    port: int = typer.Option(
        8000, "--port", min=1, max=65535, help="Port on 127.0.0.1 when no --base-url."
    ),
    runs_dir: str | None = typer.Option(None, "--runs-dir", help=RUNS_DIR_HELP),
    json_out: bool = typer.Option(False, "--json", help=JSON_HELP),
    target: str | None = typer.Option(
        None,
        "--target",
        help="Run the sweep on this target, next to the server. " + TARGET_HELP,
    ),
    server_grid: list[str] = typer.Option(
        [],
        "--server-grid",
        help="NAME=V1,V2: a server parameter axis (repeatable; tp or an engine flag); each server point is its own flow (start, ready, benches, drain, stop). Needs --engine, --model (the model to serve) and --group.",
    ),
    file: Path | None = typer.Option(
        None,
        "--file",
        "-f",
        help="Flow file: [flow] the server, [sweep] server = {axes}, bench = {options; concurrency and request_rate lists are axes}.",
    ),
    group: str | None = typer.Option(
        None,
        "--group",
        help="Server sweep group: run again with the same group, finished points are skipped and failed ones retried.",
    ),
    engine: str | None = typer.Option(None, "--engine", help="Server grid: engine profile."),
    tp: int | None = typer.Option(
        None, "--tp", help="Server grid: tensor parallelism (unless an axis)."
    ),
    poll: str | None = typer.Option(None, "--poll", help="Server grid: drain poll (default 10s)."),
    extra: list[str] = typer.Argument(
        None, metavar="[-- EXTRA ENGINE ARGS]", help="Server grid: " + EXTRA_ENGINE_HELP
    ),
) -> None:
    """Run a bench per concurrency (or server point), one summary.

    Each point is a bench grouped under one sweep id, with every bench option; a summary table
    (text, JSON, CSV) in the sweep's directory, rewritten after each point so earlier points are
    kept if a later one fails. A point whose requests failed beyond --max-error-rate is a failed
    point (exit 3). Exit 0 if every point succeeded, else the first failing point's.

    --server-grid (or --file with a [sweep] table): each server configuration its own
    flow, times the bench points; summary with tokens/s per user and per GPU and the Pareto
    front. --slo: the highest --search value in [--lo, --hi] meeting the SLO, by bisection
    against one server (exit 3 when even --lo misses it). docs/bench.md."""

    if server_grid or file:
        from proctor.cli.sweeps import submit_grid

        job = sweep_job(sweep, bench, port=port, runs_dir=runs_dir)
        raw_rates = sweep.values.get("request_rate")
        grid = _server_grid(
            server_grid,
            file,
            group,
            engine,
            bench.values.get("model"),
            tp,
            port,
            poll,
            runs_dir,
            extra or [],
            {
                **{k: v for k, v in bench.set_by_user().items() if k != "model"},
                "dataset": job.bench.dataset,
                "concurrency": job.concurrency,
                "request_rate": [_rate_text(r) for r in raw_rates] if raw_rates else None,
            },
        )
        # Here, or on --target: the grid's flows run there; its home run and its points come
        # back as local runs.
        submit_grid(grid, target, runs_dir=runs_dir, as_json=json_out)
        return
    from proctor.cli.remote import submit_command

    # Every point checked here, before a run (or a far machine) exists; the --server run is
    # resolved where the sweep runs (the far runs dir under --target).
    job = sweep_job(sweep, bench, port=port, runs_dir=None if target else runs_dir)
    submission = Submission(job=job, server=server_ref(server, bench, BENCH_FILLS), answer=json_out)
    submit_command(submission, target, runs_dir=runs_dir, as_json=json_out)


def _rate_text(rate: float) -> str:
    return "inf" if rate == float("inf") else f"{rate:g}"


def register_sweep(root: typer.Typer) -> None:
    """`proctor sweep --concurrency 4,8,16 [every bench option]`: one bench run per point."""
    root.command("sweep")(
        job_command(
            _sweep,
            JobGroup("sweep", SweepJob),
            JobGroup(
                "bench",
                BenchJob,
                skip=("concurrency", "request_rate"),
                help_prefix={"model": "With --server-grid, the model to serve. "},
            ),
        )
    )

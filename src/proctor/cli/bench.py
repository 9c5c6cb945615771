"""`proctor bench`: a serving benchmark against any OpenAI-compatible server.

Mount either way: `register(root)` adds the top-level `proctor bench` command;
`app` is a group whose `serve` command is the same thing.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

import typer
from pydantic import SecretStr, ValidationError

from proctor.cli.helptext import EXTRA_ENGINE_HELP, JSON_HELP, RUNS_DIR_HELP
from proctor.cli.jobopts import JobGroup, JobValues, job_command
from proctor.cli.output import console, print_json
from proctor.cli.targethelp import TARGET_HELP
from proctor.errors import UsageError, invalid
from proctor.jobs.argv import job_argv
from proctor.jobs.bench import BenchJob
from proctor.jobs.documents import read_bench
from proctor.jobs.options import validated
from proctor.jobs.sweep import SweepJob
from proctor.record.rundir import RunDir
from proctor.workloads.loadgen.config import BenchConfig
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


def bench_job(
    job: JobValues, *, server_facts: Mapping[str, object], port: int, json_out: bool, own: str
) -> BenchJob:
    """The bench job the options describe: what the user set, then the --server run's facts,
    then the defaults (--port's URL). The API key comes from OPENAI_API_KEY only."""
    values = dict(job.values)
    if "base_url" not in job.given:
        values["base_url"] = str(server_facts.get("base_url") or f"http://127.0.0.1:{port}")
    if "model" not in job.given and server_facts.get("checked_model"):
        values["model"] = str(server_facts["checked_model"])
    if "endpoint" not in job.given and server_facts.get("use_chat_template"):
        values["endpoint"] = "chat"
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
    server_facts: dict[str, object] = {}
    if server and not target:  # with --target, the server run is resolved where it runs
        server_facts = live_server_facts(server, runs_dir)
    cfg = bench_job(job, server_facts=server_facts, port=port, json_out=json_out, own="bench")
    if json_out and output_dir is not None:
        # In-process with --json: nothing but the JSON (the supervised run's log keeps its lines).
        cfg = cfg.model_copy(update={"log_every_s": 0.0})
    if target:
        from proctor.cli.remote import hand_off

        # Validated above first: a bad flag is 64 here, not after a job waited in a queue.
        return hand_off(
            target,
            runs_dir=runs_dir,
            as_json=json_out,
            answer=True,
            leave_live=detach,
            direct=detach,
            detach=detach,
        )
    if output_dir is None:
        _supervised(
            cfg, name, key, detach, timeout, runs_dir, server_facts, json_out, allow_unhealthy_gpu
        )
        return
    result = run_benchmark(cfg, output_dir)
    write_outputs(result, output_dir)
    if json_out:
        print_json(result_document(result))
    else:
        for line in result_lines(result):
            console.print(line, markup=False, highlight=False, soft_wrap=True)
    check_outcome(result)


bench = job_command(_bench, JobGroup("job", BenchJob))


def _supervised(
    cfg: BenchConfig,
    name: str | None,
    key: str | None,
    detach: bool,
    timeout: str | None,
    runs_dir: str | None,
    server_facts: dict[str, object],
    json_out: bool,
    allow_unhealthy_gpu: bool = False,
) -> None:
    from proctor.cli.output import err_console
    from proctor.cli.run import health_of, print_health
    from proctor.record.schema import load_record
    from proctor.spec.config import load_config
    from proctor.spec.plan import RunFlags, resolve_run_plan
    from proctor.supervise.launch import RunSpec, start_run
    from proctor.targets.service import SupervisedRun, guard_start

    # The run's log always gets the progress lines, whatever this terminal shows.
    argv = job_argv(cfg.model_copy(update={"progress": True}))
    flags = RunFlags(
        argv=argv,
        name=name or f"bench-isl{cfg.isl}-osl{cfg.osl}-c{cfg.concurrency}",
        runs_dir=runs_dir,
        timeout=timeout,
        key=key,
        detach=detach,
        gpu_sample=0,
        allow_unhealthy_gpu=allow_unhealthy_gpu or None,
    )
    plan = resolve_run_plan(flags, load_config())
    extra: dict[str, object] = {
        "bench": {
            "base_url": cfg.base_url,
            "isl": cfg.isl,
            "osl": cfg.osl,
            "concurrency": cfg.concurrency,
            "dataset": cfg.dataset,
            "repeat": cfg.repeat,
        }
    }
    if server_facts:
        extra["server_run"] = server_facts["run_id"]
    interrupts = guard_start()
    started = start_run(plan, RunSpec(kind="bench", extra=extra))
    run = started.run
    interrupts.attach(run)
    if started.attached:
        _check_same_bench(run, plan.redactor().argv(plan.argv), str(key))
        err_console.print(
            f"proctor: attached to live bench run {run.run_id} (key {key})",
            markup=False,
            highlight=False,
        )
    health = health_of(run)
    if detach:
        if json_out:
            print_json(
                {
                    "run_id": run.run_id,
                    "dir": str(run.path),
                    "attached": started.attached,
                    "gpu_health": health,
                }
            )
        else:
            typer.echo(run.run_id)
        return
    err_console.print(f"proctor: bench run {run.run_id} -> {run.path}", highlight=False)
    print_health(run)
    supervised = SupervisedRun(run)
    with open(os.devnull, "wb") as devnull:
        state = supervised.follow_to_end(devnull if json_out else sys.stdout.buffer)
    if json_out:
        record = load_record(run.path)
        print_json(
            {
                "run_id": run.run_id,
                **(run.read_json("metrics.json") or {}),
                "outcome": record.outcome if record else None,
                "gpu_health": health,
                "gpu_health_change": health_of(run, "gpu_health_change"),
            }
        )
    err_console.print(f"proctor: {supervised.summary(state)}", highlight=False)
    doc = read_bench(run.path / "metrics.json")
    verdict = doc.verdict if doc else None
    if verdict is not None and verdict.ok is False:
        err_console.print(
            f"proctor: benchmark failed: {verdict.message}", markup=False, highlight=False
        )
    validity = doc.validity if doc else None
    if validity is not None and validity.verdict == "INVALID":  # not a measurement (docs/bench.md)
        err_console.print(
            "proctor: benchmark INVALID: " + "; ".join(validity.reasons),
            markup=False,
            highlight=False,
        )
    if code := interrupts.exit_code(run, state):
        from proctor.targets.service import run_failure

        raise run_failure(run, code, "bench")


def _check_same_bench(run: RunDir, argv: list[str], key: str) -> None:
    """Attaching is for the same bench started twice; a key held by other settings is refused."""
    from proctor.record.schema import read_view

    theirs = read_view(run.path).argv
    if theirs != argv:
        raise UsageError(
            f"key {key!r} belongs to live bench run {run.run_id}, started with other settings",
            hint="use another --key, or wait for that run (`proctor runs wait`)",
        )


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
    json_out: bool,
    say: Callable[[str], None],
) -> None:
    from proctor.cli.sweeps import grid_table, run_grid
    from proctor.flow import load_flow_file
    from proctor.jobs.flow import flow_job
    from proctor.spec.config import load_config

    if file is not None:
        table = load_flow_file(file)
        if not isinstance(table.get("sweep"), dict):
            raise UsageError(f"flow file {file} has no [sweep] table")
        given: dict[str, object] = {"runs_dir": runs_dir, **({"poll": poll} if poll else {})}
        options = flow_job(given, table, file, need_workload=False)
        run_grid(
            options, table["sweep"], file, load_config(), as_json=json_out, say=say, group=group
        )
        return
    server = {"engine": engine, "model": model, "tp": tp, "port": port}
    given = {
        "server": {k: v for k, v in server.items() if v is not None},
        **({"poll": poll} if poll else {}),
        "runs_dir": runs_dir,
        "extra": extra,
    }
    options = flow_job(given, {}, None, need_workload=False)
    run_grid(
        options,
        grid_table(axes, bench),
        None,
        load_config(),
        as_json=json_out,
        say=say,
        group=group,
    )


def sweep_job(
    sweep: JobValues,
    bench: JobValues,
    *,
    server_facts: Mapping[str, object],
    port: int,
    runs_dir: str | None,
) -> SweepJob:
    """The sweep job the options describe: its bench job built as `bench` builds it, checked at
    every point (concurrency x rate) and its dataset file read now (its path made absolute), so
    a bad option fails before the first point."""
    from proctor.workloads.loadgen.datafiles import checked_dataset

    base = bench_job(bench, server_facts=server_facts, port=port, json_out=True, own="sweep")
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
    from proctor.cli.output import err_console
    from proctor.jobs.run import run_sweep_job
    from proctor.workloads.sweep import summary_text

    if target:
        from proctor.cli.remote import hand_off

        # As bench: in the far runs dir (where --server runs are); the sweep and its points
        # come back as local runs of their own.
        return hand_off(target, runs_dir=runs_dir, as_json=json_out, answer=True)
    say: Callable[[str], None] = (
        (lambda line: None)
        if json_out
        else (lambda line: err_console.print(line, markup=False, highlight=False))
    )
    facts: dict[str, object] = {}
    if server and not (server_grid or file):
        facts = live_server_facts(server, runs_dir)
    job = sweep_job(sweep, bench, server_facts=facts, port=port, runs_dir=runs_dir)
    if server_grid or file:
        raw_rates = sweep.values.get("request_rate")
        _server_grid(
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
            json_out,
            say,
        )
        return
    code, where, summary = run_sweep_job(job, say=say)
    if job.slo:
        result = summary
        if json_out:
            print_json(result)
        else:
            answer = result.get("answer")
            typer.echo(f"{job.search}: {'none' if answer is None else f'{answer:g}'}")
            say(f"proctor: slo search {where.name}: {where / 'result.json'}")
        if result.get("error"):
            raise UsageError(
                str(result["error"]),
                hint="name metrics of the bench's metrics.json, e.g. p99_ttft_ms<=500",
            )
    elif json_out:
        print_json(summary)
    else:
        from proctor.workloads.sweep import points_of

        sys.stdout.write(summary_text(points_of(summary)))
        err_console.print(
            f"proctor: sweep {where.name}: {where}/summary.csv; plots: proctor report {job.name}",
            highlight=False,
        )
    if code:
        raise typer.Exit(code)


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

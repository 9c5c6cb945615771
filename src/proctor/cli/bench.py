"""`proctor bench`: a serving benchmark against any OpenAI-compatible server.

Mount either way: `register(root)` adds the top-level `proctor bench` command;
`app` is a group whose `serve` command is the same thing.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer
from pydantic import SecretStr, ValidationError

from proctor.cli.helptext import EXTRA_ENGINE_HELP, JSON_HELP, RUNS_DIR_HELP
from proctor.cli.output import console, print_json
from proctor.cli.targethelp import TARGET_HELP
from proctor.errors import UsageError, invalid
from proctor.jobs.documents import read_bench
from proctor.record.rundir import RunDir
from proctor.spec.datasets import DATASET_SPECS
from proctor.workloads.loadgen.config import BenchConfig, parse_goodput, parse_rate
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


def bench(
    ctx: typer.Context,
    output_dir: Path | None = typer.Option(
        None,
        "--output-dir",
        "-o",
        help="Run in-process and write metrics.json here instead of making a supervised run.",
    ),
    server: str | None = typer.Option(
        None, "--server", help="A server run (id or 'last') to benchmark; gives base URL and model."
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
    base_url: str | None = typer.Option(None, "--base-url", help="Server URL."),
    port: int = typer.Option(
        8000, "--port", min=1, max=65535, help="Port on 127.0.0.1 when no --base-url."
    ),
    model: str | None = typer.Option(None, "--model", help="Model name (default: /v1/models)."),
    tokenizer: str | None = typer.Option(None, "--tokenizer", help="Local tokenizer dir."),
    tokenizer_mode: str = typer.Option(
        "auto", "--tokenizer-mode", help="auto | server | local | approx"
    ),
    chat: bool = typer.Option(False, "--chat", help="Use /v1/chat/completions."),
    isl: int = typer.Option(1024, "--isl", help="Input length (tokens)."),
    osl: int = typer.Option(1024, "--osl", help="Output length (tokens)."),
    concurrency: int = typer.Option(128, "--concurrency", help="Maximum requests in flight."),
    prompt_multiplier: int = typer.Option(
        10, "--prompt-multiplier", help="Prompts = concurrency x this."
    ),
    num_prompts: int | None = typer.Option(None, "--num-prompts", help="Overrides the multiplier."),
    range_ratio: float = typer.Option(0.8, "--range-ratio", help="Lengths on L(1±r), as vLLM."),
    num_warmups: int | None = typer.Option(None, "--num-warmups", help="Default 2 x concurrency."),
    request_rate: str = typer.Option("inf", "--request-rate", help="inf or requests/s."),
    burstiness: float = typer.Option(1.0, "--burstiness", help="1 = Poisson, else gamma."),
    seed: int = typer.Option(0, "--seed", help="Seed N of the prompts and arrival times."),
    ignore_eos: bool = typer.Option(
        True,
        "--ignore-eos/--no-ignore-eos",
        help="Ask the server to generate --osl tokens whatever the model says (as vLLM's bench).",
    ),
    profile: bool = typer.Option(False, "--profile", help="Call /start_profile, /stop_profile."),
    workers: int = typer.Option(1, "--workers", help="Client processes."),
    percentiles: str = typer.Option("99", "--percentiles", help="e.g. 50,90,99"),
    goodput: list[str] = typer.Option([], "--goodput", help="SLO like ttft:500 (repeatable)."),
    request_timeout: float = typer.Option(6 * 3600.0, "--request-timeout", help="Seconds."),
    idle_timeout: float = typer.Option(600.0, "--idle-timeout", help="Seconds between chunks."),
    save_detailed: bool = typer.Option(False, "--save-detailed", help="Write requests.jsonl."),
    json_out: bool = typer.Option(False, "--json", help="Print metrics.json to stdout."),
    max_error_rate: float = typer.Option(
        0.0,
        "--max-error-rate",
        help="Fraction of requests allowed to fail (default 0: any failed request fails the bench, exit 3).",
    ),
    log_every: float = typer.Option(
        5.0, "--log-every", help="Seconds between progress lines in the run's log (0: none)."
    ),
    server_metrics: float = typer.Option(
        1.0,
        "--server-metrics",
        help="Seconds between scrapes of the server's /metrics into server_metrics.csv (0: none).",
    ),
    gpu_sample: float = typer.Option(
        1.0,
        "--gpu-sample",
        help="Seconds between GPU samples (memory, power, clock) into the bench's gpu.csv (0: none).",
    ),
    idle_power_w: float | None = typer.Option(
        None,
        "--idle-power-w",
        help="Idle GPU power in W (all GPUs) for energy/token; default: measured before the load.",
    ),
    min_requests: int = typer.Option(
        100, "--min-requests", help="Fewer measured requests make the benchmark INVALID."
    ),
    min_window: float = typer.Option(
        10.0, "--min-window", help="A shorter measured window (s) makes the benchmark INVALID."
    ),
    target: str | None = typer.Option(None, "--target", help=TARGET_HELP),
    dataset: str = typer.Option(
        "random",
        "--dataset",
        help="What to send: random | jsonl:PATH (prompt, output_len per line) | sharegpt:PATH (first human turn; the gpt reply's length) | shared-prefix (groups sharing a prefix) | multi-turn:PATH (ShareGPT conversations, turn by turn) | trace:PATH (a Mooncake JSONL or BurstGPT CSV trace, replayed on its own clock). docs/bench.md#datasets.",
    ),
    prefix_groups: int = typer.Option(
        4, "--prefix-groups", help="shared-prefix: groups of prompts sharing one prefix."
    ),
    prefix_hit_rate: float = typer.Option(
        0.5,
        "--prefix-hit-rate",
        help="shared-prefix: target prefix-cache hit rate (sizes the prefix).",
    ),
    prefix_len: int | None = typer.Option(
        None, "--prefix-len", help="shared-prefix: prefix tokens (overrides --prefix-hit-rate)."
    ),
    trace_speed: float = typer.Option(1.0, "--trace-speed", help=TRACE_SPEED_HELP),
    allow_unhealthy_gpu: bool = typer.Option(
        False,
        "--allow-unhealthy-gpu",
        help="Run even when the GPU preflight fails (uncorrected ECC errors, pending page retirement or row remapping, a hardware Xid since boot, clocks held down for heat); without it such a bench is refused with exit 69. The server's processes on the GPUs are recorded, not judged. docs/gpu-health.md.",
    ),
    repeat: int = typer.Option(
        1,
        "--repeat",
        help="Run the measured phase N times: each metric gets mean, stdev and a 95% confidence interval.",
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
        base_url = base_url or str(server_facts["base_url"])
        model = model or str(server_facts["checked_model"])
        chat = chat or bool(server_facts.get("use_chat_template"))
    # The API key authenticates requests; it is never the run's attach key (that is --key),
    # and it reaches the load generator only through the inherited environment.
    api_key = os.environ.get("OPENAI_API_KEY")
    try:
        cfg = BenchConfig(
            base_url=base_url or f"http://127.0.0.1:{port}",
            endpoint="chat" if chat else "completions",
            model=model,
            tokenizer=tokenizer,
            tokenizer_mode=tokenizer_mode,  # type: ignore[arg-type]  # validated by pydantic
            isl=isl,
            osl=osl,
            concurrency=concurrency,
            prompt_multiplier=prompt_multiplier,
            num_prompts=num_prompts,
            range_ratio=range_ratio,
            num_warmups=num_warmups,
            request_rate=parse_rate(request_rate),
            burstiness=burstiness,
            seed=seed,
            ignore_eos=ignore_eos,
            temperature=0.0,
            profile=profile,
            workers=workers,
            percentiles=[float(p) for p in percentiles.split(",") if p],
            goodput_slos_ms=parse_goodput(goodput),
            request_timeout_s=request_timeout,
            idle_timeout_s=idle_timeout,
            save_detailed=save_detailed,
            progress=not json_out,
            api_key=SecretStr(api_key) if api_key else None,
            max_error_rate=max_error_rate,
            # In-process with --json: nothing but the JSON (the supervised run's log keeps its lines).
            log_every_s=0.0 if json_out and output_dir is not None else log_every,
            dataset=dataset,
            prefix_groups=prefix_groups,
            prefix_hit_rate=prefix_hit_rate,
            prefix_len=prefix_len,
            trace_speed=trace_speed,
            repeat=repeat,
            server_metrics_s=server_metrics,
            gpu_sample_s=gpu_sample,
            idle_power_w=idle_power_w,
            min_requests=min_requests,
            min_window_s=min_window,
        )
    except ValidationError as e:
        raise invalid(e, what="invalid option", hint="see proctor bench --help") from None
    except ValueError as e:
        raise UsageError(str(e), hint="see proctor bench --help") from e
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


def loadgen_argv(cfg: BenchConfig) -> list[str]:
    """The supervised run's command: the load generator given the validated config as one typed
    request (JSON), not flags rebuilt from the CLI's parameters. The API key is not in it."""
    # The run's log always gets the progress lines, whatever this terminal shows.
    request = json.dumps(
        cfg.model_copy(update={"progress": True}).public_dict(),
        sort_keys=True,
        separators=(",", ":"),
    )
    return [sys.executable, "-m", "proctor.workloads.loadgen", "--config-json", request]


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

    argv = loadgen_argv(cfg)
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


def _ints(text: str) -> list[int]:
    try:
        points = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UsageError(f"invalid --concurrency {text!r}", hint="write e.g. 4,8,16") from None
    if not points or min(points) < 1:
        raise UsageError("--concurrency needs positive integers, e.g. 4,8,16")
    return points


def _rates(text: str | None) -> list[str] | None:
    if text is None:
        return None
    rates = [x.strip() for x in text.split(",") if x.strip()]
    for rate in rates:
        parse_rate(rate)
    return rates or None


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
    from proctor.cli.workflow import flow_options
    from proctor.flow import load_flow_file
    from proctor.spec.config import load_config

    if file is not None:
        table = load_flow_file(file)
        if not isinstance(table.get("sweep"), dict):
            raise UsageError(f"flow file {file} has no [sweep] table")
        given: dict[str, object] = {"runs_dir": runs_dir, "poll": poll}
        options = flow_options(given, table, file, need_workload=False)
        run_grid(
            options, table["sweep"], file, load_config(), as_json=json_out, say=say, group=group
        )
        return
    given = {
        "engine": engine,
        "model": model,
        "tp": tp,
        "port": port,
        "poll": poll,
        "runs_dir": runs_dir,
        "extra": extra,
    }
    options = flow_options(given, {}, None, need_workload=False)
    run_grid(
        options,
        grid_table(axes, bench),
        None,
        load_config(),
        as_json=json_out,
        say=say,
        group=group,
    )


def _sweep_dataset(
    dataset: str,
    prefix_groups: int,
    prefix_hit_rate: float,
    prefix_len: int | None,
    trace_speed: float,
    workers: int,
    points: list[int],
    rates: list[str] | None,
    isl: int,
    osl: int,
) -> dict[str, object]:
    """The dataset options every point of a sweep sends (only those not at their defaults),
    checked as bench checks them (for every point's concurrency and rate) and the file read
    now, its path made absolute: a bad one fails before the first point."""
    from proctor.workloads.loadgen.datafiles import checked_dataset

    shape: dict[str, Any] = {
        "dataset": dataset,
        "prefix_groups": prefix_groups,
        "prefix_hit_rate": prefix_hit_rate,
        "prefix_len": prefix_len,
        "trace_speed": trace_speed,
        "workers": workers,
    }
    for conc in points:
        for rate in rates or ["inf"]:
            try:
                BenchConfig(  # validated by pydantic
                    isl=isl, osl=osl, concurrency=conc, request_rate=parse_rate(rate), **shape
                )
            except ValidationError as e:
                raise invalid(e, what="invalid option", hint="see proctor sweep --help") from None
    shape["dataset"] = checked_dataset(dataset)
    defaults = {
        "dataset": "random",
        "prefix_groups": 4,
        "prefix_hit_rate": 0.5,
        "prefix_len": None,
        "trace_speed": 1.0,
        "workers": 1,
    }
    return {k: v for k, v in shape.items() if v != defaults[k]}


def register_sweep(root: typer.Typer) -> None:
    """`proctor sweep --concurrency 4,8,16 [bench options]`: one bench run per point."""

    @root.command("sweep")
    def sweep(
        concurrency: str = typer.Option(
            "4,8,16,32,64,128", "--concurrency", help="Comma-separated points."
        ),
        server: str | None = typer.Option(None, "--server", help="A server run to benchmark."),
        base_url: str | None = typer.Option(
            None, "--base-url", help="Server URL, e.g. http://127.0.0.1:8000."
        ),
        port: int = typer.Option(
            8000, "--port", min=1, max=65535, help="Port on 127.0.0.1 when no --base-url."
        ),
        model: str | None = typer.Option(
            None,
            "--model",
            help="Model name (default: /v1/models); with --server-grid, the model to serve.",
        ),
        isl: int = typer.Option(1024, "--isl", help="Input length (tokens)."),
        osl: int = typer.Option(1024, "--osl", help="Output length (tokens)."),
        prompt_multiplier: int = typer.Option(
            10, "--prompt-multiplier", help="Prompts per point = concurrency x this."
        ),
        range_ratio: float = typer.Option(0.8, "--range-ratio", help="Lengths on L(1±r), as vLLM."),
        chat: bool = typer.Option(False, "--chat", help="Use /v1/chat/completions."),
        seed: int = typer.Option(0, "--seed", help="Seed N of the prompts and arrival times."),
        name: str = typer.Option(
            "sweep", "--name", help="NAME of the sweep (its points are NAME-cN)."
        ),
        runs_dir: str | None = typer.Option(None, "--runs-dir", help=RUNS_DIR_HELP),
        json_out: bool = typer.Option(False, "--json", help=JSON_HELP),
        max_error_rate: float = typer.Option(
            0.0,
            "--max-error-rate",
            help="Fraction of a point's requests allowed to fail (default 0); above it the point fails.",
        ),
        target: str | None = typer.Option(
            None,
            "--target",
            help="Run the sweep on this target, next to the server. " + TARGET_HELP,
        ),
        num_prompts: int | None = typer.Option(
            None, "--num-prompts", help="Prompts per bench (overrides --prompt-multiplier)."
        ),
        request_rate: str | None = typer.Option(
            None,
            "--request-rate",
            help="Requests/s: comma-separated, an axis of a server grid; one value for an SLO search over concurrency.",
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
        poll: str | None = typer.Option(
            None, "--poll", help="Server grid: drain poll (default 10s)."
        ),
        slo: str | None = typer.Option(
            None,
            "--slo",
            help='SLO search: conditions on bench metrics, e.g. "p99_ttft_ms<=500,p99_tpot_ms<=30".',
        ),
        search: str = typer.Option(
            "request-rate", "--search", help="SLO search axis: request-rate or concurrency."
        ),
        lo: float | None = typer.Option(None, "--lo", help="SLO search: lowest value."),
        hi: float | None = typer.Option(None, "--hi", help="SLO search: highest value."),
        max_probes: int = typer.Option(
            12, "--max-probes", min=2, help="SLO search: at most this many benches."
        ),
        resolution: float | None = typer.Option(
            None,
            "--resolution",
            help="SLO search: stop when the bracket is this narrow (default 1 for concurrency, 5% of --hi for rates).",
        ),
        dataset: str = typer.Option(
            "random",
            "--dataset",
            help=f"What every point sends, as bench: {DATASET_SPECS}. docs/bench.md#datasets.",
        ),
        prefix_groups: int = typer.Option(
            4, "--prefix-groups", help="shared-prefix: groups of prompts sharing one prefix."
        ),
        prefix_hit_rate: float = typer.Option(
            0.5, "--prefix-hit-rate", help="shared-prefix: target prefix-cache hit rate."
        ),
        prefix_len: int | None = typer.Option(
            None, "--prefix-len", help="shared-prefix: prefix tokens."
        ),
        trace_speed: float = typer.Option(1.0, "--trace-speed", help=TRACE_SPEED_HELP),
        workers: int = typer.Option(1, "--workers", help="Client processes per bench."),
        extra: list[str] = typer.Argument(
            None, metavar="[-- EXTRA ENGINE ARGS]", help="Server grid: " + EXTRA_ENGINE_HELP
        ),
    ) -> None:
        """Run a bench per concurrency (or server point), one summary.

        Each point is a bench grouped under one sweep id; a summary table (text, JSON,
        CSV) in the sweep's directory, rewritten after each point so earlier points are kept if
        a later one fails. A point whose requests failed beyond --max-error-rate is a failed
        point (exit 3). Exit 0 if every point succeeded, else the first failing point's.

        --server-grid (or --file with a [sweep] table): each server configuration its own
        flow, times the bench points; summary with tokens/s per user and per GPU and the Pareto
        front. --slo: the highest --search value in [--lo, --hi] meeting the SLO, by bisection
        against one server (exit 3 when even --lo misses it). docs/bench.md."""
        from proctor.cli.output import err_console
        from proctor.spec.config import load_config
        from proctor.workloads.sweep import run_sweep, summary_text

        if target:
            from proctor.cli.remote import hand_off

            # As bench: in the far runs dir (where --server runs are); the sweep and its points
            # come back as local runs of their own.
            return hand_off(target, runs_dir=runs_dir, as_json=json_out, answer=True)
        say = (
            (lambda line: None)
            if json_out
            else (lambda line: err_console.print(line, markup=False, highlight=False))
        )
        points = _ints(concurrency)
        shape = _sweep_dataset(
            dataset,
            prefix_groups,
            prefix_hit_rate,
            prefix_len,
            trace_speed,
            workers,
            points,
            _rates(request_rate),
            isl,
            osl,
        )
        if server_grid or file:
            _server_grid(
                server_grid,
                file,
                group,
                engine,
                model,
                tp,
                port,
                poll,
                runs_dir,
                extra or [],
                {
                    "concurrency": points,
                    "request_rate": _rates(request_rate),
                    "isl": isl,
                    "osl": osl,
                    "num_prompts": num_prompts,
                    "prompt_multiplier": prompt_multiplier,
                    "range_ratio": range_ratio,
                    "seed": seed,
                    "max_error_rate": max_error_rate or None,
                    "chat": chat or None,
                    **shape,
                },
                json_out,
                say,
            )
            return

        if not 0.0 <= max_error_rate <= 1.0:
            raise UsageError(f"--max-error-rate {max_error_rate} must be between 0 and 1")
        if server:
            facts = live_server_facts(server, runs_dir)
            base_url = base_url or str(facts["base_url"])
            model = model or str(facts["checked_model"])
            chat = chat or bool(facts.get("use_chat_template"))
        url = base_url or f"http://127.0.0.1:{port}"
        argv = [
            sys.executable,
            "-m",
            "proctor.workloads.loadgen",
            "--base-url",
            url,
            "--isl",
            str(isl),
            "--osl",
            str(osl),
            "--prompt-multiplier",
            str(prompt_multiplier),
            "--range-ratio",
            str(range_ratio),
            "--seed",
            str(seed),
            "--no-progress",
            "--max-error-rate",
            str(max_error_rate),
        ]
        if model:
            argv += ["--model", model]
        if chat:
            argv.append("--chat")
        if num_prompts is not None:
            argv += ["--num-prompts", str(num_prompts)]
        for option, value in shape.items():
            argv += [f"--{option.replace('_', '-')}", str(value)]
        if slo:
            from proctor.cli.sweeps import run_slo

            if search == "request-rate":  # the cap on requests in flight: the largest given
                argv += ["--concurrency", str(max(points))]
            elif request_rate:
                argv += ["--request-rate", request_rate]
            run_slo(
                argv,
                slo,
                search,
                lo,
                hi,
                load_config(),
                runs_dir=runs_dir,
                name=name if name != "sweep" else "slo",
                max_probes=max_probes,
                resolution=resolution,
                as_json=json_out,
                say=say,
            )
            return
        sweep_dir, results = run_sweep(
            argv, points, load_config(), runs_dir=runs_dir, name=name, say=say
        )
        if json_out:
            print_json(sweep_dir.read_json("summary.json"))
        else:
            sys.stdout.write(summary_text(results))
            err_console.print(
                f"proctor: sweep {sweep_dir.run_id}: {sweep_dir.path}/summary.csv", highlight=False
            )
        failing = [p for p in results if p.exit_code != 0]
        if failing:
            raise typer.Exit(failing[0].exit_code if failing[0].exit_code is not None else 6)

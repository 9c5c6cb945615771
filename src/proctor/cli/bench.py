"""`proctor bench`: a serving benchmark against any OpenAI-compatible server.

Mount either way: `register(root)` adds the top-level `proctor bench` command;
`app` is a group whose `serve` command is the same thing.
"""

from __future__ import annotations

import os
from pathlib import Path

import typer
from pydantic import SecretStr, ValidationError

from proctor.cli.output import console, print_json
from proctor.errors import UsageError
from proctor.workloads.loadgen.config import BenchConfig, parse_goodput, parse_rate
from proctor.workloads.loadgen.runner import (
    check_outcome,
    result_document,
    run_benchmark,
    write_outputs,
)
from proctor.workloads.loadgen.summary import format_summary

app = typer.Typer(help="Serving benchmarks against OpenAI-compatible servers.",
                  no_args_is_help=True)


def bench(
    output_dir: Path = typer.Option(..., "--output-dir", "-o", help="Where metrics.json goes."),
    base_url: str | None = typer.Option(None, "--base-url", help="Server URL."),
    port: int = typer.Option(8000, "--port", help="Port on 127.0.0.1 when no --base-url."),
    model: str | None = typer.Option(None, "--model", help="Model name (default: /v1/models)."),
    tokenizer: str | None = typer.Option(None, "--tokenizer", help="Local tokenizer dir."),
    tokenizer_mode: str = typer.Option("auto", "--tokenizer-mode",
                                       help="auto | server | local | approx"),
    chat: bool = typer.Option(False, "--chat", help="Use /v1/chat/completions."),
    isl: int = typer.Option(1024, "--isl", help="Input length (tokens)."),
    osl: int = typer.Option(1024, "--osl", help="Output length (tokens)."),
    concurrency: int = typer.Option(128, "--concurrency", help="Maximum requests in flight."),
    prompt_multiplier: int = typer.Option(10, "--prompt-multiplier",
                                          help="Prompts = concurrency x this."),
    num_prompts: int | None = typer.Option(None, "--num-prompts", help="Overrides the multiplier."),
    range_ratio: float = typer.Option(0.8, "--range-ratio", help="Lengths on L(1±r), as vLLM."),
    num_warmups: int | None = typer.Option(None, "--num-warmups",
                                           help="Default 2 x concurrency."),
    request_rate: str = typer.Option("inf", "--request-rate", help="inf or requests/s."),
    burstiness: float = typer.Option(1.0, "--burstiness", help="1 = Poisson, else gamma."),
    seed: int = typer.Option(0, "--seed"),
    ignore_eos: bool = typer.Option(True, "--ignore-eos/--no-ignore-eos"),
    profile: bool = typer.Option(False, "--profile", help="Call /start_profile, /stop_profile."),
    workers: int = typer.Option(1, "--workers", help="Client processes."),
    percentiles: str = typer.Option("99", "--percentiles", help="e.g. 50,90,99"),
    goodput: list[str] = typer.Option([], "--goodput", help="SLO like ttft:500 (repeatable)."),
    request_timeout: float = typer.Option(6 * 3600.0, "--request-timeout", help="Seconds."),
    idle_timeout: float = typer.Option(600.0, "--idle-timeout", help="Seconds between chunks."),
    save_detailed: bool = typer.Option(False, "--save-detailed", help="Write requests.jsonl."),
    json_out: bool = typer.Option(False, "--json", help="Print metrics.json to stdout."),
) -> None:
    """Run a serving benchmark; writes OUTPUT_DIR/metrics.json. Exit 3 if every request failed."""
    try:
        key = os.environ.get("OPENAI_API_KEY")
        cfg = BenchConfig(
            base_url=base_url or f"http://127.0.0.1:{port}", endpoint="chat" if chat else
            "completions", model=model, tokenizer=tokenizer,
            tokenizer_mode=tokenizer_mode,  # type: ignore[arg-type]  # validated by pydantic
            isl=isl, osl=osl, concurrency=concurrency, prompt_multiplier=prompt_multiplier,
            num_prompts=num_prompts, range_ratio=range_ratio, num_warmups=num_warmups,
            request_rate=parse_rate(request_rate), burstiness=burstiness, seed=seed,
            ignore_eos=ignore_eos, temperature=0.0, profile=profile, workers=workers,
            percentiles=[float(p) for p in percentiles.split(",") if p],
            goodput_slos_ms=parse_goodput(goodput), request_timeout_s=request_timeout,
            idle_timeout_s=idle_timeout, save_detailed=save_detailed,
            progress=not json_out, api_key=SecretStr(key) if key else None,
        )
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(str(x) for x in err["loc"])
        raise UsageError(f"invalid {where}: {err['msg']}", hint="see proctor bench --help") from e
    except ValueError as e:
        raise UsageError(str(e), hint="see proctor bench --help") from e
    result = run_benchmark(cfg)
    write_outputs(result, output_dir)
    if json_out:
        print_json(result_document(result))
    else:
        console.print(format_summary(result.metrics), markup=False, highlight=False)
    check_outcome(result)


app.command("serve")(bench)


def register(root: typer.Typer) -> None:
    root.command("bench")(bench)

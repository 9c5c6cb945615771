"""`python -m proctor.workloads.loadgen [flags] --output-dir DIR`: one benchmark, supervisable.

Writes DIR/metrics.json (and DIR/requests.jsonl with --save-detailed), prints vLLM's
`Serving Benchmark Result` block and a `Result:` line on stdout, and progress on stderr (a
bar on a terminal, a line every --log-every seconds elsewhere).
Exit 0: the benchmark completed with at most --max-error-rate of its requests failed (default
0: none); 3: more failed (the count and first reasons are printed and in metrics.json);
69: the server cannot be reached; 64: bad flags.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from pydantic import SecretStr, ValidationError

from proctor import redact
from proctor.errors import ExitCode, ProctorError, UsageError, invalid
from proctor.spec.datasets import DATASET_SPECS
from proctor.workloads.loadgen.config import BenchConfig, parse_goodput, parse_rate
from proctor.workloads.loadgen.printed import result_lines
from proctor.workloads.loadgen.runner import (
    check_outcome,
    run_benchmark,
    write_outputs,
)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m proctor.workloads.loadgen",
        description="Serving benchmark, OpenAI-compatible server.",
    )
    p.add_argument(
        "--config-json",
        metavar="JSON",
        help="the whole BenchConfig as JSON (what `proctor bench` passes; other "
        "benchmark flags are then not allowed)",
    )
    p.add_argument("--base-url", help="server URL (default http://127.0.0.1:PORT)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    # Under a supervised run the wrapper's environment names the run directory.
    p.add_argument(
        "--output-dir",
        type=Path,
        default=os.environ.get("PROCTOR_RUN_DIR"),
        required="PROCTOR_RUN_DIR" not in os.environ,
    )
    p.add_argument("--model")
    p.add_argument("--tokenizer")
    p.add_argument(
        "--tokenizer-mode", default="auto", choices=["auto", "server", "local", "approx"]
    )
    p.add_argument("--chat", action="store_true", help="use /v1/chat/completions")
    p.add_argument("--isl", type=int, default=1024)
    p.add_argument("--osl", type=int, default=1024)
    p.add_argument("--concurrency", type=int, default=128)
    p.add_argument("--prompt-multiplier", type=int, default=10)
    p.add_argument("--num-prompts", type=int)
    p.add_argument("--range-ratio", type=float, default=0.8)
    p.add_argument("--num-warmups", type=int)
    p.add_argument("--request-rate", default="inf")
    p.add_argument("--burstiness", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--ignore-eos", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--profile", action="store_true")
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--percentiles", default="99", help="comma-separated, e.g. 50,90,99")
    p.add_argument("--goodput", nargs="*", default=[], help="SLOs like ttft:500 tpot:50 e2el:1000")
    p.add_argument("--request-timeout", type=float, default=6 * 3600.0)
    p.add_argument("--idle-timeout", type=float, default=600.0)
    p.add_argument("--save-detailed", action="store_true")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument(
        "--max-error-rate",
        type=float,
        default=0.0,
        help="fraction of requests allowed to fail (default 0)",
    )
    p.add_argument(
        "--log-every",
        type=float,
        default=5.0,
        help="seconds between progress lines when not on a terminal (0: none)",
    )
    p.add_argument(
        "--dataset",
        default="random",
        help=DATASET_SPECS,
    )
    p.add_argument("--prefix-groups", type=int, default=4)
    p.add_argument("--prefix-hit-rate", type=float, default=0.5)
    p.add_argument("--prefix-len", type=int)
    p.add_argument(
        "--trace-speed",
        type=float,
        default=1.0,
        help="trace: replay the trace's clock this many times faster (2 = twice as fast)",
    )
    p.add_argument("--repeat", type=int, default=1, help="run the measured phase N times")
    p.add_argument(
        "--server-metrics",
        type=float,
        default=1.0,
        help="seconds between scrapes of the server's /metrics (0: none)",
    )
    p.add_argument(
        "--gpu-sample",
        type=float,
        default=1.0,
        help="seconds between GPU samples into gpu.csv (0: none)",
    )
    p.add_argument(
        "--idle-power-w",
        type=float,
        help="idle GPU power (W, all GPUs) for energy/token; default: measured",
    )
    p.add_argument(
        "--min-requests",
        type=int,
        default=100,
        help="fewer measured requests make the benchmark INVALID",
    )
    p.add_argument(
        "--min-window",
        type=float,
        default=10.0,
        help="a shorter measured window (s) makes the benchmark INVALID",
    )
    return p


def config_from_json(text: str) -> BenchConfig:
    """The typed request `proctor bench` sends: validated by the same model, the API key from
    the environment (it is never in the request)."""
    try:
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError("a JSON object is needed")
        cfg = BenchConfig.model_validate(data)
    except ValidationError as e:
        raise invalid(e, what="invalid --config-json") from None
    except ValueError as e:
        raise UsageError(f"invalid --config-json: {e}") from e
    key = os.environ.get("OPENAI_API_KEY")
    return cfg.model_copy(update={"api_key": SecretStr(key)}) if key else cfg


def config_from_args(a: argparse.Namespace) -> BenchConfig:
    if a.config_json is not None:
        return config_from_json(a.config_json)
    try:
        return BenchConfig(
            base_url=a.base_url or f"http://{a.host}:{a.port}",
            endpoint="chat" if a.chat else "completions",
            model=a.model,
            tokenizer=a.tokenizer,
            tokenizer_mode=a.tokenizer_mode,
            isl=a.isl,
            osl=a.osl,
            concurrency=a.concurrency,
            prompt_multiplier=a.prompt_multiplier,
            num_prompts=a.num_prompts,
            range_ratio=a.range_ratio,
            num_warmups=a.num_warmups,
            request_rate=parse_rate(a.request_rate),
            burstiness=a.burstiness,
            seed=a.seed,
            ignore_eos=a.ignore_eos,
            temperature=a.temperature,
            profile=a.profile,
            workers=a.workers,
            percentiles=[float(x) for x in a.percentiles.split(",") if x],
            goodput_slos_ms=parse_goodput(a.goodput),
            request_timeout_s=a.request_timeout,
            idle_timeout_s=a.idle_timeout,
            save_detailed=a.save_detailed,
            progress=not a.no_progress,
            max_error_rate=a.max_error_rate,
            log_every_s=a.log_every,
            dataset=a.dataset,
            prefix_groups=a.prefix_groups,
            prefix_hit_rate=a.prefix_hit_rate,
            prefix_len=a.prefix_len,
            trace_speed=a.trace_speed,
            repeat=a.repeat,
            server_metrics_s=a.server_metrics,
            gpu_sample_s=a.gpu_sample,
            idle_power_w=a.idle_power_w,
            min_requests=a.min_requests,
            min_window_s=a.min_window,
            api_key=SecretStr(key) if (key := os.environ.get("OPENAI_API_KEY")) else None,
        )
    except ValidationError as e:
        raise invalid(e, what="invalid option", hint="see --help") from None
    except ValueError as e:
        raise UsageError(str(e), hint="see --help") from e


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        cfg = config_from_args(args)
        result = run_benchmark(cfg, args.output_dir)
        write_outputs(result, args.output_dir)
        print("\n".join(result_lines(result)), flush=True)
        check_outcome(result)
    except ProctorError as e:
        print(f"proctor: {e.one_line()}", file=sys.stderr, flush=True)
        return int(e.exit_code)
    except KeyboardInterrupt:
        return int(ExitCode.INTERRUPTED)
    return 0


if __name__ == "__main__":
    redact.mask_output()  # a URL with credentials must not reach the bench log through us
    from proctor.crash import guarded

    sys.exit(guarded("proctor bench", main))

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
from proctor.jobs.bench import BenchJob
from proctor.jobs.options import add_arguments, validated, values_given
from proctor.workloads.loadgen.config import BenchConfig
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
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    # Under a supervised run the wrapper's environment names the run directory.
    p.add_argument(
        "--output-dir",
        type=Path,
        default=os.environ.get("PROCTOR_RUN_DIR"),
        required="PROCTOR_RUN_DIR" not in os.environ,
    )
    p.add_argument("--no-progress", action="store_true", help="no bar or progress lines")
    add_arguments(p, BenchJob)  # every bench option, declared once (jobs/bench.py)
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
    values = values_given(BenchJob, a)
    values.setdefault("base_url", f"http://{a.host}:{a.port}")
    if a.no_progress:
        values["progress"] = False
    key = os.environ.get("OPENAI_API_KEY")
    job = validated(BenchJob, values, what="invalid option", hint="see --help")
    return job.model_copy(update={"api_key": SecretStr(key)}) if key else job


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

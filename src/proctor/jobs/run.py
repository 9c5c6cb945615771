"""Run any typed job here, in this process: what `python -m proctor.jobs run JOB` does for a
supervised run, a flow's workload and the far side of a target, and `proctor.run_job` for the
library. One call, whoever asks."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, SecretStr, TypeAdapter, ValidationError

from proctor.errors import ExitCode, UsageError, invalid
from proctor.jobs.bench import BenchJob
from proctor.jobs.sweep import SweepJob
from proctor.spec.config import ProjectConfig, load_config

Job = Annotated[BenchJob | SweepJob, Field(discriminator="kind")]
JOB = TypeAdapter(Job)


def load_job(text: str) -> BenchJob | SweepJob:
    """A job from its JSON text, or from the file it names; the API key from OPENAI_API_KEY."""
    body = text
    if not text.lstrip().startswith("{"):
        try:
            body = Path(text).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise UsageError(f"cannot read job file {text}: {e}") from None
    try:
        data: Any = json.loads(body)
        if not isinstance(data, dict):
            raise ValueError("a JSON object is needed")
        data.setdefault("kind", "bench")  # a bare BenchConfig (what older proctors passed)
        job = JOB.validate_python(data)
    except ValidationError as e:
        raise invalid(e, what="invalid job") from None
    except ValueError as e:
        raise UsageError(f"invalid job: {e}") from None
    return with_api_key(job)


def with_api_key(job: BenchJob | SweepJob) -> BenchJob | SweepJob:
    key = os.environ.get("OPENAI_API_KEY")
    if not key:
        return job
    if isinstance(job, BenchJob):
        return job.model_copy(update={"api_key": SecretStr(key)})
    return job.model_copy(
        update={"bench": job.bench.model_copy(update={"api_key": SecretStr(key)})}
    )


def run_bench(job: BenchJob, output_dir: Path, *, echo: Callable[[str], None] = print) -> int:
    """The bench in this process: metrics.json and its other files in `output_dir`, vLLM's
    result block through `echo`; 0, or the verdict's error (3: too many failed) raised."""
    from proctor.workloads.loadgen.printed import result_lines
    from proctor.workloads.loadgen.runner import check_outcome, run_benchmark, write_outputs

    output_dir.mkdir(parents=True, exist_ok=True)
    result = run_benchmark(job, output_dir)
    write_outputs(result, output_dir)
    echo("\n".join(result_lines(result)))
    check_outcome(result)
    return 0


def run_sweep_job(
    job: SweepJob,
    config: ProjectConfig | None = None,
    *,
    say: Callable[[str], None] = print,
) -> tuple[int, Path, dict[str, Any]]:
    """A concurrency sweep or SLO search: (exit code, its run directory, its summary)."""
    config = config or load_config()
    if job.slo:
        from proctor.workloads.slo import run_slo_job

        result = run_slo_job(job, config, say=say)
        doc = result.dir.read_json("result.json") or {}
        return result.exit_code, result.dir.path, doc
    from proctor.workloads.sweep import run_sweep

    sweep_dir, points = run_sweep(job, config, say=say)
    failing = [p for p in points if p.exit_code != 0]
    code = 0 if not failing else (failing[0].exit_code if failing[0].exit_code is not None else 6)
    return code, sweep_dir.path, sweep_dir.read_json("summary.json") or {}


def run_job(
    job: BenchJob | SweepJob,
    *,
    output_dir: Path | None = None,
    config: ProjectConfig | None = None,
    say: Callable[[str], None] = print,
) -> int:
    """Run `job` here; its exit code (docs: the exit-code table)."""
    if isinstance(job, BenchJob):
        where = output_dir or _run_dir()
        return run_bench(job, where, echo=say)
    code, _, _ = run_sweep_job(job, config, say=say)
    return code


def _run_dir() -> Path:
    where = os.environ.get("PROCTOR_RUN_DIR")
    if not where:
        raise UsageError(
            "a bench job needs somewhere to write metrics.json",
            hint="pass --output-dir DIR (a supervised run names its own directory)",
        )
    return Path(where)


__all__ = ["JOB", "ExitCode", "Job", "load_job", "run_bench", "run_job", "run_sweep_job"]

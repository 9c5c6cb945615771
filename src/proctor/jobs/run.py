"""Run any typed job here, in this process: what `python -m proctor.jobs run JOB` does for a
supervised run, a flow's workload and the far side of a target, and `proctor.run_job` for the
library. One call, whoever asks."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import IO, TYPE_CHECKING, Annotated, Any

from pydantic import Field, SecretStr, TypeAdapter, ValidationError

from proctor.errors import ExitCode, UsageError, invalid
from proctor.jobs.bench import BenchJob
from proctor.jobs.command import CommandJob, run_flags
from proctor.jobs.eval import EvalJob
from proctor.jobs.flow import FlowJob
from proctor.jobs.grid import ServerGridJob
from proctor.jobs.offline import OfflineJob
from proctor.jobs.submission import JOB, AnyJob, Job
from proctor.jobs.sweep import SweepJob
from proctor.spec.config import ProjectConfig, load_config

if TYPE_CHECKING:
    from proctor.targets.registry import TargetOptions

#: Every job `python -m proctor.jobs run` and `proctor.run_job` take: the submitted kinds and
#: `proctor run`'s CommandJob (a command is started as a run of its own, not submitted).
RunnableJob = AnyJob | CommandJob
RUNNABLE: TypeAdapter[RunnableJob] = TypeAdapter(
    Annotated[RunnableJob, Field(discriminator="kind")]
)


def load_job(text: str) -> RunnableJob:
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
        job = RUNNABLE.validate_python(data)
    except ValidationError as e:
        raise invalid(e, what="invalid job") from None
    except ValueError as e:
        raise UsageError(f"invalid job: {e}") from None
    return with_api_key(job)


def with_api_key(job: RunnableJob) -> RunnableJob:
    key = os.environ.get("OPENAI_API_KEY")
    # lm-eval, engines, commands and a flow's workloads read it from their environment.
    if not key or isinstance(job, EvalJob | OfflineJob | FlowJob | ServerGridJob | CommandJob):
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


def run_eval(job: EvalJob, output_dir: Path, *, say: Callable[[str], None] = print) -> int:
    """GSM8K through lm-eval in this process: metrics.json and lm-eval's output in
    `output_dir`, lm-eval's output on stdout, the scores as one JSON line through `say`."""
    from proctor.workloads.gsm8k import run_gsm8k

    result = run_gsm8k(job, output_dir)
    say(json.dumps({"kind": "gsm8k", "metrics": result.to_metrics()}))
    return 0


def run_offline_job(
    job: OfflineJob,
    output_dir: Path,
    config: ProjectConfig | None = None,
    *,
    say: Callable[[str], None] = print,
) -> int:
    """The offline job in this process (resolved against the engine profile first where
    nobody did): metrics.json in `output_dir`; its exit code (docs/offline.md)."""
    from proctor.workloads.offline import offline_outcome, resolve_offline, run_resolved

    env: dict[str, str] = {}
    if job.resolved is None:
        job, env = resolve_offline(job, config or load_config(_config_path(job.config)))
    result = run_resolved(job, output_dir, env={**os.environ, **env} if env else None)
    for line in offline_outcome(result):
        say(f"proctor: {line}")
    return result.proctor_exit


def run_flow_job(
    job: FlowJob, config: ProjectConfig | None = None, *, say: Callable[[str], None] = print
) -> tuple[int, Path, dict[str, Any]]:
    """The flow in this process: its own run (in the job's runs dir) with its steps' runs;
    (exit code, its run directory, its record)."""
    from proctor.flow import Flow

    runner = Flow(job, config or load_config(), say=say)
    say(f"proctor: flow {runner.dir.run_id} -> {runner.dir.path}")
    code = runner.run()
    return code, runner.dir.path, runner.record


def run_grid_job(
    job: ServerGridJob,
    config: ProjectConfig | None = None,
    *,
    say: Callable[[str], None] = print,
) -> tuple[int, Path, dict[str, Any]]:
    """A server grid in this process: its home run and a flow per server point; (exit code,
    the home run's directory, its answer: summary.json with the points run and reused)."""
    from proctor.server_sweep import run_server_sweep

    result = run_server_sweep(job, config or load_config(), say=say)
    return result.exit_code, result.dir.path, grid_answer(result)


def grid_answer(result: Any) -> dict[str, Any]:
    """A server grid's answer (`sweep --server-grid --json`): its summary.json, the points run
    and reused, its exit code."""
    return {
        **(result.dir.read_json("summary.json") or {}),
        "ran": result.ran,
        "reused": result.reused,
        "exit_code": result.exit_code,
    }


def run_command_job(
    job: CommandJob,
    config: ProjectConfig | None = None,
    *,
    target: str | TargetOptions | None = None,
    runs_dir: str | None = None,
    out: IO[bytes] | None = None,
) -> int:
    """`proctor run [--target T] -- CMD` from this process: the command a supervised run on
    the target (default local; [run] of proctor.toml under the job's own settings), its log
    copied to `out` (default stdout) until it ends; its exit status as `proctor run`'s (4 time
    limit, 130 interrupted, 69 not found or the GPU preflight refused it)."""
    import sys

    from proctor.spec.plan import resolve_run_plan, resolve_runs_dir
    from proctor.targets.base import FAR
    from proctor.targets.registry import kind_named, open_planner, target_options
    from proctor.targets.service import Interrupts, SupervisedRun

    config = config or load_config()
    spec = target_options(target, config) if target is None or isinstance(target, str) else target
    out = out or sys.stdout.buffer
    if FAR in kind_named(spec.kind).capabilities:
        from proctor.source.identity import source_identity
        from proctor.targets.remote.commands import group_exit_status, job_spec, run_far
        from proctor.targets.remote.orchestrate import RemoteOptions

        if not job.argv:
            raise UsageError("no command given", hint="CommandJob(argv=[...])")
        where = Path(resolve_runs_dir(runs_dir, config).value)
        identity = source_identity(Path(job.cwd or ".").resolve())
        far = job_spec(job.with_defaults(config.run))
        done = run_far(spec, far, identity, config, where, out, RemoteOptions())
        return group_exit_status(done.completions)
    plan = resolve_run_plan(run_flags(job, runs_dir=runs_dir), config)
    planned = open_planner(spec, plan, config)
    with Interrupts() as interrupts:
        try:
            started = planned.start_plan(plan)
        finally:
            planned.close()
        interrupts.attach(started.run)
        state = SupervisedRun(started.run).follow_to_end(out)
        return interrupts.exit_code(started.run, state)


def _config_path(path: str | None) -> Path | None:
    return Path(path) if path else None


def run_job(
    job: RunnableJob,
    *,
    output_dir: Path | None = None,
    config: ProjectConfig | None = None,
    say: Callable[[str], None] = print,
) -> int:
    """Run `job` here; its exit code (docs: the exit-code table). A command is a supervised
    run of its own, started and followed from here (`run_command_job`)."""
    if isinstance(job, CommandJob):
        return run_command_job(job, config)
    if isinstance(job, BenchJob):
        where = output_dir or _run_dir(job.kind)
        return run_bench(job, where, echo=say)
    if isinstance(job, EvalJob):
        return run_eval(job, output_dir or _run_dir(job.kind), say=say)
    if isinstance(job, OfflineJob):
        return run_offline_job(job, output_dir or _run_dir(job.kind), config, say=say)
    if isinstance(job, FlowJob):
        return run_flow_job(job, config, say=say)[0]
    if isinstance(job, ServerGridJob):
        return run_grid_job(job, config, say=say)[0]
    code, _, _ = run_sweep_job(job, config, say=say)
    return code


def _run_dir(kind: str) -> Path:
    where = os.environ.get("PROCTOR_RUN_DIR")
    if not where:
        raise UsageError(
            f"a{'n' if kind[0] in 'aeiou' else ''} {kind} job needs somewhere to write "
            "metrics.json",
            hint="pass --output-dir DIR (a supervised run names its own directory)",
        )
    return Path(where)


__all__ = [
    "JOB",
    "RUNNABLE",
    "AnyJob",
    "ExitCode",
    "Job",
    "RunnableJob",
    "load_job",
    "run_bench",
    "run_command_job",
    "run_eval",
    "run_flow_job",
    "run_grid_job",
    "run_job",
    "run_offline_job",
    "run_sweep_job",
]

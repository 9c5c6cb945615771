"""proctor from Python: start, follow, wait for and stop supervised runs, run a flow or a bench,
read and compare results, as the CLI does (the CLI is a thin layer on these same calls).

    import proctor

    result = proctor.run(["python", "train.py"], timeout="10m")
    print(result.run_id, result.outcome, result.exit_code)

Every function raises proctor.errors types; `exit_code_for(error)` gives the CLI's exit code.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from proctor.flow import Flow
from proctor.jobs.bench import BenchJob
from proctor.jobs.command import CommandJob
from proctor.jobs.eval import EvalJob
from proctor.jobs.flow import FlowJob
from proctor.jobs.grid import ServerGridJob
from proctor.jobs.offline import OfflineJob
from proctor.jobs.submission import Submission
from proctor.jobs.sweep import SweepJob
from proctor.record.rundir import RunDir
from proctor.record.schema import load_record
from proctor.record.status import RunState, run_state
from proctor.spec.config import ProjectConfig, load_config
from proctor.spec.plan import RunFlags, RunPlan, resolve_run_plan, resolve_runs_dir
from proctor.supervise.launch import (
    RunSpec,
    follow_log,
    request_stop,
    resolve_run,
    start_run,
    wait_run,
)
from proctor.supervise.signals import deferred_stops
from proctor.workloads.loadgen.runner import BenchResult, run_benchmark, write_outputs

if TYPE_CHECKING:
    from proctor.targets.registry import TargetOptions


@dataclass(frozen=True)
class RunResult:
    """Where a run is and how it ended (`outcome` None and `exit_code` None while running)."""

    run_id: str
    path: Path
    attached: bool
    state: str
    outcome: str | None
    exit_code: int | None
    exit_signal: str | None

    @property
    def ok(self) -> bool:
        return self.outcome == "ok" and self.exit_code == 0


def _config(config: ProjectConfig | str | Path | None) -> ProjectConfig:
    if isinstance(config, ProjectConfig):
        return config
    return load_config(Path(config) if config is not None else None)


def _result(run: RunDir, attached: bool = False, state: RunState | None = None) -> RunResult:
    state = state or run_state(run)
    record = load_record(run.path)
    return RunResult(
        run_id=run.run_id,
        path=run.path,
        attached=attached,
        state=state.state,
        outcome=record.outcome if record is not None else None,
        exit_code=state.exit.code if state.exit else None,
        exit_signal=state.exit.signal if state.exit else None,
    )


def plan(
    argv: Sequence[str],
    *,
    name: str | None = None,
    runs_dir: str | Path | None = None,
    timeout: str | None = None,
    grace: str | None = None,
    gpu_sample: float | None = None,
    env: Mapping[str, str] | None = None,
    key: str | None = None,
    cwd: str | Path | None = None,
    config: ProjectConfig | str | Path | None = None,
) -> RunPlan:
    """What `proctor run` would run, every value with its origin (`proctor plan`)."""
    flags = RunFlags(
        argv=list(argv),
        name=name,
        runs_dir=str(runs_dir) if runs_dir else None,
        timeout=timeout,
        grace=grace,
        gpu_sample=gpu_sample,
        env=[f"{k}={v}" for k, v in (env or {}).items()],
        key=key,
        cwd=str(cwd) if cwd else None,
    )
    return resolve_run_plan(flags, _config(config))


def start(
    run_plan: RunPlan, *, kind: str = "command", extra: Mapping[str, Any] | None = None
) -> RunResult:
    """Start a supervised run detached (or attach to the live run holding the plan's key)."""
    with deferred_stops():
        started = start_run(run_plan, RunSpec(kind=kind, extra=dict(extra or {})))
    return _result(started.run, started.attached)


def find(
    ref: str,
    *,
    runs_dir: str | Path | None = None,
    config: ProjectConfig | str | Path | None = None,
) -> RunDir:
    """A run by id, unique prefix, directory or 'last' (as `proctor runs show`)."""
    where = Path(resolve_runs_dir(str(runs_dir) if runs_dir else None, _config(config)).value)
    return resolve_run(where, ref)


def _dir(run: RunResult | RunDir | str, runs_dir: str | Path | None) -> RunDir:
    if isinstance(run, RunDir):
        return run
    if isinstance(run, RunResult):
        return RunDir(run.path)
    return find(run, runs_dir=runs_dir)


def wait(
    run: RunResult | RunDir | str,
    *,
    timeout: float | None = None,
    follow: IO[bytes] | None = None,
    runs_dir: str | Path | None = None,
) -> RunResult:
    """Wait until the run has ended (or `timeout` seconds passed); with `follow`, copy its log
    there as it grows."""
    target = _dir(run, runs_dir)
    if follow is not None:
        follow_log(target, follow)
    return _result(target, state=wait_run(target, timeout=timeout))


def stop(run: RunResult | RunDir | str, *, runs_dir: str | Path | None = None) -> bool:
    """Ask the run's wrapper to stop it (TERM, grace, KILL); False when nothing was running."""
    return request_stop(_dir(run, runs_dir))


def status(run: RunResult | RunDir | str, *, runs_dir: str | Path | None = None) -> RunResult:
    """Where the run is now, without waiting."""
    return _result(_dir(run, runs_dir))


def run(argv: Sequence[str], *, follow: IO[bytes] | None = None, **options: Any) -> RunResult:
    """`proctor run -- ARGV`: start a supervised run and wait for its end. `options` are
    those of `plan` (name, runs_dir, timeout, grace, gpu_sample, env, key, cwd, config)."""
    started = start(plan(argv, **options))
    return wait(started, follow=follow)


def bench(config: BenchJob, output_dir: str | Path | None = None) -> BenchResult:
    """`proctor bench --output-dir DIR`: a serving benchmark in this process; with `output_dir`,
    the same files as the CLI's (metrics.json, the server's /metrics and the GPUs sampled
    meanwhile, requests.jsonl with `save_detailed`). `result.verdict()` says whether more
    requests failed than `config.max_error_rate` allows."""
    where = Path(output_dir) if output_dir is not None else None
    if where is not None:
        where.mkdir(parents=True, exist_ok=True)
    result = run_benchmark(config, where)
    if where is not None:
        write_outputs(result, where)
    return result


def run_job(
    job: BenchJob
    | SweepJob
    | EvalJob
    | OfflineJob
    | FlowJob
    | ServerGridJob
    | CommandJob
    | Submission,
    target: str | TargetOptions | None = None,
    *,
    output_dir: str | Path | None = None,
    config: ProjectConfig | str | Path | None = None,
    say: Callable[[str], None] = print,
) -> int:
    """Run a typed job. In this process, as `python -m proctor.jobs run JOB` does for every
    supervised bench, sweep point and flow workload (a bench writes into `output_dir`; a sweep,
    a flow and a server grid make their own runs); or, given a `target` or a Submission (the
    job plus how its run goes), as a supervised run here or on the target, through
    `proctor.submit`, the call `proctor bench|sweep|eval gsm8k|offline|flow` make. Returns the
    exit code (0 ok, 3 the workload failed, ...); errors are raised as proctor.errors types.
    A CommandJob is `proctor run [--target T] -- CMD`: a supervised run, followed to its end."""
    if isinstance(job, CommandJob):
        from proctor.jobs.run import run_command_job

        return run_command_job(job, _config(config), target=target)
    if target is not None or isinstance(job, Submission):
        from proctor.jobs.submit import Voice, submit

        submission = job if isinstance(job, Submission) else Submission(job=job)
        return submit(submission, target, voice=Voice(say=say)).status()
    from proctor.jobs.run import run_job as run_here

    where = Path(output_dir) if output_dir is not None else None
    return run_here(job, output_dir=where, config=_config(config), say=say)


@dataclass(frozen=True)
class FlowResult:
    run_id: str
    path: Path
    exit_code: int
    record: dict[str, Any]


def run_flow(
    job: FlowJob,
    *,
    config: ProjectConfig | str | Path | None = None,
    say: Callable[[str], None] = print,
) -> FlowResult:
    """`proctor flow`: stop, start, ready, workload, drain, inspect on hang, teardown (always).
    `exit_code` is the CLI's: 0 done, 1 hang, 2 fault, 3 workload failed, 4 timeout, ..."""
    runner = Flow(job, _config(config), say=say)
    code = runner.run()
    return FlowResult(runner.dir.run_id, runner.dir.path, code, dict(runner.record))


__all__ = [
    "FlowResult",
    "RunResult",
    "bench",
    "find",
    "plan",
    "run",
    "run_flow",
    "run_job",
    "start",
    "status",
    "stop",
    "wait",
]

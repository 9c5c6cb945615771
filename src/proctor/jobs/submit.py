"""`submit(submission, target=None)`: the one call that runs a typed job as a run, here or on a
target. What `proctor bench|sweep|eval gsm8k|offline|flow` (and `sweep --server-grid`) call
for both cases, what the far side of `--target` calls again (`python -m proctor.jobs submit`,
the submission's JSON on stdin), and `proctor.run_job(job, target=...)` for the library.

Here: the --server run the submission names is resolved in this runs dir and its facts fill
the job's unset fields; the run is started as `python -m proctor.jobs run JOB` (a sweep: one
such run per point), followed to its end unless detached, and its answer (the document that
`--json` prints) handed to `Voice.answer`. Failures are raised as proctor's errors.

With a target: the submission is sent as a typed request (targets/remote/requests.py
SubmitRequest) with the files its job reads (shipfiles.job_shipment), to run there as one far
job (targets/remote/workflow.py), or, detached, through one agent call; what it made is
fetched back as local runs. The machine is kept where `Submission.server_lives` says so.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from proctor.errors import UsageError
from proctor.jobs.argv import job_argv
from proctor.jobs.bench import BenchJob
from proctor.jobs.eval import EvalJob
from proctor.jobs.flow import FlowJob
from proctor.jobs.grid import ServerGridJob
from proctor.jobs.offline import OfflineJob
from proctor.jobs.submission import Submission
from proctor.jobs.sweep import SweepJob
from proctor.record.rundir import RunDir

if TYPE_CHECKING:
    from proctor.record.status import RunState
    from proctor.spec.config import ProjectConfig
    from proctor.spec.plan import RunPlan
    from proctor.targets.registry import TargetOptions
    from proctor.targets.remote.commands import WorkflowRun
    from proctor.targets.remote.workflow import WorkflowCommand
    from proctor.targets.service import Interrupts, SupervisedRun


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _stdout(line: str) -> None:
    print(line, flush=True)


def _json_out(doc: Any) -> None:
    print(json.dumps(doc, indent=2, default=str), flush=True)


def _stdout_bytes() -> IO[bytes] | None:
    return sys.stdout.buffer


@dataclass
class Voice:
    """Where a submission's words go: `say` its progress lines (stderr), `echo` its plain
    answer (a run id, a summary table: stdout), `answer` its JSON document (under
    Submission.answer), `log` the followed run's log (None: not shown)."""

    say: Callable[[str], None] = _stderr
    echo: Callable[[str], None] = _stdout
    answer: Callable[[Any], None] = _json_out
    log: IO[bytes] | None = field(default_factory=_stdout_bytes)


@dataclass
class Submitted:
    """What `submit` did: the run here (its id, directory, exit code, answer), or the far
    workflow's result (`far`, whose `result.exit_status()` decides the code)."""

    exit_code: int = 0
    run_id: str | None = None
    path: Path | None = None
    answer: Any = None
    far: WorkflowRun | None = None

    def status(self) -> int:
        return self.far.result.exit_status() if self.far is not None else self.exit_code


def submit(
    submission: Submission,
    target: str | TargetOptions | None = None,
    *,
    runs_dir: str | None = None,
    voice: Voice | None = None,
    config: ProjectConfig | None = None,
) -> Submitted:
    """Run the submission's job as a run here, or on `target`; see the module docstring."""
    voice = voice or Voice()
    if target is not None:
        return Submitted(far=submit_far(submission, target, runs_dir=runs_dir, log=voice.log))
    job = submission.job
    check_here(job)
    if isinstance(job, OfflineJob):
        return _offline_here(submission, job, runs_dir, voice)
    if isinstance(job, FlowJob | ServerGridJob):
        return _flow_here(submission, job, runs_dir, voice, config)
    submission = _with_server(submission, runs_dir)
    job = submission.job
    if isinstance(job, SweepJob):
        return _sweep_here(submission, job, runs_dir, voice, config)
    if isinstance(job, EvalJob):
        job.require_model()
        return _eval_here(submission, job, runs_dir, voice)
    assert isinstance(job, BenchJob)
    return _bench_here(submission, job, runs_dir, voice)


def _benches(job: object) -> list[BenchJob]:
    """The bench jobs a job runs: itself, a sweep's, a flow's listed ones, a grid's points."""
    if isinstance(job, BenchJob):
        return [job]
    if isinstance(job, SweepJob):
        return [job.bench]
    if isinstance(job, FlowJob):
        return [bench for listed in job.workloads for bench in _benches(listed.job)]
    if isinstance(job, ServerGridJob):
        points = job.server_points()
        return _benches(job.point(points[0])) if points else []  # every server point's same
    return []


def check_here(job: object) -> None:
    """What a job asks of this machine, refused before any run starts here (UsageError, 64; no
    run directory): the client's --client-cores (loadgen/cores.check, which the run checks
    again). Not for a far target: there the cores are that machine's, checked where it runs."""
    named = [bench.client_cores for bench in _benches(job) if bench.client_cores]
    if not named:  # the load generator's import (~0.4 s) only where cores are named
        return
    from proctor.workloads.loadgen import cores

    for client_cores in named:
        cores.check(client_cores)


def _with_server(submission: Submission, runs_dir: str | None) -> Submission:
    """The --server run's facts in the job (it must be live and serve its model: 69)."""
    if submission.server is None:
        return submission
    from proctor.workloads.loadgen.server_run import live_server_facts

    server = submission.server
    facts = live_server_facts(server.run, runs_dir)
    # The run id the ref named ('last' resolved): what the run's record says it measured.
    resolved = server.model_copy(update={"run": str(facts["run_id"])})
    return submission.with_server_facts(facts).model_copy(update={"server": resolved})


def _plan(submission: Submission, argv: list[str], name: str, runs_dir: str | None) -> RunPlan:
    from proctor.spec.config import load_config
    from proctor.spec.plan import RunFlags, resolve_run_plan

    flags = RunFlags(
        argv=argv,
        name=submission.name or name,
        runs_dir=runs_dir,
        timeout=submission.timeout,
        key=submission.key,
        detach=submission.detach,
        gpu_sample=0,
        allow_unhealthy_gpu=submission.allow_unhealthy_gpu or None,
    )
    return resolve_run_plan(flags, load_config())


def _detached(submission: Submission, run: RunDir, voice: Voice, **more: Any) -> Submitted:
    """A detached run's answer: its id on stdout, or (--json) its id, directory and `more`."""
    done = Submitted(run_id=run.run_id, path=run.path)
    if submission.answer:
        done.answer = {"run_id": run.run_id, "dir": str(run.path), **more}
        voice.answer(done.answer)
    else:
        voice.echo(run.run_id)
    return done


def _quiet(submission: Submission, voice: Voice) -> Voice:
    """`voice` without the run's log under --json (stdout holds only the answer)."""
    return Voice(voice.say, voice.echo, voice.answer, None if submission.answer else voice.log)


def _follow(run: RunDir, kind: str, voice: Voice) -> tuple[SupervisedRun, RunState]:
    """Say where the `kind` run is, copy its log to `voice.log` until it ends."""
    from proctor.targets.service import SupervisedRun

    voice.say(f"proctor: {kind} run {run.run_id} -> {run.path}")
    supervised = SupervisedRun(run)
    if voice.log is not None:
        return supervised, supervised.follow_to_end(voice.log)
    with open(os.devnull, "wb") as devnull:
        return supervised, supervised.follow_to_end(devnull)


def _finish(
    supervised: SupervisedRun, interrupts: Interrupts, state: RunState, kind: str, voice: Voice
) -> int:
    """The summary line; the run's status raised as an error that says why (an interrupt's
    if one came)."""
    from proctor.targets.service import run_failure

    voice.say(f"proctor: {supervised.summary(state)}")
    if code := interrupts.exit_code(supervised.run, state):
        raise run_failure(supervised.run, code, kind)
    return 0


def _bench_here(
    submission: Submission, job: BenchJob, runs_dir: str | None, voice: Voice
) -> Submitted:
    from proctor.jobs.documents import read_bench
    from proctor.record.schema import health_of, load_record, read_view
    from proctor.supervise.launch import RunSpec, start_run
    from proctor.targets.service import guard_start

    # The run's log always gets the progress lines, whatever this terminal shows.
    argv = job_argv(job.model_copy(update={"progress": True}))
    plan = _plan(submission, argv, f"bench-isl{job.isl}-osl{job.osl}-c{job.concurrency}", runs_dir)
    extra: dict[str, object] = {
        "bench": {
            "base_url": job.base_url,
            "isl": job.isl,
            "osl": job.osl,
            "concurrency": job.concurrency,
            "dataset": job.dataset,
            "repeat": job.repeat,
        }
    }
    if submission.server is not None:
        extra["server_run"] = submission.server.run
    interrupts = guard_start()
    started = start_run(plan, RunSpec(kind="bench", extra=extra))
    run = started.run
    interrupts.attach(run)
    if started.attached:
        # Attaching is for the same bench started twice; a key held by other settings is refused.
        if read_view(run.path).argv != plan.redactor().argv(plan.argv):
            raise UsageError(
                f"key {submission.key!r} belongs to live bench run {run.run_id}, started with "
                "other settings",
                hint="use another --key, or wait for that run (`proctor runs wait`)",
            )
        voice.say(f"proctor: attached to live bench run {run.run_id} (key {submission.key})")
    health = health_of(run.path)
    if submission.detach:
        return _detached(submission, run, voice, attached=started.attached, gpu_health=health)
    done = Submitted(run_id=run.run_id, path=run.path)
    voice.say(f"proctor: bench run {run.run_id} -> {run.path}")
    if health is not None:
        from proctor.monitors.gpu_health import one_line

        voice.say(f"proctor: {one_line(health)}")
    from proctor.targets.service import SupervisedRun

    supervised = SupervisedRun(run)
    with open(os.devnull, "wb") as devnull:
        log = devnull if submission.answer or voice.log is None else voice.log
        state = supervised.follow_to_end(log)
    if submission.answer:
        record = load_record(run.path)
        done.answer = {
            "run_id": run.run_id,
            **(run.read_json("metrics.json") or {}),
            "outcome": record.outcome if record else None,
            "gpu_health": health,
            "gpu_health_change": health_of(run.path, "gpu_health_change"),
        }
        voice.answer(done.answer)
    voice.say(f"proctor: {supervised.summary(state)}")
    doc = read_bench(run.path / "metrics.json")
    verdict = doc.verdict if doc else None
    if verdict is not None and verdict.ok is False:
        voice.say(f"proctor: benchmark failed: {verdict.message}")
    validity = doc.validity if doc else None
    if validity is not None and validity.verdict == "INVALID":  # not a measurement (docs/bench.md)
        voice.say("proctor: benchmark INVALID: " + "; ".join(validity.reasons))
    if code := interrupts.exit_code(run, state):
        from proctor.targets.service import run_failure

        raise run_failure(run, code, "bench")
    return done


def _eval_here(
    submission: Submission, job: EvalJob, runs_dir: str | None, voice: Voice
) -> Submitted:
    from proctor.supervise.launch import RunSpec, start_run
    from proctor.targets.service import guard_start

    plan = _plan(submission, job_argv(job), f"{job.task}-{job.num_fewshot}shot", runs_dir)
    extra = {"server_run": submission.server.run} if submission.server else {}
    interrupts = guard_start()
    started = start_run(plan, RunSpec(kind="eval", extra=extra))
    run = started.run
    interrupts.attach(run)
    if submission.detach:
        return _detached(submission, run, voice)
    done = Submitted(run_id=run.run_id, path=run.path)
    supervised, state = _follow(run, "eval", _quiet(submission, voice))
    if submission.answer:
        done.answer = {"run_id": run.run_id, **(run.read_json("metrics.json") or {})}
        voice.answer(done.answer)
    _finish(supervised, interrupts, state, "eval", voice)
    return done


def _offline_here(
    submission: Submission, job: OfflineJob, runs_dir: str | None, voice: Voice
) -> Submitted:
    from proctor.jobs.documents import OfflineDocument, read_or_none
    from proctor.record.schema import load_record
    from proctor.spec.config import load_config
    from proctor.targets.service import guard_start
    from proctor.workloads.offline import OfflineRequest, start_offline

    request = OfflineRequest(
        job=job,
        name=submission.name,
        runs_dir=runs_dir,
        timeout=submission.timeout,
        env=list(submission.env),
        key=submission.key,
        detach=submission.detach,
        gpu_sample=submission.gpu_sample,
    )
    interrupts = guard_start()
    config = Path(submission.config) if submission.config else None
    started = start_offline(request, load_config(config))
    run = started.run
    interrupts.attach(run)
    if submission.detach:
        return _detached(submission, run, voice, attached=started.attached)
    done = Submitted(run_id=run.run_id, path=run.path)
    supervised, state = _follow(run, "offline", _quiet(submission, voice))
    doc = read_or_none(run.path / "metrics.json")
    offline = doc if isinstance(doc, OfflineDocument) else OfflineDocument.model_validate({})
    record = load_record(run.path)
    if submission.answer:
        done.answer = {
            "run_id": run.run_id,
            "dir": str(run.path),
            "outcome": record.outcome if record else None,
            "status": offline.status,
            "metrics": offline.metrics.root,
            "faults": offline.faults,
        }
        voice.answer(done.answer)
    _finish(supervised, interrupts, state, "offline", voice)
    return done


def _sweep_here(
    submission: Submission,
    job: SweepJob,
    runs_dir: str | None,
    voice: Voice,
    config: ProjectConfig | None,
) -> Submitted:
    """A concurrency sweep or SLO search: one supervised bench per point, then its summary
    (the answer, or a table / the search's answer on stdout)."""
    from proctor.jobs.run import run_sweep_job
    from proctor.workloads.sweep import points_of, summary_text

    if job.runs_dir is None and runs_dir is not None:
        job = job.model_copy(update={"runs_dir": runs_dir})
    say = (lambda line: None) if submission.answer else voice.say
    code, where, summary = run_sweep_job(job, config, say=say)
    done = Submitted(exit_code=code, run_id=where.name, path=where, answer=summary)
    if job.slo:
        if submission.answer:
            voice.answer(summary)
        else:
            answer = summary.get("answer")
            voice.echo(f"{job.search}: {'none' if answer is None else f'{answer:g}'}")
            say(f"proctor: slo search {where.name}: {where / 'result.json'}")
        if summary.get("error"):
            raise UsageError(
                str(summary["error"]),
                hint="name metrics of the bench's metrics.json, e.g. p99_ttft_ms<=500",
            )
    elif submission.answer:
        voice.answer(summary)
    else:
        voice.echo(summary_text(points_of(summary)).rstrip("\n"))
        say(f"proctor: sweep {where.name}: {where}/summary.csv; plots: proctor report {job.name}")
    return done


def _flow_here(
    submission: Submission,
    job: FlowJob | ServerGridJob,
    runs_dir: str | None,
    voice: Voice,
    config: ProjectConfig | None,
) -> Submitted:
    """A flow (its own run, its steps' runs under it, the server torn down) or a server grid
    (its home run, a flow per server point): the flow's record, or the grid's summary, as the
    answer; else the grid's table on stdout. Progress lines go to `voice.say` (stderr)."""
    from proctor.jobs.run import grid_answer, run_flow_job

    if runs_dir is not None:
        job = _in_runs_dir(job, runs_dir)
    if isinstance(job, FlowJob):
        code, where, record = run_flow_job(job, config, say=voice.say)
        done = Submitted(exit_code=code, run_id=where.name, path=where, answer=record)
        if submission.answer:
            voice.answer(record)
        return done
    from proctor.server_sweep import run_server_sweep, summary_text
    from proctor.spec.config import load_config

    result = run_server_sweep(job, config or load_config(), say=voice.say)
    answer = grid_answer(result)
    done = Submitted(
        exit_code=result.exit_code, run_id=result.dir.run_id, path=result.dir.path, answer=answer
    )
    if submission.answer:
        voice.answer(answer)
    else:
        voice.echo(summary_text(result.rows).rstrip("\n"))
        voice.say(
            f"proctor: server sweep {job.group}: {len(result.ran)} point(s) run, "
            f"{len(result.reused)} reused; {result.dir.path / 'summary.csv'}"
        )
    return done


def _in_runs_dir(job: Any, runs_dir: str | None) -> Any:
    """A flow or server grid job whose runs go to `runs_dir` (None: the runs dir where it
    runs), unless the job names its own."""
    if isinstance(job, ServerGridJob):
        flow = job.flow
        if runs_dir is None or flow.runs_dir is None:
            flow = flow.model_copy(update={"runs_dir": runs_dir})
        return job.model_copy(update={"flow": flow})
    if isinstance(job, FlowJob) and (runs_dir is None or job.runs_dir is None):
        return job.model_copy(update={"runs_dir": runs_dir})
    return job


# -- on a target -------------------------------------------------------------------------------
def submit_far(
    submission: Submission,
    target: str | TargetOptions,
    *,
    runs_dir: str | None = None,
    log: IO[bytes] | None = None,
) -> WorkflowRun:
    """Send the submission to `target` and run it there (see the module docstring); the far
    answer is always kept (its JSON document), whatever this side prints."""
    from proctor.targets.remote.requests import SubmitRequest
    from proctor.targets.remote.shipfiles import job_shipment
    from proctor.targets.remote.workflow import WorkflowCommand

    job = submission.job
    if isinstance(job, SweepJob) and job.runs_dir is not None:
        job = job.model_copy(update={"runs_dir": None})  # the far runs dir is the far side's
    if isinstance(job, FlowJob | ServerGridJob):
        job = _in_runs_dir(job, None)
    far = submission.model_copy(update={"job": job, "answer": True})
    # Read before any machine is acquired: a missing file is a usage error, at no cost.
    shipment = job_shipment(far.job)
    detach = far.detach
    command = WorkflowCommand(
        SubmitRequest.of(far),
        # A flow's far job keeps every step's run inside it (fetched and verified with it).
        nested=isinstance(job, FlowJob),
        answer=True,
        leave_live=detach,
        direct=detach,
        detach=detach,
        shipment=shipment,
    )
    return run_far(command, target, runs_dir=runs_dir, log=log, keep_for_server=far.server_lives)


def run_far(
    command: WorkflowCommand,
    target: str | TargetOptions,
    *,
    runs_dir: str | None,
    log: IO[bytes] | None,
    keep_for_server: bool,
) -> WorkflowRun:
    """A typed request (a submission, a step) run on `target` from this source tree, the runs
    it made fetched into this runs dir; the machine kept where `keep_for_server`."""
    from proctor.source.identity import source_identity
    from proctor.spec.config import load_config
    from proctor.spec.plan import resolve_runs_dir, resolve_store_path
    from proctor.targets.registry import target_options
    from proctor.targets.remote.commands import run_workflow, setup_script
    from proctor.targets.remote.orchestrate import RemoteOptions

    config = load_config()
    spec = target_options(target, config) if isinstance(target, str) else target
    local_runs = Path(resolve_runs_dir(runs_dir, config).value)
    options = RemoteOptions(
        setup_script=setup_script(config),
        store_path=Path(resolve_store_path(config, local_runs).value),
    )
    return run_workflow(
        spec,
        command,
        source_identity(Path(".").resolve()),
        config,
        local_runs,
        log if log is not None else sys.stdout.buffer,
        options,
        keep_for_server=keep_for_server,
    )


__all__ = ["Submitted", "Voice", "run_far", "submit", "submit_far"]

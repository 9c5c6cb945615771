"""A concurrency sweep: one supervised bench run per point, grouped under one sweep id.

The sweep is a directory of its own (kind "sweep") holding summary.json, summary.csv and
summary.txt, rewritten after every point, so points already measured are kept whatever happens
to a later one; its plots are its report (`proctor report NAME`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from proctor.jobs.argv import job_argv, job_json
from proctor.jobs.bench import BenchJob
from proctor.jobs.documents import (
    SWEEP_SCHEMA,
    SWEEP_VERSION,
    BenchDocument,
    SweepPointRow,
    SweepSummary,
    read_bench,
)
from proctor.jobs.sweep import SweepJob
from proctor.record.recorder import Recorder
from proctor.record.rundir import RunDir
from proctor.record.schema import SweepRecord, parse_as
from proctor.spec.config import ProjectConfig
from proctor.spec.plan import RunFlags, resolve_run_plan
from proctor.supervise.launch import RunSpec, record_of, start_run
from proctor.targets.service import start_and_wait
from proctor.workloads.summary import csv_table, text_table, write_summary
from proctor.workloads.sweep_engine import SweepHome, drive, each

COLUMNS = (
    ("concurrency", "concurrency", "{:.0f}"),
    ("output tok/s", "output_throughput", "{:.1f}"),
    ("total tok/s", "total_token_throughput", "{:.1f}"),
    ("mean TTFT ms", "mean_ttft_ms", "{:.1f}"),
    ("mean TPOT ms", "mean_tpot_ms", "{:.2f}"),
    ("p99 TTFT ms", "p99_ttft_ms", "{:.1f}"),
    ("p99 TPOT ms", "p99_tpot_ms", "{:.2f}"),
    ("p99 E2EL ms", "p99_e2el_ms", "{:.1f}"),
    ("failed", "failed", "{:.0f}"),
)


@dataclass
class SweepPoint:
    concurrency: int
    run_id: str
    exit_code: int | None
    metrics: dict[str, float] = field(default_factory=dict)
    failure: str | None = None  # why the point failed, from the bench's verdict

    def row(self) -> dict[str, Any]:
        return {
            "concurrency": self.concurrency,
            "run_id": self.run_id,
            "exit_code": self.exit_code,
            "failure": self.failure,
            **self.metrics,
        }


def run_sweep(
    job: SweepJob,
    config: ProjectConfig,
    *,
    say: Callable[[str], None] = print,
) -> tuple[RunDir, list[SweepPoint]]:
    """A bench per concurrency (`job.point(concurrency=c)`), grouped under one sweep run; a
    failing point is recorded and the sweep goes on."""
    concurrencies, name = job.concurrency, job.name
    home = SweepHome(
        job.runs_dir,
        config,
        kind="sweep",
        name=name,
        fields={
            "bench_argv": job_argv(job.bench),
            "job": json.loads(job_json(job)),
            "concurrencies": concurrencies,
            "points": [],
        },
    )
    # The sweep's own record, typed: summarize sets its points and writes them through the
    # recorder (which finish() then ends).
    record = parse_as(SweepRecord, home.record)
    points: list[SweepPoint] = []
    home.summarize = lambda: summarize(home.recorder, record, points)

    def run_point(conc: int) -> SweepPoint:
        point = job.point(concurrency=conc)
        return _run_point(point, config, home.runs_root, name, home.run, say)

    def after(done: list[SweepPoint]) -> None:
        points[:] = done  # what a stop or a failure of a later point summarizes
        home.summarize()  # rewritten after every point

    with home:
        drive(each(concurrencies), run_point, after=after)
        failing = [p for p in points if p.exit_code != 0]
        code = (
            0 if not failing else (failing[0].exit_code if failing[0].exit_code is not None else 6)
        )
        home.finish(code)
    return home.run, points


@dataclass(frozen=True)
class PointRun:
    """One bench of a sweep or SLO search, ended: its run, exit code, metrics.json and the
    numeric metrics in it."""

    run_id: str
    exit_code: int | None
    document: BenchDocument | None  # None: no metrics.json, or a damaged one
    metrics: dict[str, float]


def run_bench_point(
    job: BenchJob,
    config: ProjectConfig,
    runs_root: Path,
    *,
    name: str,
    home: RunDir,
    extra: dict[str, Any],
    say: Callable[[str], None] = lambda _: None,
    label: str = "",
) -> PointRun:
    """The one way a sweep, an SLO search or any grid runs a point: the bench job as its own
    supervised run (`python -m proctor.jobs run JOB`), grouped under `home`, waited for (a stop
    of the controller stops it), read back."""
    flags = RunFlags(argv=job_argv(job), runs_dir=str(runs_root), name=name, gpu_sample=0)

    def start() -> RunDir:
        started = start_run(
            resolve_run_plan(flags, config), RunSpec(kind="bench", group=home.run_id, extra=extra)
        )
        if label:
            say(f"{label}: run {started.run.run_id}")
        return started.run

    # A stop of the sweep while the point starts or runs stops the point too (never left going).
    run, state = start_and_wait(start)
    document = read_bench(run.path / "metrics.json")
    metrics = document.metrics.numbers() if document else {}
    code = state.exit.code if state.exit else None
    return PointRun(run.run_id, code, document, metrics)


def _run_point(
    job: BenchJob,
    config: ProjectConfig,
    runs_root: Path,
    name: str,
    sweep: RunDir,
    say: Callable[[str], None],
) -> SweepPoint:
    conc = job.concurrency
    ran = run_bench_point(
        job,
        config,
        runs_root,
        name=f"{name}-c{conc}",
        home=sweep,
        extra={"sweep": sweep.run_id, "concurrency": conc},
        say=say,
        label=f"[sweep] concurrency {conc}",
    )
    point = SweepPoint(
        conc, ran.run_id, ran.exit_code, ran.metrics, failure=_failure(ran.document, ran.exit_code)
    )
    say(
        f"[sweep] concurrency {conc}: exit {point.exit_code}, "
        f"total {point.metrics.get('total_token_throughput', float('nan')):.1f} tok/s"
        + (f"; FAILED: {point.failure}" if point.failure else "")
    )
    return point


def _failure(document: BenchDocument | None, exit_code: int | None) -> str | None:
    """Why a point failed: its bench verdict, else its exit status; None when it passed."""
    verdict = document.verdict if document else None
    if verdict is not None and verdict.ok is False:
        return str(verdict.message)
    if exit_code is None:
        return "result unknown (no exit status)"
    return None if exit_code == 0 else f"bench exited {exit_code}"


def points_of(summary: dict[str, Any]) -> list[SweepPoint]:
    """The points of a summary.json (what `row()` wrote), for its table."""
    points = []
    for row in summary.get("points") or []:
        metrics = {
            k: float(v)
            for k, v in row.items()
            if k not in ("concurrency", "run_id", "exit_code", "failure")
            and isinstance(v, int | float)
            and not isinstance(v, bool)
        }
        points.append(
            SweepPoint(
                int(row["concurrency"]),
                str(row["run_id"]),
                row.get("exit_code"),
                metrics,
                row.get("failure"),
            )
        )
    return points


def point_status(p: SweepPoint) -> str:
    """ok, FAILED (the bench failed: its figures are not those of the load), UNKNOWN (no exit
    status) or INVALID (the bench's validity verdict: no measurement, docs/bench.md)."""
    if p.exit_code is None:
        return "UNKNOWN"
    if p.exit_code != 0:
        return "FAILED"
    return "INVALID" if p.metrics.get("valid") == 0 else "ok"


def summary_text(points: list[SweepPoint]) -> str:
    header = [c[0] for c in COLUMNS] + ["status"]
    rows = []
    for p in points:
        values = {"concurrency": float(p.concurrency), **p.metrics}
        rows.append(
            [fmt.format(values[key]) if key in values else "-" for _, key, fmt in COLUMNS]
            + [point_status(p)]
        )
    return text_table(header, rows)


def summary_csv(points: list[SweepPoint]) -> str:
    header = ["concurrency", "run_id", "exit_code", *[c[1] for c in COLUMNS[1:]]]
    return csv_table(
        header,
        [
            [p.concurrency, p.run_id, p.exit_code, *[p.metrics.get(c[1], "") for c in COLUMNS[1:]]]
            for p in points
        ],
    )


def summarize(recorder: Recorder, record: SweepRecord, points: list[SweepPoint]) -> None:
    """summary.json/.csv/.txt of the points so far (the one summary writer, workloads/
    summary.py, from typed rows); the sweep's typed record gets the points, written through its
    recorder. The plots are the sweep's report (`proctor report NAME`, plotly, from the points'
    own runs): one plotting library, no PNG to go stale."""
    sweep = recorder.run
    record.points = [p.row() for p in points]
    rows = [SweepPointRow.model_validate(row) for row in record.points]
    summary = SweepSummary.model_validate(
        {"schema": SWEEP_SCHEMA, "schema_version": SWEEP_VERSION, "sweep": sweep.run_id}
        | {"points": rows}
    )
    tables = {"summary.csv": summary_csv(points), "summary.txt": summary_text(points)}
    write_summary(sweep, summary, tables)
    recorder.update(points=record.points)


__all__ = [
    "PointRun",
    "SweepPoint",
    "point_status",
    "points_of",
    "record_of",
    "run_bench_point",
    "run_sweep",
    "summarize",
    "summary_csv",
    "summary_text",
]

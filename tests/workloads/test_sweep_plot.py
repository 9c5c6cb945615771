"""The sweep's summary: rewritten per point, earlier points kept; no PNG (the report plots)."""

from __future__ import annotations

import json
from pathlib import Path

from proctor import load_record
from proctor.record.recorder import Recorder
from proctor.record.schema import SweepRecord, parse_as
from proctor.workloads.sweep import SweepPoint, summarize


def _point(conc: int, exit_code: int | None, tput: float | None, tpot: float | None) -> SweepPoint:
    metrics = {}
    if tput is not None:
        metrics["output_throughput"] = tput
    if tpot is not None:
        metrics["mean_tpot_ms"] = tpot
    return SweepPoint(conc, f"run-c{conc}", exit_code, metrics)


def _sweep(tmp_path: Path) -> tuple[Recorder, SweepRecord]:
    """A started sweep run directory: its recorder and its typed record."""
    recorder = Recorder.create(tmp_path)
    started = recorder.start(
        {
            "name": "s",
            "kind": "sweep",
            "argv": ["bench"],
            "concurrencies": [4, 8, 16],
            "outcome": "running",
            "points": [],
        }
    )
    return recorder, parse_as(SweepRecord, started)


def test_the_summary_is_rewritten_per_point_and_keeps_earlier_ones(tmp_path: Path) -> None:
    recorder, typed = _sweep(tmp_path)
    sweep = recorder.run
    points = [_point(4, 0, 100.0, 20.0)]
    summarize(recorder, typed, points)
    first = json.loads((sweep.path / "summary.json").read_text())
    assert [p["concurrency"] for p in first["points"]] == [4]
    # A later point that failed without figures: earlier points are kept.
    points += [_point(8, 0, 180.0, 25.0), _point(16, 3, None, None)]
    summarize(recorder, typed, points)
    summary = json.loads((sweep.path / "summary.json").read_text())
    assert [p["concurrency"] for p in summary["points"]] == [4, 8, 16]
    assert summary["points"][2]["exit_code"] == 3
    assert "16" in (sweep.path / "summary.txt").read_text()
    assert (sweep.path / "summary.csv").read_text().count("\n") == 4
    # One plotting library: the plots are the sweep's report, never a PNG here.
    assert not list(sweep.path.glob("*.png")) and not list(sweep.path.glob("*.tmp"))
    assert load_record(sweep.path).points == summary["points"]  # type: ignore[union-attr]

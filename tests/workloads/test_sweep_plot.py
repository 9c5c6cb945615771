"""The sweep's PNG: drawn from measured points, rewritten per point, skipped without matplotlib."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from proctor import load_record
from proctor.record.recorder import Recorder
from proctor.record.schema import SweepRecord, parse_as
from proctor.workloads.sweep import PLOT_NAME, SweepPoint, write_plot, write_summary
from tests.helpers import record

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _point(conc: int, exit_code: int | None, tput: float | None, tpot: float | None) -> SweepPoint:
    metrics = {}
    if tput is not None:
        metrics["output_throughput"] = tput
    if tpot is not None:
        metrics["mean_tpot_ms"] = tpot
    return SweepPoint(conc, f"run-c{conc}", exit_code, metrics)


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


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


def test_png_is_written_and_grows_with_points(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    recorder, typed = _sweep(tmp_path)
    sweep = recorder.run
    points = [_point(4, 0, 100.0, 20.0)]
    write_summary(recorder, typed, points)
    png = sweep.path / PLOT_NAME
    first = png.read_bytes()
    assert _png_size(png) == (700, 450)
    summary = json.loads((sweep.path / "summary.json").read_text())
    assert summary["plot"] == PLOT_NAME and summary["plot_skipped"] is None
    # A later point that failed without figures: earlier points and the PNG are kept.
    points += [_point(8, 0, 180.0, 25.0), _point(16, 3, None, None)]
    write_summary(recorder, typed, points)
    assert png.read_bytes() != first  # redrawn with the second point
    summary = json.loads((sweep.path / "summary.json").read_text())
    assert [p["concurrency"] for p in summary["points"]] == [4, 8, 16]
    assert summary["points"][2]["exit_code"] == 3 and summary["plot"] == PLOT_NAME
    assert not list(sweep.path.glob("*.tmp"))


def test_plot_draws_failed_points_that_have_figures_and_skips_empty(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    assert not write_plot(tmp_path / "a.png", [_point(4, 3, None, None)])
    assert not (tmp_path / "a.png").exists()
    assert write_plot(tmp_path / "b.png", [_point(4, 0, 10.0, 1.0), _point(8, 2, 12.0, 3.0)])
    one = write_plot(tmp_path / "c.png", [_point(4, 0, 10.0, 1.0)])
    # The failed point (a red cross) changes the picture.
    assert one and (tmp_path / "b.png").read_bytes() != (tmp_path / "c.png").read_bytes()


def test_without_matplotlib_the_sweep_summary_says_the_png_was_skipped(tmp_path: Path) -> None:
    # A real interpreter where matplotlib cannot be imported (None in sys.modules blocks it).
    code = (
        "import sys\n"
        "sys.modules['matplotlib'] = None\n"
        "from pathlib import Path\n"
        "from proctor.record.recorder import Recorder\n"
        "from proctor.record.schema import SweepRecord\n"
        "from proctor.workloads.sweep import SweepPoint, write_summary\n"
        "r = Recorder.create(Path(sys.argv[1]))\n"
        "write_summary(r, SweepRecord(run_id=r.run.run_id),\n"
        "              [SweepPoint(4, 'r', 0, {'output_throughput': 1.0, 'mean_tpot_ms': 2.0})])\n"
        "print(r.run.path)\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ},
    )
    assert r.returncode == 0, r.stderr
    sweep = Path(r.stdout.strip())
    summary = json.loads((sweep / "summary.json").read_text())
    assert "matplotlib is not installed" in summary["plot_skipped"] and "plot" not in summary
    assert not (sweep / PLOT_NAME).exists()
    assert (sweep / "summary.csv").exists() and (sweep / "summary.txt").exists()


def test_the_sweep_record_gets_its_points_and_plot_through_the_recorder(tmp_path: Path) -> None:
    # The typed record is what write_summary changes; the recorder merges those fields into
    # the record on disk, which keeps everything else it held and reads as a SweepRecord.
    recorder, typed = _sweep(tmp_path)
    write_summary(recorder, typed, [_point(4, 0, 100.0, 20.0), _point(8, 3, None, None)])
    written = record(recorder.run.path)
    assert list(written)[:4] == ["schema", "schema_version", "run_id", "created_at"]
    assert written["name"] == "s" and written["concurrencies"] == [4, 8, 16]
    assert [p["exit_code"] for p in written["points"]] == [0, 3]
    assert written["plot"] == typed.plot and written["plot_skipped"] == typed.plot_skipped
    loaded = load_record(recorder.run.path, strict=True)
    assert isinstance(loaded, SweepRecord) and loaded.points == typed.points
    recorder.finish(code=3, outcome="failed", store_path=None, who="test")
    ended = record(recorder.run.path)
    assert ended["points"] == written["points"] and ended["exit_code"] == 3

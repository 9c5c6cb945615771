"""A metrics.json the store cannot hold as numbers (NaN, Infinity, an integer too large for a
float, a unit that is no text) is indexed without those values: `runs reindex` crashed with
exit 70 on NaN (SQLite stores it as NULL, the column is NOT NULL)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from tests.helpers import only_run, proctor


def test_reindex_leaves_out_what_is_not_a_number(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    env = {"PROCTOR_RUNS_DIR": str(runs)}
    assert proctor("run", "--gpu-sample", "0", "--", "true", env=env).returncode == 0
    run = only_run(runs)
    (run / "metrics.json").write_text(
        '{"schema": "proctor.bench.metrics", "metrics": {"output_throughput": NaN, '
        '"mean_ttft_ms": Infinity, "completed": ' + "9" * 400 + ", "
        '"failed": {"value": 2, "unit": 7}, "duration": 12.5}}'
    )
    res = proctor("runs", "reindex", "--json", env=env)
    assert res.returncode == 0, res.stdout + res.stderr
    assert json.loads(res.stdout)["indexed"] == 1
    with sqlite3.connect(runs / "proctor.sqlite") as db:
        rows = sorted(db.execute("SELECT name, value, unit FROM metrics").fetchall())
    assert rows == [("duration", 12.5, None), ("failed", 2.0, "7")]
    listed = proctor("runs", "list", "--json", env=env)
    assert listed.returncode == 0 and [r["id"] for r in json.loads(listed.stdout)] == [run.name]

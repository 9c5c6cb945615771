"""One summary writer: the concurrency sweep's summary.json, the server grid's and the SLO
search's result.json are typed documents built from typed rows and written by
workloads/summary.py, and by nothing else."""

from __future__ import annotations

import ast
import json
from pathlib import Path

from proctor.jobs.documents import (
    GRID_SCHEMA,
    GRID_VERSION,
    SLO_SCHEMA,
    SLO_VERSION,
    GridRow,
    GridSummary,
    SloProbe,
    SloSearchResult,
    load_document,
)
from proctor.record.rundir import RunDir
from proctor.workloads.summary import write_summary

SRC = Path(__file__).resolve().parents[2] / "src" / "proctor"
#: The modules that write a typed document: each job's metrics.json, and the summaries.
WRITERS = {
    "workloads/loadgen/runner.py",  # a bench's metrics.json
    "workloads/gsm8k.py",  # an eval's metrics.json
    "workloads/offline.py",  # an offline job's metrics.json
    "workloads/summary.py",  # every sweep's summary
}


def _callers(name: str) -> set[str]:
    found = set()
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                func = node.func
                called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                if called == name:
                    found.add(str(path.relative_to(SRC)))
    return found


def test_no_sweep_writes_its_summary_itself() -> None:
    assert _callers("write_checked") == WRITERS
    assert _callers("write_summary") == {
        "workloads/sweep.py",
        "server_sweep.py",
        "workloads/slo.py",
    }


def test_the_writer_writes_each_document_and_its_tables(tmp_path: Path) -> None:
    home = RunDir(tmp_path / "sweep")
    home.path.mkdir()
    grid = GridSummary.model_validate(
        {"schema": GRID_SCHEMA, "schema_version": GRID_VERSION, "group": "g", "sweep": "s"}
        | {"rows": [GridRow.model_validate({"server": {"tp": 1}, "exit_code": 0})]}
        | {"pareto": [0]}
    )
    path = write_summary(home, grid, {"summary.csv": "server\ntp=1\n"})
    assert path.name == "summary.json" and (home.path / "summary.csv").read_text() == (
        "server\ntp=1\n"
    )
    assert json.loads(path.read_text()) == {
        "schema": GRID_SCHEMA,
        "schema_version": GRID_VERSION,
        "group": "g",
        "sweep": "s",
        "rows": [{"server": {"tp": 1}, "exit_code": 0}],
        "pareto": [0],
    }
    assert isinstance(load_document(path), GridSummary)
    probe = SloProbe.model_validate({"value": 2.0, "run_id": "r", "met": True})
    slo = SloSearchResult.model_validate(
        {"schema": SLO_SCHEMA, "schema_version": SLO_VERSION, "axis": "concurrency"}
        | {"slo": ["p99_ttft_ms<=500"], "answer": 2.0, "probes": [probe]}
    )
    path = write_summary(home, slo)
    assert path.name == "result.json"
    assert json.loads(path.read_text())["probes"] == [{"value": 2.0, "run_id": "r", "met": True}]

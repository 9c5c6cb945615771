"""The store indexes every kind of record from its typed model, with the columns and values
the dict-reading indexer gave (kept below as the oracle), into a real SQLite file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from proctor.record.schema import MODELS, RecordCore, parse_record, view_record
from proctor.record.version import SCHEMA_VERSION
from proctor.store.db import RUN_COLUMNS, Store, row_from_record

HOST = {
    "hostname": "node-a",
    "os": "Linux",
    "kernel": "6.1",
    "cpu_model": "x86",
    "cpu_count": 2,
    "memory_total_bytes": 1 << 30,
    "python": "3.11",
    "timezone": "UTC",
}
GPU = {"present": True, "gpus": [{"index": 0, "name": "H200"}, {"index": 1, "name": "H200"}]}
LAUNCHED = {
    "schema": "proctor.run",
    "schema_version": SCHEMA_VERSION,
    "name": "job",
    "cwd": "/w",
    "log": "job.log",
    "proctor_version": "0.2.0",
    "created_at": "2026-01-01T00:00:00.000+00:00",
    "started_at": "2026-01-01T00:00:01.000+00:00",
    "ended_at": "2026-01-01T00:00:03.500+00:00",
    "duration_s": 2.5,
    "outcome": "failed",
    "argv": ["python", "x.py"],
    "key": "k1",
    "argv_display": ["python", "x.py", "--token", "***"],
    "group": "g1",
    "host": HOST,
    "gpu": GPU,
    "exit": {"code": 3, "signal": None, "decided_by": "command"},
    "source": {"commit": "abc123", "dirty": True},
    "target": {"kind": "ssh", "host": "far"},
}
# One record of every kind this proctor writes, as it writes them.
RECORDS: dict[str, dict[str, Any]] = {
    "command": {**LAUNCHED, "kind": "command"},
    "server": {**LAUNCHED, "kind": "server", "server": {"engine": "vllm", "port": 8000}},
    "bench": {**LAUNCHED, "kind": "bench", "server_run": "20260101-000000-server"},
    "eval": {**LAUNCHED, "kind": "eval"},
    "offline": {
        **LAUNCHED,
        "kind": "offline",
        "exit": {"code": 143, "signal": "SIGTERM", "decided_by": "proctor"},
    },
    "workload": {**LAUNCHED, "kind": "workload", "outcome": "ok", "exit": {"code": 0}},
    "slurm": {
        **LAUNCHED,
        "kind": "slurm",
        "slurm": {"job_id": "7"},
        "nodes": {"n1": {}},
        "target": {"kind": "slurm", "cluster": "c"},
    },
    "slurm-node": {
        "schema_version": SCHEMA_VERSION,
        "kind": "slurm-node",
        "group": "g2",
        "argv": ["true"],
        "host": HOST,
        "gpu": {"present": False, "reason": "none"},
        "outcome": "ok",
        "exit": {"code": 0},
        "target": {"kind": "slurm"},
    },
    "flow": {
        "schema_version": SCHEMA_VERSION,
        "kind": "flow",
        "name": "flow-x",
        "outcome": "ok",
        "steps": [{"step": "stop", "started_at": "t", "exit_code": 0}],
        "exit_code": 0,
        "workload_runs": [
            {"index": 0, "name": "b", "kind": "bench", "run_id": "r", "exit_code": 0}
        ],
        "exit": {"code": 0, "decided_by": "proctor"},
        "source": None,
    },
    "sweep": {
        "schema_version": SCHEMA_VERSION,
        "kind": "sweep",
        "name": "sweep",
        "concurrencies": [1, 2],
        "points": [],
        "outcome": "failed",
        "exit_code": 6,
    },
    "remote": {
        "schema_version": 1,
        "kind": "remote",
        "outcome": "running",
        "target": {"kind": "runpod", "pod_id": "p"},
        "remote_dir": "/ws/x",
    },
    "imported": {
        "kind": "imported",
        "name": "vllm-bench-smollm2",
        "outcome": "ok",
        "exit": {"code": 0, "signal": None, "decided_by": "proctor"},
        "imported": {"tool": "vllm", "format": "vllm", "sha256": "ab", "lacks": ["gpu"]},
    },
    # Version 1 (upgraded on read) and records a crash left half-written.
    "v1-command": {**LAUNCHED, "schema_version": 1, "kind": "command"},
    "v1-no-kind": {"schema_version": 1, "name": "old", "argv": ["ls"]},
    "half-written": {
        "schema_version": SCHEMA_VERSION,
        "kind": "command",
        "name": "crashed",
        "argv": ["sleep", "9"],
        "created_at": "2026-01-01T00:00:00.000+00:00",
    },
    "no-outcome-no-target": {"schema_version": SCHEMA_VERSION, "kind": "sweep", "name": "s"},
    # A hand-edited record its model rejects in part: every fact that reads is kept.
    "bad-outcome": {**LAUNCHED, "kind": "bench", "outcome": "exploded", "duration_s": "slow"},
}


def dict_row(record: dict[str, Any], run_dir: Path) -> dict[str, Any]:
    """The row as the store built it from the record as a dict, before typed records."""
    source = record.get("source") or {}
    exit_ = record.get("exit") or {}
    gpu = record.get("gpu") or {}
    gpus = gpu.get("gpus") or []
    target = record.get("target") or {}
    host = record.get("host") or {}
    return {
        "id": record["run_id"],
        "name": record.get("name", ""),
        "kind": record.get("kind", "command"),
        "run_key": record.get("key"),
        "run_group": record.get("group"),
        "dir": str(run_dir),
        "created_at": record.get("created_at"),
        "started_at": record.get("started_at"),
        "ended_at": record.get("ended_at"),
        "duration_s": record.get("duration_s"),
        "outcome": record.get("outcome", "unknown"),
        "exit_code": exit_.get("code"),
        "exit_signal": exit_.get("signal"),
        "source_commit": source.get("commit"),
        "source_dirty": None if source.get("dirty") is None else int(bool(source.get("dirty"))),
        "target": target.get("kind"),
        "host": target.get("host") or host.get("hostname"),
        "gpu": f"{len(gpus)}x {gpus[0].get('name')}" if gpus else None,
        "argv": json.dumps(record.get("argv_display") or record.get("argv") or []),
    }


def _run_dir(runs: Path, name: str, body: dict[str, Any]) -> tuple[Path, dict[str, Any]]:
    run_id = f"20260101-000000-{name}"
    path = runs / run_id
    path.mkdir(parents=True)
    record = {"run_id": run_id, **body}
    (path / "record.json").write_text(json.dumps(record))
    return path, record


def test_every_kind_this_proctor_writes_is_covered() -> None:
    assert set(MODELS) <= set(RECORDS)


@pytest.mark.parametrize("name", sorted(RECORDS))
def test_each_kind_is_indexed_from_its_typed_record_as_before(tmp_path: Path, name: str) -> None:
    path, record = _run_dir(tmp_path / "runs", name, RECORDS[name])
    typed = view_record(record, path.name)
    assert isinstance(typed, RecordCore)
    expected = {**dict_row(record, path), "problem": None}  # a record that reads
    if name == "bad-outcome":  # what the model rejects is not indexed; the rest is
        expected.update(outcome="unknown", duration_s=None)
    assert row_from_record(typed, path) == expected
    with Store(tmp_path / "proctor.sqlite") as store:
        assert store.index_run_dir(path)
        stored = store.run(path.name)
    assert stored is not None and list(stored) == list(RUN_COLUMNS)
    assert stored == expected


@pytest.mark.parametrize("name", sorted(MODELS))
def test_the_row_of_each_model_uses_its_typed_fields(tmp_path: Path, name: str) -> None:
    path, record = _run_dir(tmp_path, name, RECORDS[name])
    typed = parse_record(record)
    assert type(typed) is MODELS[name]
    row = row_from_record(typed, path)
    assert row["kind"] == name and row["id"] == path.name
    if name in ("command", "server", "bench", "eval", "slurm"):
        assert row["gpu"] == "2x H200" and row["run_key"] == "k1"
        assert row["host"] == (
            "node-a" if name == "slurm" else "far"
        )  # the target's, else the host's
        assert row["argv"] == json.dumps(["python", "x.py", "--token", "***"])

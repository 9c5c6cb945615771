"""Typed run records: one model per kind, the committed schema, and records of earlier
schema versions still read (and indexed) as they were written."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from proctor.record.schema import (
    CommandRecord,
    FlowRecord,
    RecordError,
    RemoteRecord,
    SweepRecord,
    json_schema,
    parse_as,
    parse_record,
)
from proctor.record.version import SCHEMA_VERSION
from proctor.store.db import Store
from tests.helpers import REPO, proctor

# Records as proctor wrote them at schema version 1 (trimmed to what each kind held).
V1_COMMAND = {
    "schema": "proctor.run",
    "schema_version": 1,
    "run_id": "20250101-000000-aaaaaa",
    "name": "echo-hi",
    "kind": "command",
    "argv": ["echo", "hi"],
    "cwd": "/tmp",
    "log": "echo-hi.log",
    "proctor_version": "0.1.0",
    "created_at": "2025-01-01T00:00:00+00:00",
    "outcome": "ok",
    "exit": {"code": 0, "signal": None, "decided_by": "command"},
    "target": {"kind": "local"},
}
V1_FLOW = {
    "schema": "proctor.flow",
    "schema_version": 1,
    "run_id": "20250101-000001-bbbbbb",
    "name": "flow-fake-p8000",
    "kind": "flow",
    "argv": [],
    "cwd": "/tmp",
    "log": "flow.log",
    "proctor_version": "0.1.0",
    "created_at": "2025-01-01T00:00:01+00:00",
    "outcome": "ok",
    "options": {"workload_argv": ["true"]},
    "exit_code": 0,
    "exit": {"code": 0, "signal": None, "decided_by": "proctor"},
    "server_run": "20250101-000002-cccccc",
    "steps": [
        {
            "step": "stop",
            "started_at": "2025-01-01T00:00:01+00:00",
            "exit_code": 0,
            "message": "nothing to stop",
        }
    ],
}
V1_SWEEP = {
    "schema": "proctor.sweep",
    "schema_version": 1,
    "run_id": "20250101-000003-dddddd",
    "name": "sweep",
    "kind": "sweep",
    "argv": ["bench"],
    "concurrencies": [1, 2],
    "proctor_version": "0.1.0",
    "created_at": "2025-01-01T00:00:03+00:00",
    "outcome": "failed",
    "points": [],
    "exit_code": 6,
    "exit": {"code": 6, "signal": None, "decided_by": "proctor"},
}
# A remote placeholder of version 1 had no version at all.
V1_REMOTE = {
    "run_id": "20250101-000004-eeeeee",
    "kind": "remote",
    "outcome": "running",
    "target": {"kind": "ssh"},
    "remote_dir": "/ws/runs/x",
    "source": None,
}


def test_the_committed_schema_is_generated_from_the_models() -> None:
    committed = json.loads((REPO / "src/proctor/record/record.schema.json").read_text())
    assert committed == json_schema(), "regenerate: python -m proctor.record.schema"
    kinds = {
        kind
        for model in committed["$defs"].values()
        if "kind" in model.get("properties", {})
        for kind in model["properties"]["kind"].get(
            "enum", [model["properties"]["kind"].get("const")]
        )
    }
    assert {"command", "server", "bench", "flow", "sweep", "slurm", "slurm-node", "remote"} <= kinds


@pytest.mark.parametrize(
    ("data", "model"),
    [
        (V1_COMMAND, CommandRecord),
        (V1_FLOW, FlowRecord),
        (V1_SWEEP, SweepRecord),
        (V1_REMOTE, RemoteRecord),
    ],
)
def test_version_1_records_read_as_their_kind(data: dict[str, object], model: type) -> None:
    record = parse_record(dict(data))
    assert type(record) is model
    assert record.schema_version == SCHEMA_VERSION and record.schema_id == "proctor.run"
    jsonschema.validate(record.to_record(), json_schema())
    if isinstance(record, FlowRecord):
        step = record.step_done("stop")
        assert step is not None and step.exit_code == 0 and record.server_run


def test_a_future_version_is_refused_by_name() -> None:
    with pytest.raises(RecordError, match="unknown record schema version 99"):
        parse_record({**V1_COMMAND, "schema_version": 99})
    with pytest.raises(RecordError, match="not a flow"):
        parse_as(FlowRecord, dict(V1_COMMAND))


def test_version_1_run_directories_stay_listed(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    for data in (V1_COMMAND, V1_FLOW, V1_SWEEP):
        (runs / str(data["run_id"])).mkdir(parents=True)
        (runs / str(data["run_id"]) / "record.json").write_text(json.dumps(data))
        code = data.get("exit_code", 0)
        (runs / str(data["run_id"]) / "exit_code").write_text(f"{code}\n")
    store = runs / "proctor.sqlite"
    with Store(store) as db:
        assert all(
            db.index_run_dir(runs / str(d["run_id"])) for d in (V1_COMMAND, V1_FLOW, V1_SWEEP)
        )
    listed = proctor("runs", "list", "--json", "--limit", "0", "--runs-dir", str(runs))
    assert listed.returncode == 0, listed.stderr
    rows = {row["id"]: row for row in json.loads(listed.stdout)}
    assert rows[str(V1_FLOW["run_id"])]["outcome"] == "ok"
    assert rows[str(V1_SWEEP["run_id"])]["exit_code"] == 6
    shown = proctor("runs", "show", str(V1_FLOW["run_id"]), "--json", "--runs-dir", str(runs))
    assert shown.returncode == 0, shown.stderr
    for data in (V1_COMMAND, V1_FLOW, V1_SWEEP):
        text = proctor("runs", "show", str(data["run_id"]), "--runs-dir", str(runs))
        assert text.returncode == 0 and str(data["name"]) in text.stdout, text.stderr

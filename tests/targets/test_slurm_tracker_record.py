"""The Slurm tracker's read-modify-write merges of the group record: read through the typed
model of its kind, written through the recorder. No cluster needed: the tracker's login host
is this machine (slurm://local), and the far run directory is a real local directory."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from proctor import load_record
from proctor.record.schema import ServerRecord, SlurmRecord
from proctor.targets.slurm.tracker import Tracker
from tests.helpers import record

RUN_ID = "20260101-000000-abcdef"


def _group(tmp_path: Path, body: dict[str, Any]) -> tuple[Tracker, Path]:
    """A group run directory holding `body` as its record and the tracker's slurm.json."""
    group, remote = tmp_path / "runs" / RUN_ID, tmp_path / "remote" / RUN_ID
    group.mkdir(parents=True)
    remote.mkdir(parents=True)
    (group / "record.json").write_text(json.dumps(body, indent=2))
    meta = {
        "job_id": 42,
        "target": "slurm://local",
        "remote_run_dir": str(remote),
        "log": "g.log",
        "multinode": True,
    }
    (group / "slurm.json").write_text(json.dumps(meta))
    return Tracker(group), remote


def _launched(kind: str, **extra: Any) -> dict[str, Any]:
    return {
        "schema": "proctor.run",
        "schema_version": 2,
        "run_id": RUN_ID,
        "kind": kind,
        "name": "g",
        "cwd": "/w",
        "log": "g.log",
        "proctor_version": "0",
        "created_at": "2026-01-01T00:00:00Z",
        "outcome": "starting",
        **extra,
    }


def test_state_changes_merge_into_the_slurm_table_and_keep_every_other_fact(
    tmp_path: Path,
) -> None:
    requested = {"requested": {"nodes": 2}, "remote_run_dir": "/far/run"}
    tracker, _ = _group(tmp_path, _launched("slurm", slurm=requested, source_sync={"a": 1}))
    tracker.note_state("PENDING", "Priority", None)
    tracker.note_state("RUNNING", "None", "n[1-2]")
    written = record(tracker.run.path)
    assert written["slurm"] == {
        **requested,
        "job_id": 42,
        "state": "RUNNING",
        "reason": "None",
        "node_list": "n[1-2]",
    }
    assert written["source_sync"] == {"a": 1} and written["outcome"] == "running"
    assert [e["event"] for e in written["events"]] == ["slurm_pending", "slurm_running"]
    typed = load_record(tracker.run.path, strict=True)
    assert isinstance(typed, SlurmRecord) and typed.slurm["state"] == "RUNNING"


def test_a_slurm_fact_that_is_not_a_table_does_not_stop_the_tracker(tmp_path: Path) -> None:
    # A hand-edited record: the typed view leaves out the field its model rejects, so the
    # tracker writes a fresh table (it used to die on a TypeError and leave the run unended).
    tracker, _ = _group(tmp_path, _launched("slurm", slurm="garbled"))
    tracker.note_state("RUNNING", None, "n1")
    written = record(tracker.run.path)
    assert written["slurm"] == {"job_id": 42, "state": "RUNNING", "reason": None, "node_list": "n1"}
    assert written["name"] == "g" and written["outcome"] == "running"


def test_the_head_node_is_recorded_in_the_slurm_and_server_tables(tmp_path: Path) -> None:
    server = {"engine": "vllm", "port": 8000, "host": None}
    tracker, remote = _group(tmp_path, _launched("server", server=server, slurm={"job_id": 42}))
    tracker.note_head()
    assert "head" not in record(tracker.run.path)["slurm"]  # no head.json yet
    (remote / "head.json").write_text(json.dumps({"node": "n1", "address": "10.0.0.1"}))
    tracker.note_head()
    written = record(tracker.run.path)
    assert written["slurm"] == {"job_id": 42, "head": {"node": "n1", "address": "10.0.0.1"}}
    assert written["server"] == {**server, "host": "10.0.0.1", "head_node": "n1"}
    assert written["events"][-1]["detail"] == "n1 at 10.0.0.1"
    assert isinstance(load_record(tracker.run.path, strict=True), ServerRecord)


def test_a_group_without_a_server_table_gets_none(tmp_path: Path) -> None:
    tracker, remote = _group(tmp_path, _launched("slurm"))
    (remote / "head.json").write_text(json.dumps({"node": "n2", "address": "10.0.0.2"}))
    tracker.note_head()
    written = record(tracker.run.path)
    assert "server" not in written and written["slurm"]["head"]["node"] == "n2"

"""The one recorder: every kind of run directory is created, written and ended the same way
(atomic exit_code, final record, manifest.sha256, store row), with real files and SQLite."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jsonschema

from proctor.record.recorder import Recorder, event
from proctor.record.schema import SweepRecord, json_schema, load_record
from proctor.store.db import Store
from tests.helpers import REPO, proctor


def test_a_recorded_run_ends_with_every_piece_of_evidence(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    store = runs / "proctor.sqlite"
    rec = Recorder.create(runs)
    rec.start(
        {
            "kind": "sweep",
            "name": "s",
            "argv": ["bench"],
            "concurrencies": [1],
            "outcome": "running",
        }
    )
    (rec.run.path / "summary.txt").write_text("one point\n")
    rec.update(add_events=[event("point", "c=1")], points=[{"concurrency": 1}])
    rec.finish(code=0, outcome="ok", store_path=store, who="test")

    assert (rec.run.path / "exit_code").read_text() == "0\n"
    record = json.loads(rec.run.record_path.read_text())
    jsonschema.validate(record, json_schema())
    typed = load_record(rec.run.path)
    assert isinstance(typed, SweepRecord)
    assert typed.exit is not None and typed.exit.code == 0 and typed.ended_at
    assert [e.event for e in typed.events] == ["point"] and typed.points == [{"concurrency": 1}]
    verified = proctor("runs", "verify", rec.run.run_id, "--json", "--runs-dir", str(runs))
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert "summary.txt" in (rec.run.path / "manifest.sha256").read_text()
    with Store(store, read_only=True) as db:
        row = db.run(rec.run.run_id)
    assert row is not None and row["outcome"] == "ok" and row["exit_code"] == 0


def test_an_unknown_status_writes_no_exit_code(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    rec = Recorder.create(runs)
    rec.start({"kind": "flow", "steps": [], "outcome": "running"})
    rec.finish(
        code=None,
        outcome="unknown",
        store_path=runs / "proctor.sqlite",
        who="test",
        error="controller died",
    )
    assert not (rec.run.path / "exit_code").exists()
    assert (rec.run.path / "manifest.sha256").exists()
    listed = proctor("runs", "list", "--json", "--limit", "0", "--runs-dir", str(runs))
    row = json.loads(listed.stdout)[0]
    assert row["outcome"] == "unknown" and row["exit_code"] is None


def test_update_merges_into_what_another_writer_left(tmp_path: Path) -> None:
    rec = Recorder.create(tmp_path)
    rec.start({"kind": "slurm", "outcome": "starting"})
    Recorder(rec.run).update(slurm={"job_id": "7"})  # a second writer (the tracker)
    rec.update(outcome="running", add_events=[event("start")])
    record = json.loads(rec.run.record_path.read_text())
    assert record["slurm"] == {"job_id": "7"} and record["outcome"] == "running"
    assert record["schema_version"] == 2 and record["run_id"] == rec.run.run_id


def test_the_writers_of_far_sides_import_no_pydantic() -> None:
    """The wrapper and the Slurm node runner record through the recorder on machines whose
    python may lack pydantic; their start-up must not pay for it either."""
    code = (
        "import sys; import proctor.record.recorder, proctor.supervise.wrapper, "
        "proctor.targets.slurm.node, proctor.store.db; "
        "assert 'pydantic' not in sys.modules, sorted(m for m in sys.modules if 'pydantic' in m)"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_only_the_recorder_writes_records_and_exit_codes() -> None:
    """One writer: no module but record/recorder.py writes record.json, and none but
    record/finish.py (which the recorder uses) writes exit_code."""
    writers: dict[str, list[str]] = {"record.json": [], "exit_code": []}
    for path in sorted((REPO / "src/proctor").rglob("*.py")):
        rel = path.relative_to(REPO / "src/proctor").as_posix()
        for line in path.read_text().splitlines():
            if "write_json(" in line and ('"record.json"' in line or "RECORD" in line):
                writers["record.json"].append(rel)
            if "write_atomic(" in line and ("exit_code_path" in line or '"exit_code"' in line):
                writers["exit_code"].append(rel)
    assert writers == {"record.json": ["record/recorder.py"], "exit_code": ["record/finish.py"]}


def test_writers_read_the_record_they_merge_into_through_its_typed_model() -> None:
    """A writer reads the record it merges facts into with load_record/read_view (the model
    of its kind), never as a raw dict; the exceptions (docs/architecture.md, "Writing a
    record"): the recorder itself, the node side (no pydantic there), and the readers that
    pass the record on as written (runs show --json, a far flow's record, the orphan stop's
    base for the recorder)."""
    allowed = {
        "record/recorder.py",
        "supervise/launch.py",
        "supervise/orphans.py",
        "targets/slurm/node.py",
        "targets/slurm/nodeinspect.py",
        "targets/remote/commands.py",
        "targets/remote/workflow.py",
    }
    raw: set[str] = set()
    for path in sorted((REPO / "src/proctor").rglob("*.py")):
        text = path.read_text()
        if 'read_json("record.json")' in text or "read_json(RECORD)" in text:
            raw.add(path.relative_to(REPO / "src/proctor").as_posix())
    assert raw <= allowed, sorted(raw - allowed)

"""One writer for a run directory, whatever the kind of run and wherever it runs.

    rec = Recorder.create(runs_dir)              the directory (sortable run id)
    rec.start({...kind's fields...})             the first record.json (version, times)
    rec.update(outcome="running", add_events=[...])   facts merged in as they become known
    rec.finish(code=0, outcome="ok")             exit_code (atomic), the final record,
                                                 manifest.sha256, the store row (bounded)

The wrapper (a plain command), the Slurm tracker and node runner, flows, sweeps and the
controller of a remote run all write through it, so every run directory gets the same
guarantees in the same order (record/finish.py says which). Records go in and out as dicts:
the wrapper imports no pydantic, so neither does this module; typed views of a record are in
record/schema.py (`RecordCore.to_record()` gives the dict to write).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from proctor.record.finish import now_iso, seal_run, write_exit_code
from proctor.record.owner import let_go
from proctor.record.rundir import RECORD, RunDir, create_run_dir, new_run_id
from proctor.record.version import SCHEMA_ID, SCHEMA_VERSION


def event(name: str, detail: str | None = None) -> dict[str, Any]:
    """One entry of a record's `events`."""
    return {"time": now_iso(), "event": name, "detail": detail}


class Recorder:
    """The record of one run directory, and the only way its record.json is written."""

    def __init__(self, run: RunDir, record: Mapping[str, Any] | None = None) -> None:
        self.run = run
        self.record: dict[str, Any] = dict(record) if record is not None else self.read()

    # -- creation -------------------------------------------------------------------------
    @classmethod
    def create(cls, runs_dir: Path, run_id: str | None = None) -> Recorder:
        """A new run directory under `runs_dir` (UsageError if it exists or cannot be made;
        ENOSPC propagates). No record yet: `start` writes the first one."""
        return cls(create_run_dir(runs_dir, run_id or new_run_id()), {})

    @classmethod
    def at(cls, path: Path) -> Recorder:
        """The recorder of a directory that exists or is made here (a node's directory, the
        local side of a far run), with the record it holds."""
        path.mkdir(parents=True, exist_ok=True)
        return cls(RunDir(path))

    def start(self, record: Mapping[str, Any]) -> dict[str, Any]:
        """Write the first record: the kind's fields over the shared defaults."""
        self.record = {
            "schema": SCHEMA_ID,
            "schema_version": SCHEMA_VERSION,
            "run_id": self.run.run_id,
            "created_at": now_iso(),
            **record,
        }
        self.save()
        return self.record

    # -- the record -----------------------------------------------------------------------
    def read(self) -> dict[str, Any]:
        return self.run.read_json(RECORD) or {}

    def save(self) -> None:
        """Write the record as held (atomically; OSError, ENOSPC included, propagates)."""
        self.run.write_json(RECORD, self.record)

    def update(self, add_events: Iterable[Mapping[str, Any]] | None = None, **fields: Any) -> None:
        """Merge facts into the record on disk (another process may have written it since)
        and write it back."""
        record = self.read() or self.record
        record.update(fields)
        if add_events:
            record.setdefault("events", []).extend(dict(e) for e in add_events)
        self.record = record
        self.save()

    # -- the end --------------------------------------------------------------------------
    def write_exit(
        self,
        code: int,
        signal: str | None = None,
        reason: str | None = None,
        command: tuple[int, str | None] | None = None,
    ) -> None:
        """`exit_code`, atomically, before anything else of the end (record/finish.py: the
        form, with `reason` when proctor decided the status)."""
        write_exit_code(self.run, code, signal, reason, command)

    def seal(self, store_path: str | Path | None, who: str) -> None:
        """manifest.sha256 over the artifacts, then the store row (bounded; pending if locked)."""
        seal_run(self.run, store_path, who)

    def finish(
        self,
        *,
        code: int | None,
        outcome: str,
        store_path: str | Path | None,
        who: str,
        signal: str | None = None,
        decided_by: str = "proctor",
        reason: str | None = None,
        **fields: Any,
    ) -> None:
        """End the run: `code` None means its status is unknown, so no exit_code is written
        (absent means unknown, never success). `reason` ("stopped", "timeout"): proctor ended
        it, and the file says so. Then this process lets go of the run (record/owner.py)."""
        if code is not None:
            self.write_exit(code, signal, reason)
            self.record["exit"] = {
                "code": code,
                "signal": signal,
                "decided_by": decided_by,
                **({"reason": reason} if reason else {}),
            }
            self.record["exit_code"] = code
        ended = now_iso()
        self.record.update(outcome=outcome, ended_at=ended, **fields)
        if self.record.get("duration_s") is None and self.record.get("started_at"):
            self.record["duration_s"] = _seconds_between(self.record["started_at"], ended)
        self.save()
        self.seal(store_path, who)
        let_go(self.run.path)


def _seconds_between(start: str, end: str) -> float | None:
    from datetime import datetime

    try:
        delta = datetime.fromisoformat(end) - datetime.fromisoformat(start)
        return round(delta.total_seconds(), 3)
    except (TypeError, ValueError):
        return None


__all__ = ["Recorder", "event"]

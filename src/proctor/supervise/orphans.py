"""Stopping what a run started after its wrapper died (SIGKILL, OOM killer, a crash).

Without its wrapper nobody waits for the command, so `runs stop` must find it from the record:
- the command's process group (the record's `process.pgid`): Linux never reuses a pid while a
  group of that id exists, so its members are the run's; if a process with that pid exists,
  its start time must be the recorded one, else the id was reused and the group is left alone;
- the command's own descendants, if the command itself is still alive (pid + start time);
- any process carrying the run's id in its environment (PROCTOR_RUN_ID, set by the wrapper
  and inherited by everything the command started, even what left the group with setsid),
  started no earlier than the command.
Nothing is matched by name.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import psutil

from proctor.record.rundir import RunDir
from proctor.record.schema import LaunchedRecord, RecordCore, view_record
from proctor.supervise.kill import kill_ladder, members

RUN_ID_ENV = "PROCTOR_RUN_ID"
_SLACK_S = 0.05
_FINAL = ("ok", "failed", "timeout", "stopped", "unknown")


@dataclass
class OrphanStop:
    """What `runs stop` did for a run whose wrapper is gone."""

    found: list[int] = field(default_factory=list)
    terminated: list[int] = field(default_factory=list)
    killed: list[int] = field(default_factory=list)
    survivors: list[int] = field(default_factory=list)
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "found": self.found,
            "terminated": self.terminated,
            "killed": self.killed,
            "survivors": self.survivors,
            "reason": self.reason,
        }


def _same(pid: int, create_time: float) -> psutil.Process | None:
    try:
        proc = psutil.Process(pid)
        if abs(proc.create_time() - create_time) <= _SLACK_S:
            return proc
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        pass
    return None


def _marked(run_id: str, since: float) -> list[psutil.Process]:
    found: list[psutil.Process] = []
    me = os.getpid()
    for proc in psutil.process_iter(["pid", "create_time"]):
        if proc.pid == me or (proc.info.get("create_time") or 0) + _SLACK_S < since:
            continue
        try:
            if proc.environ().get(RUN_ID_ENV) == run_id:
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
            continue
    return found


def _group_is_ours(pgid: int, create_time: float) -> bool:
    try:
        leader = psutil.Process(pgid)
    except psutil.NoSuchProcess:
        return True  # the leader is gone; its group's id cannot have been reused while in use
    except psutil.AccessDenied:
        return False
    return bool(abs(leader.create_time() - create_time) <= _SLACK_S)


def leftovers(run: RunDir, record: RecordCore) -> tuple[int | None, list[int], float | None]:
    """(process group, roots, command start time) of what the run's command left running."""
    process = record.process if isinstance(record, LaunchedRecord) else None
    if process is None:
        return None, [], None
    pid, created = process.pid, process.create_time
    pgid = process.pgid or pid
    group = pgid if _group_is_ours(pgid, created) else None
    roots = [pid] if _same(pid, created) is not None else []
    return group, roots, created


def stop_orphaned(run: RunDir, record: RecordCore, grace: float) -> OrphanStop:
    """Run the kill ladder over what the dead wrapper's command left running."""
    group, roots, created = leftovers(run, record)
    report = OrphanStop()
    if created is None:
        report.reason = "the record names no command process"
        return report

    def marked() -> list[psutil.Process]:
        return _marked(run.run_id, created)

    found = {p.pid for p in members(group, roots)} | {p.pid for p in marked()}
    if not found:
        report.reason = "no process of the run is alive"
        return report
    report.found = sorted(found)
    ladder = kill_ladder(group, roots, grace=grace, extra=marked)
    report.terminated, report.killed = ladder.terminated, ladder.killed
    report.survivors = ladder.survivors
    count = len(set(ladder.terminated) | set(ladder.killed))
    report.reason = f"its wrapper was gone; stopped {count} process(es) the run had started"
    return report


def stop_dead_wrapper_run(run: RunDir) -> OrphanStop:
    """`runs stop` for a run whose wrapper is gone: stop what it left running and, when no
    exit status was recorded, end the record as unknown with the reason (exit_code stays
    absent: nobody waited for the command, so its status is not known)."""
    from proctor.record.recorder import Recorder, event

    written = run.read_json("record.json") or {}
    record = view_record(written, run.run_id)
    plan = run.read_json("plan.json") or {}
    report = stop_orphaned(run, record, grace=float(plan.get("grace_s") or 10.0))
    if run.exit_code_path.exists() or not written:
        return report
    if record.outcome in _FINAL and not report.found:
        return report
    recorder = Recorder(run, written)
    recorder.update(add_events=[event("stop", f"runs stop: {report.reason}")])
    recorder.finish(
        code=None,
        outcome="unknown",
        store_path=plan.get("store_path"),
        who="runs stop",
        error="the run's wrapper died before the command ended: no exit status was recorded",
        orphans_stopped=report.to_dict(),
    )
    return report


__all__ = ["RUN_ID_ENV", "OrphanStop", "leftovers", "stop_dead_wrapper_run", "stop_orphaned"]

"""Reading how a run stands: its exit status (or that it is unknown) and whether it is alive.

A run is alive while its wrapper process is: same pid AND same start time (pids are reused).
No exit_code file and no live wrapper means the result is unknown, never success.
"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass
from typing import Literal

import psutil

from proctor.record.rundir import RunDir
from proctor.record.schema import ExitStatus, ProcessRef, RecordCore

State = Literal["running", "finished", "unknown", "starting"]


def read_exit_status(run: RunDir) -> ExitStatus | None:
    try:
        text = run.exit_code_path.read_text(encoding="utf-8").split()
    except (FileNotFoundError, UnicodeDecodeError):  # garbage reads as no status
        return None
    if not text:
        return None
    try:
        code = int(text[0])
    except ValueError:
        return None
    sig = text[1] if len(text) > 1 else None
    return ExitStatus(code=code, signal=sig)


def status_from_wait(wait_status: int) -> ExitStatus:
    """Shell convention: a death by signal N is 128+N, recorded with the signal's name."""
    code = os.waitstatus_to_exitcode(wait_status)
    if code < 0:
        signum = -code
        try:
            name = signal.Signals(signum).name
        except ValueError:
            name = f"SIG{signum}"
        return ExitStatus(code=128 + signum, signal=name)
    return ExitStatus(code=code)


def process_ref(pid: int) -> ProcessRef | None:
    try:
        proc = psutil.Process(pid)
        return ProcessRef(pid=pid, create_time=proc.create_time(), pgid=_pgid(pid))
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


def is_alive(ref: ProcessRef | None) -> bool:
    if ref is None:
        return False
    try:
        proc = psutil.Process(ref.pid)
        if abs(proc.create_time() - ref.create_time) > 0.05:
            return False
        return bool(proc.status() != psutil.STATUS_ZOMBIE)
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def read_wrapper_ref(run: RunDir) -> ProcessRef | None:
    data = run.read_json("wrapper.pid")
    if not data:
        return None
    try:
        return ProcessRef.model_validate(data)
    except ValueError:
        return None


@dataclass(frozen=True)
class RunState:
    state: State
    exit: ExitStatus | None
    wrapper_alive: bool


def run_state(run: RunDir) -> RunState:
    status = read_exit_status(run)
    ref = read_wrapper_ref(run)
    alive = is_alive(ref)
    if status is not None:
        return RunState("finished", status, alive)
    if alive:
        return RunState("running", None, True)
    if ref is None and not run.record_path.exists():
        return RunState("starting", None, False)
    return RunState("unknown", None, False)


def effective_outcome(record: RecordCore, state: RunState) -> str:
    """What a reader should believe: the record's outcome only once an exit status exists."""
    if state.state == "finished":
        if record.outcome in ("ok", "failed", "timeout", "stopped"):
            return record.outcome
        assert state.exit is not None
        return "ok" if state.exit.code == 0 else "failed"
    if state.state == "running":
        return "running"
    if state.state == "starting":
        return "starting"
    return "unknown"

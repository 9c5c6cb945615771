"""Reading how a run stands: its exit status (or that it is unknown) and whether it is alive.

    starting   held by a live process (record/owner.py), which has not started it yet
    running    held, and its wrapper (or flow/sweep controller) has written wrapper.pid
    finished   `exit_code` holds a status (0-255); `wrapper_alive` while the end is written
    unknown    no status, and nothing holds the run: none can come any more

A run directory without an owner lock (an older proctor's) is alive while its wrapper is: same
pid AND same start time (pids are reused). No status and nothing alive is unknown, never success.
"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass
from typing import Literal

import psutil

from proctor.record import owner
from proctor.record.exitfile import REASONS, read_exit_file
from proctor.record.rundir import RunDir
from proctor.record.schema import ExitStatus, ProcessRef, RecordCore

State = Literal["running", "finished", "unknown", "starting"]


def read_exit_status(run: RunDir) -> ExitStatus | None:
    return read_exit_file(run.exit_code_path)


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
        return ProcessRef(
            pid=pid,
            create_time=proc.create_time(),
            pgid=_pgid(pid),
            start_ticks=owner.start_ticks(pid),
        )
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


_CREATE_SLACK_S = 1.5


def is_alive(ref: ProcessRef | None) -> bool:
    if ref is None:
        return False
    try:
        proc = psutil.Process(ref.pid)
        if ref.start_ticks is not None:
            if owner.start_ticks(ref.pid) != ref.start_ticks:
                return False
        # A start time in seconds is derived from the boot time, which two processes may
        # read a second apart: a tighter match would call a live process dead.
        elif abs(proc.create_time() - ref.create_time) > _CREATE_SLACK_S:
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
    """How the run stands. `unknown` only when its exit status is missing and can no longer
    come: nothing holds the run (record/owner.py) and, read after that, still no status."""
    status = read_exit_status(run)
    holder = owner.held(run.path)
    if holder is None:
        return _state_without_lock(run, status)
    if status is not None:
        return RunState("finished", status, holder)
    if holder:
        started = run.wrapper_pid_path.exists()
        return RunState("running" if started else "starting", None, True)
    # Its last holder let go: it wrote the status first, so read it again.
    status = read_exit_status(run)
    if status is not None:
        return RunState("finished", status, False)
    return RunState("unknown", None, False)


def _state_without_lock(run: RunDir, status: ExitStatus | None) -> RunState:
    """A run directory without an owner lock (an older proctor's, a far run's placeholder,
    a Slurm node's): the pid file of its wrapper, guarded against pid reuse."""
    alive = is_alive(read_wrapper_ref(run))
    if status is not None:
        return RunState("finished", status, alive)
    if alive:
        return RunState("running", None, True)
    status = read_exit_status(run)  # written just before the wrapper exited
    if status is not None:
        return RunState("finished", status, False)
    return RunState("unknown", None, False)


def effective_outcome(record: RecordCore, state: RunState) -> str:
    """What a reader should believe: the exit_code file's word, not the record's. The record
    only adds `timeout`/`stopped` to a file of the old form (no reason word), so a run proctor
    ended is never read as a success."""
    if state.state == "finished":
        assert state.exit is not None
        if state.exit.reason in REASONS:
            return state.exit.reason
        if record.outcome in REASONS:
            return record.outcome
        return "ok" if state.exit.code == 0 else "failed"
    if state.state == "running":
        return "running"
    if state.state == "starting":
        return "starting"
    return "unknown"

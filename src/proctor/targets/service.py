"""One supervised run as every command drives it: start (with Ctrl-C held), follow, wait,
interrupt, stop, and the exit status the command ends with.

`proctor run`, bench, eval, offline, `slurm run` and `runs wait/attach` all end the same way:

    interrupts = guard_start()                   handler first: no window without one
    started = start_run(plan, spec)              (or a target's start)
    interrupts.attach(started.run)               a Ctrl-C noted during the start stops it now
    sup = SupervisedRun(started.run, target)     follow/wait/stop through the Target protocol
    state = sup.follow_to_end(out)
    code = interrupts.exit_code(sup.run, state)  130 if interrupted, else the run's status

Following goes through the Target protocol (targets/base.py: status, follow, stop), so a local
run and a Slurm group run (its tracker keeps the local directory) follow the same path; the
local target is the default. The run directory stays the source of the record and summary.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import IO, TYPE_CHECKING

from proctor.errors import (
    Interrupted,
    ProctorError,
    ResultUnknown,
    TimeLimitReached,
    error_for_code,
)
from proctor.record.rundir import RunDir
from proctor.record.schema import CommandStatus, ExitStatus, RecordCore, read_view
from proctor.record.status import RunState, effective_outcome, read_exit_status
from proctor.supervise.launch import WRAPPER_FINISH_TIMEOUT_S, Started, request_stop
from proctor.supervise.signals import deferred_stops

if TYPE_CHECKING:
    from proctor.targets.base import RunStatus, Target


class Interrupts:
    """Ctrl-C / SIGTERM of the controller become a stop request for the run."""

    def __init__(self, run: RunDir | None = None) -> None:
        self.run = run
        self.hit = False

    def __enter__(self) -> Interrupts:
        # Handlers can be set in the main thread only: a library caller's thread gets none.
        main = threading.current_thread() is threading.main_thread()
        self.previous = (
            {s: signal.signal(s, self.handle) for s in (signal.SIGINT, signal.SIGTERM)}
            if main
            else {}
        )
        return self

    def handle(self, signum: int, frame: FrameType | None) -> None:
        if not self.hit:
            # A raw write: the main thread may be inside a write to the same stream, and a
            # buffered print from a signal handler would fail with a reentrant call.
            with contextlib.suppress(OSError):
                os.write(2, b"proctor: interrupted, stopping the run ...\n")
        self.hit = True
        if self.run is not None:
            request_stop(self.run)

    def __exit__(self, *exc: object) -> None:
        for s, handler in self.previous.items():
            signal.signal(s, handler)

    # For commands that start one run and follow it to the end of the process (bench, eval,
    # offline, slurm): arm() before the start, attach(run) once it is known. No signal mask
    # here (whatever the start spawns, e.g. a Slurm tracker, must not inherit a blocked
    # SIGTERM): a signal during the start is noted by the handler and acted on at attach().
    def arm(self) -> Interrupts:
        """Install the handler before the start: no window without one."""
        self.__enter__()
        return self

    def attach(self, run: RunDir) -> None:
        """The run is known: a signal noted during the start stops it now."""
        self.run = run
        if self.hit:
            request_stop(run)

    def raise_if_hit(self, run: RunDir | None = None) -> None:
        run = run or self.run
        if self.hit and run is not None:
            raise Interrupted(f"run {run.run_id} stopped on interrupt")

    def exit_code(self, run: RunDir, state: RunState) -> int:
        """How the command ends as the run ended: Interrupted (130) if interrupted, else its
        status (ResultUnknown, TimeLimitReached, or the command's own code)."""
        self.raise_if_hit(run)
        return exit_for_state(run, state)


def guard_start() -> Interrupts:
    """Ctrl-C/SIGTERM handling for a command about to start one run; see Interrupts.arm."""
    return Interrupts().arm()


def start_held(interrupts: Interrupts, start: Callable[[], Started]) -> Started:
    """Start a wrapper-run with SIGINT/SIGTERM held from before the wrapper starts until the
    handler knows the run: a Ctrl-C in between is delivered then, and stops the run instead of
    orphaning it (supervise/signals.py). `interrupts` must be entered already."""
    with deferred_stops():
        started = start()
        interrupts.run = started.run
    return started


def exit_for_state(run: RunDir, state: RunState) -> int:
    """The exit status of a run as `proctor run` and `proctor runs wait` report it: the
    exit_code file's. A run proctor ended is never 0: a time limit is 4 and a stop 130,
    whatever its command did on SIGTERM (an old-form file gets the record's word for it)."""
    # A view, not load_record: a record with one damaged field (a NaN duration) still
    # says how the run ended.
    record = read_view(run.path)
    if state.state == "unknown" or state.exit is None:
        raise ResultUnknown(
            f"run {run.run_id}: result unknown ({unknown_reason(record)})", hint=f"see {run.path}"
        )
    exit_ = _detailed(run, state.exit)
    reason = exit_.reason or (record.outcome if record is not None else None)
    command = exit_.command
    if exit_.reason is None:  # the old form: the command's own status is the file's
        command = CommandStatus(code=exit_.code, signal=exit_.signal)
    said = ""
    if command is not None:
        said = f" (command status {command.code}{f' {command.signal}' if command.signal else ''})"
    if reason == "timeout":
        raise TimeLimitReached(f"run {run.run_id} reached its time limit and was stopped{said}")
    if reason == "stopped":
        raise Interrupted(f"run {run.run_id} was stopped{said}")
    return state.exit.code


def _detailed(run: RunDir, exit_: ExitStatus) -> ExitStatus:
    """The run directory's exit_code file, where it holds the same status in full (the command's
    own status after proctor's), else what the target said."""
    local = read_exit_status(run)
    return local if local is not None and local.code == exit_.code else exit_


def unknown_reason(record: RecordCore | None) -> str:
    """Why a run's result is unknown, in one line (a traceback's last line)."""
    lines = str((record.error if record else None) or "").strip().splitlines()
    return lines[-1][:300] if lines else "no exit status was recorded"


def summary_line(run: RunDir, state: RunState) -> str:
    from proctor.spec.durations import format_duration

    # A view, not load_record: a record with one damaged field (a NaN duration) still
    # says how the run ended.
    record = read_view(run.path)
    duration = record.duration_s
    took = f" in {format_duration(float(duration))}" if duration is not None else ""
    if state.exit is None:
        why = unknown_reason(record)
        return f"run {run.run_id}: result unknown ({why}); evidence in {run.path}"
    exit_ = _detailed(run, state.exit)
    sig = f" ({exit_.signal})" if exit_.signal else ""
    if exit_.command is not None:
        cmd = exit_.command
        sig = f" (command status {cmd.code}{f' {cmd.signal}' if cmd.signal else ''})"
    outcome = effective_outcome(record, state)
    # Name a log only where there is one: a sweep's evidence is its summary, not a log.
    log = run.log_path()
    where = f"log {log}" if log.is_file() else f"evidence in {run.path}"
    line = f"run {run.run_id}: {outcome}, exit {state.exit.code}{sig}{took}; {where}"
    return line + leftovers_line(run.run_id, record)


#: The prefixes of the error lines of proctor's own workload processes (crash.guarded, main).
_OWN_PREFIXES = ("proctor", "proctor bench", "proctor eval", "proctor offline")
#: How much of a log's end is searched for its command's own error line.
_TAIL_BYTES = 64 * 1024


def failure_reason(run: RunDir) -> str | None:
    """What a failed run of one of proctor's own workloads (bench, eval, offline) said last: the
    last `proctor...: ` line its log holds (they print their error that way), else None."""
    try:
        with run.log_path().open("rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - _TAIL_BYTES))
            tail = handle.read().decode("utf-8", "replace")
    except OSError:
        return None
    for line in reversed(tail.splitlines()):
        head, sep, said = line.partition(": ")
        if sep and head in _OWN_PREFIXES and said.strip():
            return said.strip()
    return None


def run_failure(run: RunDir, code: int, kind: str) -> ProctorError:
    """A `kind` run that ended with status `code`, as proctor's error of that code: its own
    last error line as the reason where its log has one, the log as the place to look."""
    said = failure_reason(run)
    reason = f"{kind} run {run.run_id} failed (exit {code})" + (f": {said}" if said else "")
    return error_for_code(code, reason, hint=f"see its log {run.log_path()}")


def leftovers_line(run_id: str, record: RecordCore | None) -> str:
    """A second line, when the wrapper stopped processes the command left running."""
    from proctor.supervise.leftovers import notice

    said = notice((record.fact("leftovers") if record is not None else None) or [])
    return f"\nproctor: run {run_id}: {said}" if said else ""


def state_of(status: RunStatus) -> RunState:
    """A target's RunStatus as the RunState the exit table reads."""
    if status.exit_code is None:
        return RunState(status.state, None, status.wrapper_alive)
    exit_ = ExitStatus(
        code=status.exit_code,
        signal=status.exit_signal,
        decided_by="proctor" if status.exit_reason else "command",
        reason=status.exit_reason,
    )
    return RunState(status.state, exit_, status.wrapper_alive)


class SupervisedRun:
    """A started run, driven through the Target protocol (status / follow / stop); its run
    directory (local, or the local directory a tracker keeps) holds the record."""

    def __init__(self, run: RunDir, target: Target | None = None) -> None:
        self.run = run
        self.target = target if target is not None else _local_target(run)

    @property
    def run_id(self) -> str:
        return self.run.run_id

    def status(self) -> RunStatus:
        return self.target.status(self.run_id)

    def follow(self, out: IO[bytes], *, offset: int = 0) -> RunStatus:
        """Copy the run's log to `out` until the command is done."""
        return self.target.follow(self.run_id, out, offset=offset)

    def wait(self, timeout: float | None = None, poll: float = 0.1) -> RunState:
        """Until the run has a status and its supervisor has finished the record (bounded), or
        is gone without one (unknown)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        finish_by: float | None = None
        while True:
            status = self.status()
            if status.done:
                return state_of(status)
            if status.state == "finished":
                # The status is known; let the wrapper finish the record (it hashes the
                # artifacts, which takes a while for a large log on a loaded machine).
                finish_by = finish_by or time.monotonic() + WRAPPER_FINISH_TIMEOUT_S
                if time.monotonic() >= finish_by:
                    return state_of(status)
            if deadline is not None and time.monotonic() >= deadline:
                return state_of(status)
            time.sleep(0.02 if status.state == "finished" else poll)

    def final_status(self, status: RunStatus | None = None) -> RunStatus:
        """The run's status once it is done, as its target knows it: through the target's own
        wait where it has one (far targets: reconnects, budgets), else its status now."""
        if status is not None and status.done:
            return status
        from proctor.targets.base import WAIT, capable

        waits = capable(self.target, WAIT)
        return waits.wait(self.run_id) if waits is not None else self.status()

    def stop(self) -> bool:
        """Ask the run to stop (its supervisor runs the kill ladder). False if not running."""
        return self.target.stop(self.run_id)

    def follow_to_end(self, out: IO[bytes]) -> RunState:
        """Follow the log, then wait for the final record: the state the command ends on."""
        self.follow(out)
        return self.wait()

    def exit_code(self, state: RunState) -> int:
        return exit_for_state(self.run, state)

    def summary(self, state: RunState) -> str:
        return summary_line(self.run, state)


def _local_target(run: RunDir) -> Target:
    from proctor.spec.config import ProjectConfig
    from proctor.targets.local import LocalTarget

    return LocalTarget(run.path.parent, config=ProjectConfig())


__all__ = [
    "Interrupts",
    "SupervisedRun",
    "exit_for_state",
    "failure_reason",
    "guard_start",
    "run_failure",
    "start_and_wait",
    "start_held",
    "state_of",
    "summary_line",
    "unknown_reason",
]


def start_and_wait(
    start: Callable[[], RunDir], stop_wait_s: float = 60.0
) -> tuple[RunDir, RunState]:
    """Start a run and wait for it, as a controller of many runs does (a sweep's point): the
    run and how it ended. If the controller is interrupted (Ctrl-C, or `runs stop` of its own
    run), that run is stopped first, then the interrupt re-raised. SIGINT/SIGTERM are held
    while `start` runs (supervise/signals.py), so one that comes while the run starts stops it
    too instead of leaving it running after its controller."""
    run: RunDir | None = None
    try:
        with deferred_stops():
            run = start()
        return run, SupervisedRun(run).wait()
    except KeyboardInterrupt:
        if run is not None:
            supervised = SupervisedRun(run)
            if supervised.stop():
                supervised.wait(stop_wait_s)
        raise

"""Who holds a run: an advisory lock that says "an exit status can still come".

Every run directory proctor creates holds `.owner.lock`, locked (flock, exclusive) from the
instant the directory becomes visible until the last process that can still write its
`exit_code` is gone. The directory is made under a hidden name with the lock taken, then
renamed into place, so no reader ever sees a run without its owner.

The lock belongs to an open file description, not to a process: the controller that creates
the run hands its descriptor to the wrapper (or tracker) it starts, so there is no moment
between "the controller is starting it" and "the wrapper runs it" when nobody holds it, and it
is released by the kernel the moment its last holder exits, however it exits (SIGKILL, OOM).
No pid is compared, so neither pid reuse nor a clock that moves can make a live run look
dead. Readers test it with a shared, non-blocking lock that they drop at once.

A flow, a sweep or an SLO search is held by its controller process itself.

This module imports nothing heavy: the wrapper uses it.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import time
from pathlib import Path

LOCK = ".owner.lock"
#: The wrapper (or tracker) finds the descriptor it inherited in this variable.
FD_ENV = "PROCTOR_OWNER_FD"

_held: dict[str, int] = {}  # run directory -> the descriptor this process holds its lock by


def start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (/proc/PID/stat field 22): exact and
    the same for every reader, unlike a wall-clock start time derived from the boot time."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read()
        return int(stat[stat.rindex(b")") + 2 :].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def pid_record(pid: int | None = None, pgid: int | None = None) -> dict[str, object]:
    """What `wrapper.pid` holds for the process `pid` (default: this one)."""
    import psutil

    proc = psutil.Process(pid)
    return {
        "pid": proc.pid,
        "create_time": proc.create_time(),
        "start_ticks": start_ticks(proc.pid),
        "pgid": pgid,
    }


def lock_path(run_dir: Path) -> Path:
    return run_dir / LOCK


def _lock_new(run_dir: Path) -> int:
    fd = os.open(lock_path(run_dir), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise
    return fd


def create_owned(runs_dir: Path, run_id: str) -> Path:
    """Make `runs_dir/run_id` with its lock held by this process (FileExistsError if taken).
    The directory appears only once the lock is held: made hidden, locked, then renamed."""
    final = runs_dir / run_id
    hidden = runs_dir / f".new-{run_id}-{os.getpid()}"
    hidden.mkdir()
    try:
        fd = _lock_new(hidden)
    except BaseException:
        with contextlib.suppress(OSError):
            hidden.rmdir()
        raise
    try:
        if final.exists():
            raise FileExistsError(errno.EEXIST, "run directory exists", str(final))
        # Onto an existing directory this fails (it is never empty: it holds its lock).
        os.rename(hidden, final)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            lock_path(hidden).unlink()
            hidden.rmdir()
        raise
    _held[str(final)] = fd
    return final


def owned_fd(run_dir: Path) -> int | None:
    """The descriptor of the lock this process holds for `run_dir`, if it holds it."""
    return _held.get(str(run_dir))


def let_go(run_dir: Path) -> None:
    """Close this process's descriptor of the lock. Never unlock: a process it was handed to
    (the wrapper) shares the lock through the same open file and keeps it held."""
    fd = _held.pop(str(run_dir), None)
    if fd is not None:
        with contextlib.suppress(OSError):
            os.close(fd)


def take(run_dir: Path, wait_s: float = 0.5) -> bool:
    """Hold the lock of an existing run (a flow resumed, a tracker restarted): False if a live
    process holds it. Readers hold it shared for an instant, so a few tries are allowed."""
    if owned_fd(run_dir) is not None:
        return True
    deadline = time.monotonic() + wait_s
    while True:
        try:
            _held[str(run_dir)] = _lock_new(run_dir)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.01)


def adopt_inherited(run_dir: Path) -> bool:
    """In a process started to hold a run (wrapper, tracker): keep the descriptor its starter
    handed over, or take the lock if none was (a run directory of an older proctor has no
    lock file: nothing to hold). False if another live process holds it."""
    text = os.environ.pop(FD_ENV, None)
    if text:
        with contextlib.suppress(ValueError, OSError):
            fd = int(text)
            os.set_inheritable(fd, False)  # never into the command it starts
            _held[str(run_dir)] = fd
            return True
    if not lock_path(run_dir).exists():
        return True
    return take(run_dir)


def held(run_dir: Path) -> bool | None:
    """Whether a live process holds the run (None: the directory has no lock file, as runs of
    an older proctor and a far run's local placeholder do)."""
    try:
        fd = os.open(lock_path(run_dir), os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return None
    finally:
        os.close(fd)  # closing drops the shared lock if it was taken
    return False


__all__ = [
    "FD_ENV",
    "LOCK",
    "adopt_inherited",
    "create_owned",
    "held",
    "let_go",
    "owned_fd",
    "pid_record",
    "start_ticks",
    "take",
]

"""Ending a run directory, the same way for every kind (command, server, bench, flow, sweep):
the pieces record/recorder.py (`Recorder.finish`) puts together.

The order is the evidence's: the exit status first (atomically), then the final record, then
manifest.sha256 over everything, and the store row last, with a bounded wait, so a locked
store never delays or loses the rest. The run wrapper (which imports no pydantic) uses the
same pieces, so this module must not import pydantic either.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

from proctor.record.exitfile import REASONS
from proctor.record.rundir import RunDir, write_atomic


def iso_at(epoch: float) -> str:
    """Local time with milliseconds and the UTC offset: every timestamp of a record has this
    form, so two of them compare as text in the order they happened."""
    lt = time.localtime(epoch)
    frac = f"{epoch % 1:.3f}"[1:]
    offset = time.strftime("%z", lt)
    tz = f"{offset[:3]}:{offset[3:]}" if offset else "+00:00"
    return time.strftime("%Y-%m-%dT%H:%M:%S", lt) + frac + tz


def now_iso() -> str:
    return iso_at(time.time())


def exit_code_text(
    code: int,
    signal: str | None = None,
    reason: str | None = None,
    command: tuple[int, str | None] | None = None,
) -> str:
    """The `exit_code` file: `CODE [SIGNAME]` when it is the command's own status (`0`,
    `3`, `143 SIGTERM`); `CODE REASON [CMDCODE [CMDSIG]]` when proctor decided it (`4 timeout
    143 SIGTERM`, `130 stopped 0`): the first word is always the run's status, so a reader of
    the first word alone never takes a stopped or timed-out run for a success."""
    words = [str(code)]
    if reason:
        words.append(reason)
        if command is not None:
            words += [str(command[0]), *([command[1]] if command[1] else [])]
    elif signal:
        words.append(signal)
    return " ".join(words) + "\n"


def write_exit_code(
    run: RunDir,
    code: int,
    signal: str | None = None,
    reason: str | None = None,
    command: tuple[int, str | None] | None = None,
) -> None:
    """`exit_code`, atomically: a reader sees no file or the whole status, never half."""
    write_atomic(run.exit_code_path, exit_code_text(code, signal, reason, command))


def seal_run(run: RunDir, store_path: str | Path | None, who: str) -> None:
    """manifest.sha256 over every artifact, then the store row (bounded; pending if locked)."""
    from proctor.record.manifest import write_run_manifest
    from proctor.store.db import index_quietly

    with contextlib.suppress(OSError):
        write_run_manifest(run)
    index_quietly(store_path, run.path, who)


__all__ = ["REASONS", "exit_code_text", "now_iso", "seal_run", "write_exit_code"]

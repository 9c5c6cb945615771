"""Read a result file with bounded memory and time, whatever it is.

`results parse` may be handed a 2 GB log without newlines, /dev/zero, or a pipe that never
ends. A regular file larger than the cap is read from its end (the summary block of a
benchmark log is at the end); a stream is read until it ends, the cap, or the time limit.
Whatever was not read is said in `Bounded.cut`, never silently dropped.
"""

from __future__ import annotations

import os
import select
import stat
import time
from dataclasses import dataclass
from pathlib import Path

from proctor.errors import UsageError

#: The most bytes of one input proctor reads (env PROCTOR_RESULTS_MAX_BYTES overrides).
MAX_BYTES = 64 * 1024 * 1024
#: A stream (pipe, FIFO, device) is read for at most this long.
MAX_STREAM_SECONDS = 30.0
_CHUNK = 1024 * 1024


@dataclass
class Bounded:
    data: bytes
    cut: str | None = None  # what was not read, in words; None when everything was


def max_bytes() -> int:
    raw = os.environ.get("PROCTOR_RESULTS_MAX_BYTES", "")
    return int(raw) if raw.isdigit() and int(raw) > 0 else MAX_BYTES


def read_bounded(
    path: Path, limit: int | None = None, seconds: float = MAX_STREAM_SECONDS
) -> Bounded:
    cap = limit or max_bytes()
    try:
        # Non-blocking: a FIFO without a writer must not hang the open.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as error:
        raise UsageError(f"cannot read {path}: {error.strerror}", hint="check the path") from None
    try:
        info = os.fstat(fd)
        if stat.S_ISREG(info.st_mode):
            return _regular(fd, info.st_size, cap)
        return _stream(fd, cap, seconds)
    except OSError as error:
        raise UsageError(f"cannot read {path}: {error.strerror}", hint="check the path") from None
    finally:
        os.close(fd)


def _regular(fd: int, size: int, cap: int) -> Bounded:
    if size <= cap:
        return Bounded(_read_exactly(fd, 0, size))
    head = os.pread(fd, 64, 0).lstrip()
    if head[:1] in (b"{", b"["):
        raise UsageError(
            f"the result JSON is {size:,} bytes, more than the {cap:,} bytes proctor reads",
            hint="set PROCTOR_RESULTS_MAX_BYTES to read more, or give the summary file",
        )
    start = size - cap
    return Bounded(
        _read_exactly(fd, start, cap),
        cut=f"read only the last {cap:,} of {size:,} bytes; the first {start:,} were not read",
    )


def _read_exactly(fd: int, offset: int, count: int) -> bytes:
    parts: list[bytes] = []
    while count > 0:
        chunk = os.pread(fd, min(_CHUNK, count), offset)
        if not chunk:
            break
        parts.append(chunk)
        offset += len(chunk)
        count -= len(chunk)
    return b"".join(parts)


def _stream(fd: int, cap: int, seconds: float) -> Bounded:
    buf = bytearray()
    deadline = time.monotonic() + seconds
    while len(buf) < cap:
        left = deadline - time.monotonic()
        if left <= 0:
            cut = f"stopped reading after {seconds:g} s: the input did not end"
            return Bounded(bytes(buf), cut=cut)
        ready, _, _ = select.select([fd], [], [], min(left, 1.0))
        if not ready:
            continue
        try:
            chunk = os.read(fd, min(_CHUNK, cap - len(buf)))
        except BlockingIOError:
            continue
        if not chunk:
            return Bounded(bytes(buf))
        buf.extend(chunk)
    return Bounded(bytes(buf), cut=f"stopped reading after {cap:,} bytes: the input did not end")

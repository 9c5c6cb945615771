"""Incremental log scanning: read only new bytes, find fault lines, keep a tail.

Each followed file keeps an open descriptor and a byte offset. A poll reads from the offset to
the current end (O(new bytes)), keeps an unfinished last line for the next poll, restarts at 0
when the file shrinks (truncation), and switches to the new file when the path's inode changes
(rotation) after draining what was left in the old one. Patterns are matched as bytes over whole
chunks, so clean text costs one regex scan, not a Python loop per line.

`LogFollower` polls a scanner from a background thread every ~0.1 s, so a fault is seen within a
second of its line being written, whatever the caller's decision interval.

The tail shown to a user on a failure leaves out lines matching `tail_skip`: the monitors pass
the access lines of proctor's own requests (`GET /metrics`, `GET /health`, see `own_requests`),
which otherwise fill a drain's tail with its scrapes. Faults, markers and observers still see
every line.
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from proctor.errors import ConfigError
from proctor.monitors.periodic import Periodic

#: Read at most this much per file per poll, so one huge burst cannot stall the follower.
CHUNK_BYTES = 8 * 1024 * 1024
#: An unfinished line longer than this is treated as a line of its own.
MAX_LINE_BYTES = 64 * 1024
#: Tail lines and fault lines keep at most this many bytes each (a 200 MB line is not printed):
#: the rest is replaced by a note saying how much was cut.
KEEP_LINE_BYTES = 2048


def clip_line(raw: bytes, keep: int = KEEP_LINE_BYTES) -> str:
    """`raw` decoded, cut to `keep` bytes with a note of what was cut."""
    if len(raw) <= keep:
        return raw.decode(errors="replace").rstrip("\r")
    head = raw[:keep].decode(errors="ignore")
    return f"{head} [... {len(raw) - keep:,} more bytes of this line cut]"


@dataclass(frozen=True)
class LogMatch:
    """One fault line: where it was, what it said, and which pattern found it."""

    path: str
    line_no: int  # 1-based, counted from where scanning began (see `FileState.line_base`)
    offset: int  # byte offset of the line's start in the file
    line: str
    pattern: str
    seen_at: float  # time.time() when the scanner read it

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


@dataclass
class FileState:
    path: Path
    fd: int | None = None
    inode: tuple[int, int] | None = None  # (st_dev, st_ino)
    offset: int = 0
    line_no: int = 0  # complete lines consumed so far
    line_base: str = "file start"  # or "scan start" when started at the end of a reused log
    partial: bytes = b""
    bytes_read: int = 0
    rotations: int = 0
    truncations: int = 0
    tail: deque[str] = field(default_factory=lambda: deque(maxlen=200))
    markers: dict[str, int] = field(default_factory=dict)


def own_requests(paths: Iterable[str]) -> re.Pattern[bytes] | None:
    """Access-log lines of GET/HEAD requests to `paths` (proctor's own probes and scrapes):
    `"GET /metrics HTTP/1.1" 200` as uvicorn (vLLM, SGLang) and aiohttp print them."""
    wanted = sorted({p for p in paths if p})
    if not wanted:
        return None
    alternatives = b"|".join(re.escape(p.encode()) for p in wanted)
    return re.compile(rb'"(?:GET|HEAD) (?:' + alternatives + rb')(?:\?[^" ]*)? HTTP/[0-9.]+"')


def _last_lines(data: bytes, count: int, skip: re.Pattern[bytes] | None) -> list[bytes]:
    """The last `count` complete lines of `data` that `skip` does not match; only lines from
    the end are looked at until enough are kept."""
    body = data.rstrip(b"\n")
    if skip is None:
        return body.rsplit(b"\n", count)[-count:]
    kept: list[bytes] = []
    end = len(body)
    while end > 0 and len(kept) < count:
        start = body.rfind(b"\n", 0, end) + 1
        line = body[start:end]
        if not skip.search(line):
            kept.append(line)
        end = start - 1
    kept.reverse()
    return kept


def compile_patterns(patterns: Iterable[str]) -> list[tuple[str, re.Pattern[bytes]]]:
    """Compile text patterns into byte regexes; a bad pattern is a config error."""
    compiled: list[tuple[str, re.Pattern[bytes]]] = []
    for pattern in patterns:
        try:
            compiled.append((pattern, re.compile(pattern.encode())))
        except re.error as exc:
            raise ConfigError(
                f"invalid log pattern {pattern!r}: {exc}",
                hint="patterns are Python regular expressions; escape literal brackets",
            ) from exc
    return compiled


def _combined(compiled: Sequence[tuple[str, re.Pattern[bytes]]]) -> re.Pattern[bytes] | None:
    if not compiled:
        return None
    return re.compile(b"|".join(b"(?:" + rx.pattern + b")" for _, rx in compiled))


class LogScanner:
    """Offset-remembering scanner over several files. Not thread-safe; see `LogFollower`."""

    def __init__(
        self,
        fault_patterns: Iterable[str] = (),
        *,
        marker_patterns: Iterable[str] = (),
        tail_lines: int = 200,
        max_matches: int = 1000,
        observers: Sequence[Callable[[str, bytes], None]] = (),
        tail_skip: re.Pattern[bytes] | None = None,
    ) -> None:
        # Observers see every chunk of complete lines once (path, bytes), e.g. answer statuses.
        self._observers = list(observers)
        self._faults = compile_patterns(fault_patterns)
        self._fault_any = _combined(self._faults)
        self._markers = compile_patterns(marker_patterns)
        self._tail_lines = tail_lines
        self._tail_skip = tail_skip  # lines left out of the tail (proctor's own requests)
        self._files: dict[str, FileState] = {}
        self.matches: list[LogMatch] = []
        self._max_matches = max_matches

    # -- files -----------------------------------------------------------------------------
    def add(self, path: str | os.PathLike[str], *, from_end: bool = False) -> None:
        """Follow `path`. `from_end`: skip what a reused log already holds (stale faults)."""
        p = Path(path)
        key = str(p)
        if key in self._files:
            return
        state = FileState(path=p, tail=deque(maxlen=self._tail_lines))
        state.markers = {name: 0 for name, _ in self._markers}
        self._files[key] = state
        self._open(state)
        if from_end and state.fd is not None:
            state.offset = os.fstat(state.fd).st_size
            state.line_base = "scan start"

    @property
    def paths(self) -> list[str]:
        return list(self._files)

    def state(self, path: str | os.PathLike[str]) -> FileState:
        return self._files[str(Path(path))]

    def close(self) -> None:
        for state in self._files.values():
            self._close(state)

    def _open(self, state: FileState) -> None:
        try:
            fd = os.open(state.path, os.O_RDONLY)
        except FileNotFoundError:
            return  # not written yet: picked up when it appears
        except OSError:
            return  # unreadable for now; retried each poll
        st = os.fstat(fd)
        state.fd = fd
        state.inode = (st.st_dev, st.st_ino)

    @staticmethod
    def _close(state: FileState) -> None:
        if state.fd is not None:
            os.close(state.fd)
            state.fd = None

    # -- polling ---------------------------------------------------------------------------
    def poll(self) -> list[LogMatch]:
        """Read what is new in every file; return the fault matches found in it."""
        found: list[LogMatch] = []
        for state in self._files.values():
            found.extend(self._poll_file(state))
        if found and len(self.matches) < self._max_matches:
            self.matches.extend(found[: self._max_matches - len(self.matches)])
        return found

    def _poll_file(self, state: FileState) -> list[LogMatch]:
        found: list[LogMatch] = []
        if state.fd is None:
            self._open(state)
            if state.fd is None:
                return found
        found.extend(self._read_available(state))
        # Rotation: the path now names another file. Drain the old one (done above), switch.
        try:
            st = os.stat(state.path)
            current: tuple[int, int] | None = (st.st_dev, st.st_ino)
        except OSError:
            current = None
        if current is not None and current != state.inode:
            self._flush_partial(state, found)
            self._close(state)
            state.offset = 0
            state.rotations += 1
            state.line_base = "file start"
            self._open(state)
            if state.fd is not None:
                found.extend(self._read_available(state))
        return found

    def _read_available(self, state: FileState) -> list[LogMatch]:
        assert state.fd is not None
        found: list[LogMatch] = []
        size = os.fstat(state.fd).st_size
        if size < state.offset:  # truncated in place (e.g. `> log`): start again at 0
            state.truncations += 1
            state.offset = 0
            state.partial = b""
            state.line_base = "file start"
        while state.offset < size:
            chunk = os.pread(state.fd, min(CHUNK_BYTES, size - state.offset), state.offset)
            if not chunk:
                break
            start_offset = state.offset - len(state.partial)
            state.offset += len(chunk)
            state.bytes_read += len(chunk)
            data = state.partial + chunk
            cut = data.rfind(b"\n") + 1
            if cut == 0 and len(data) > MAX_LINE_BYTES:
                cut = len(data)  # one enormous unfinished line: take it as a line
            complete, state.partial = data[:cut], data[cut:]
            if complete:
                self._consume(state, complete, start_offset, found)
        return found

    def _flush_partial(self, state: FileState, found: list[LogMatch]) -> None:
        if state.partial:
            base = state.offset - len(state.partial)
            data, state.partial = state.partial + b"\n", b""
            self._consume(state, data, base, found)

    def _consume(
        self, state: FileState, data: bytes, base_offset: int, found: list[LogMatch]
    ) -> None:
        now = time.time()
        first_line_no = state.line_no
        if self._fault_any is not None and self._fault_any.search(data):
            for m in self._fault_any.finditer(data):
                line_start = data.rfind(b"\n", 0, m.start()) + 1
                line_end = data.find(b"\n", m.end())
                if line_end < 0:
                    line_end = len(data)
                if (
                    found
                    and found[-1].offset == base_offset + line_start
                    and found[-1].path == str(state.path)
                ):
                    continue  # two patterns on one line: report the line once
                raw = data[line_start:line_end]
                name = next((p for p, rx in self._faults if rx.search(raw)), "?")
                found.append(
                    LogMatch(
                        path=str(state.path),
                        line_no=first_line_no + data.count(b"\n", 0, line_start) + 1,
                        offset=base_offset + line_start,
                        line=clip_line(raw),
                        pattern=name,
                        seen_at=now,
                    )
                )
        for name, rx in self._markers:
            state.markers[name] += sum(1 for _ in rx.finditer(data))
        for observe in self._observers:
            observe(str(state.path), data)
        state.line_no += data.count(b"\n")
        # Tail: only the last lines of the chunk are ever decoded.
        lines = _last_lines(data, self._tail_lines, self._tail_skip)
        state.tail.extend(clip_line(line) for line in lines)

    # -- views -----------------------------------------------------------------------------
    def tail(self, path: str | os.PathLike[str] | None = None, lines: int = 30) -> list[str]:
        """The last `lines` complete lines of one file (default: the first added), plus any
        unfinished line."""
        if not self._files:
            return []
        state = (
            self._files[str(Path(path))] if path is not None else next(iter(self._files.values()))
        )
        out = list(state.tail)
        if state.partial and not (self._tail_skip and self._tail_skip.search(state.partial)):
            out.append(clip_line(state.partial))
        return out[-lines:]

    def tails(self, lines: int = 30) -> dict[str, list[str]]:
        return {key: self.tail(key, lines) for key in self._files}

    def marker_count(self, path: str | os.PathLike[str] | None = None) -> int:
        """Total marker lines seen (in one file, or in all)."""
        states = [self._files[str(Path(path))]] if path is not None else self._files.values()
        return sum(sum(s.markers.values()) for s in states)

    def bytes_read(self, path: str | os.PathLike[str] | None = None) -> int:
        states = [self._files[str(Path(path))]] if path is not None else self._files.values()
        return sum(s.bytes_read for s in states)

    @property
    def has_markers(self) -> bool:
        return bool(self._markers)


class LogFollower(Periodic):
    """Polls a `LogScanner` from a daemon thread; `fault_event` is set on the first match."""

    def __init__(
        self,
        scanner: LogScanner,
        *,
        interval_s: float = 0.1,
        on_match: Callable[[list[LogMatch]], None] | None = None,
    ) -> None:
        super().__init__(interval_s, thread_name="proctor-logscan")
        self.scanner = scanner
        self.fault_event = threading.Event()
        self._on_match = on_match
        self._lock = threading.Lock()
        self._pending: list[LogMatch] = []
        self.error: BaseException | None = None

    def stop(self) -> None:
        self._join_thread(timeout=5)
        self.poll_now()  # a last read so nothing written before stop is missed

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.poll_now()
            except Exception as exc:  # keep the error for the runner; never die silently
                self.error = exc
            self._stop.wait(self.interval_s)

    def poll_now(self) -> list[LogMatch]:
        """Read now (from any thread) and return matches not yet taken."""
        with self._lock:
            found = self.scanner.poll()
            if found:
                self._pending.extend(found)
                self.fault_event.set()
        if found and self._on_match is not None:
            self._on_match(found)
        return found

    def take_matches(self) -> list[LogMatch]:
        """Matches found since the last call (for the decision loop)."""
        with self._lock:
            out, self._pending = self._pending, []
            return out

    def add(self, path: str | os.PathLike[str], *, from_end: bool = False) -> None:
        with self._lock:
            self.scanner.add(path, from_end=from_end)

    def tails(self, lines: int = 30) -> dict[str, list[str]]:
        with self._lock:
            return self.scanner.tails(lines)

    def marker_count(self, path: str | os.PathLike[str] | None = None) -> int:
        with self._lock:
            return self.scanner.marker_count(path)

    def bytes_read(self, path: str | os.PathLike[str] | None = None) -> int:
        with self._lock:
            return self.scanner.bytes_read(path)


def wait_until(predicate: Callable[[], bool], timeout_s: float, step_s: float = 0.02) -> bool:
    """Small helper for callers and tests: poll `predicate` until true or timeout."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step_s)
    return predicate()

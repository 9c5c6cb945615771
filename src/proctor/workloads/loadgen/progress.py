"""Live progress that polls counters, so the hot path only bumps ints.

On a terminal: a rich bar on stderr with requests done, failed and the request rate. Anywhere
else (a supervised run's log, a pipe): a plain line every `log_every_s` seconds and one at the
end of each phase, so a detached bench's log grows while it runs:

    [bench] benchmark: 120/400 done, 3 failed, 12.5 req/s, 9.6s
    [bench] benchmark: 130/400 done, 13 failed (10 timed out), 11.0 req/s, 11.8s

"timed out": failed requests the client gave up on without an answer (a part of "failed");
the drain reads them as no answer (a hang's sign), the rest of "failed" as error answers.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import TextIO

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)


@dataclass
class _Phase:
    name: str
    total: int
    get_done: Callable[[], int]
    get_failed: Callable[[], int]
    base_done: int
    base_failed: int
    started: float
    task: TaskID | None = None
    get_timed_out: Callable[[], int] = lambda: 0
    base_timed_out: int = 0

    def counts(self) -> tuple[int, int]:
        return self.get_done() - self.base_done, self.get_failed() - self.base_failed

    def line(self) -> str:
        done, failed = self.counts()
        timed_out = self.get_timed_out() - self.base_timed_out
        took = time.monotonic() - self.started
        rate = done / took if took > 0 else 0.0
        gave_up = f" ({timed_out} timed out)" if timed_out else ""
        return (
            f"[bench] {self.name}: {done}/{self.total} done, {failed} failed{gave_up}, "
            f"{rate:.1f} req/s, {took:.1f}s"
        )


class PollingProgress:
    def __init__(
        self,
        enabled: bool,
        interval: float = 0.25,
        *,
        log_every_s: float = 0.0,
        stream: TextIO | None = None,
        console: Console | None = None,
        on_phase: Callable[[str], None] | None = None,
    ) -> None:
        self.interval = interval
        # Told when a phase begins, display or not (the bench's telemetry marks its window).
        self.on_phase = on_phase
        self.log_every_s = log_every_s
        self.stream = stream if stream is not None else sys.stderr
        console = console or Console(stderr=True)
        # The bar only where it can be live; elsewhere it would print once, at the end.
        self.bar = enabled and console.is_terminal
        self.lines = log_every_s > 0 and not self.bar
        self._console = console
        self._progress: Progress | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._phase: _Phase | None = None
        self._next_line = 0.0

    def __enter__(self) -> PollingProgress:
        if self.bar:
            self._progress = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[failed]} failed"),
                TextColumn("{task.fields[rate]}"),
                TimeElapsedColumn(),
                TimeRemainingColumn(),
                console=self._console,
                transient=False,
                refresh_per_second=4,
            )
            self._progress.start()
        if self.bar or self.lines:
            self._thread = threading.Thread(target=self._poll, daemon=True)
            self._thread.start()
        return self

    def phase(
        self,
        description: str,
        total: int,
        get_count: Callable[[], int],
        get_failed: Callable[[], int] | None = None,
        get_timed_out: Callable[[], int] | None = None,
    ) -> None:
        """Start tracking a new phase (warmup, benchmark); the previous one is completed."""
        if self.on_phase is not None:
            self.on_phase(description)
        if not (self.bar or self.lines):
            return
        self._finish_phase()
        failed = get_failed or (lambda: 0)
        timed_out = get_timed_out or (lambda: 0)
        phase = _Phase(
            description,
            total,
            get_count,
            failed,
            get_count(),
            failed(),
            time.monotonic(),
            get_timed_out=timed_out,
            base_timed_out=timed_out(),
        )
        if self._progress is not None:
            phase.task = self._progress.add_task(description, total=total, failed=0, rate="")
        self._next_line = time.monotonic() + self.log_every_s
        self._phase = phase

    def _update(self, phase: _Phase) -> None:
        if self._progress is not None and phase.task is not None:
            done, failed = phase.counts()
            took = time.monotonic() - phase.started
            rate = f"{done / took:.1f} req/s" if took > 0 else ""
            self._progress.update(phase.task, completed=done, failed=failed, rate=rate)

    def _write_line(self, phase: _Phase) -> None:
        try:
            self.stream.write(phase.line() + "\n")
            self.stream.flush()
        except (OSError, ValueError):
            self.lines = False  # the log went away; the benchmark goes on

    def _finish_phase(self) -> None:
        phase, self._phase = self._phase, None
        if phase is None:
            return
        self._update(phase)
        if self.lines:
            self._write_line(phase)

    def _poll(self) -> None:
        while not self._stop.wait(self.interval):
            phase = self._phase
            if phase is None:
                continue
            self._update(phase)
            if self.lines and time.monotonic() >= self._next_line:
                self._next_line = time.monotonic() + self.log_every_s
                self._write_line(phase)

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(2)
        self._finish_phase()
        if self._progress is not None:
            self._progress.stop()

"""A rich progress bar on stderr that polls a counter, so the hot path only bumps an int."""

from __future__ import annotations

import threading
from collections.abc import Callable
from types import TracebackType

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


class PollingProgress:
    def __init__(self, enabled: bool, interval: float = 0.25) -> None:
        self.enabled = enabled
        self.interval = interval
        self._progress: Progress | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._phase: tuple[TaskID, Callable[[], int], int] | None = None

    def __enter__(self) -> PollingProgress:
        if self.enabled:
            self._progress = Progress(
                TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                TimeElapsedColumn(), TimeRemainingColumn(),
                console=Console(stderr=True), transient=False, refresh_per_second=4,
            )
            self._progress.start()
            self._thread = threading.Thread(target=self._poll, daemon=True)
            self._thread.start()
        return self

    def phase(self, description: str, total: int, get_count: Callable[[], int]) -> None:
        """Start tracking a new phase (warmup, benchmark); the previous one is completed."""
        if self._progress is None:
            return
        self._finish_phase()
        task = self._progress.add_task(description, total=total)
        self._phase = (task, get_count, get_count())

    def _finish_phase(self) -> None:
        if self._progress is not None and self._phase is not None:
            task, get, base = self._phase
            self._progress.update(task, completed=get() - base)
            self._phase = None

    def _poll(self) -> None:
        while not self._stop.wait(self.interval):
            phase = self._phase
            if phase is not None and self._progress is not None:
                task, get, base = phase
                self._progress.update(task, completed=get() - base)

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(2)
        self._finish_phase()
        if self._progress is not None:
            self._progress.stop()

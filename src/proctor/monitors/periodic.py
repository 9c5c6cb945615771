"""What the background samplers share: a daemon thread that calls `_run`, started and stopped
once, and the context manager around it. Each sampler keeps its own loop and says what to do
just before the thread starts and just after it ends (a first or a last sample)."""

from __future__ import annotations

import threading
from typing import TypeVar

P = TypeVar("P", bound="Periodic")


class Periodic:
    """A daemon thread running `self._run()`; `_run` should return once `self._stop` is set."""

    def __init__(self, interval_s: float, *, thread_name: str) -> None:
        self.interval_s = interval_s
        self._thread_name = thread_name
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self: P) -> P:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> object:
        self._start_thread()
        return None

    def stop(self) -> None:
        self._join_thread(timeout=5)

    def _run(self) -> None:
        raise NotImplementedError

    def _start_thread(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=self._thread_name, daemon=True)
            self._thread.start()

    def _join_thread(self, *, timeout: float) -> bool:
        """Ask the loop to end and wait for it; False when no thread was running."""
        self._stop.set()
        if self._thread is None:
            return False
        self._thread.join(timeout=timeout)
        self._thread = None
        return True

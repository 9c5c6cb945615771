"""SIGTERM as one stop: the first raises, the later ones are only noted.

A supervised run's command gets SIGTERM twice at its time limit, milliseconds apart: once from
the wrapper's deadline guard and once from its kill ladder (supervise/wrapper.py). A stop that
restored the default handler before it had saved its figures died of the second one, and its
metrics.json said "running" although the run had been stopped (CI, stop 31). Here the
handling of a stop runs under this handler to its end; the kill ladder's SIGKILL still bounds
it.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from types import FrameType


class SigtermStop:
    """The handler: raises `error()` at the first SIGTERM while armed; notes every SIGTERM."""

    def __init__(self, error: Callable[[], BaseException]) -> None:
        self.error = error
        self.armed = True
        self.asked = False  # a SIGTERM came, raised or not

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        self.asked = True
        if self.armed:
            self.armed = False
            raise self.error()

    def disarm(self) -> None:
        """From here a SIGTERM is only noted: what follows (saving, ending a record) runs out."""
        self.armed = False


@contextlib.contextmanager
def sigterm_stop(error: Callable[[], BaseException]) -> Iterator[SigtermStop]:
    """For the block, SIGTERM is a `SigtermStop` raising `error()` (main thread only: only it
    may set handlers; elsewhere the handler is returned but not installed)."""
    handler = SigtermStop(error)
    if threading.current_thread() is not threading.main_thread():
        yield handler
        return
    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield handler
    finally:
        signal.signal(signal.SIGTERM, previous)


__all__ = ["SigtermStop", "sigterm_stop"]

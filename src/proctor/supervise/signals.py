"""Closing the window between starting a run and being ready to stop it.

A controller that starts a wrapper and then installs its Ctrl-C/SIGTERM handler has a
window in which a signal kills the controller and leaves the run going. `deferred_stops()`
blocks SIGINT and SIGTERM for that window: a signal that arrives is held pending by the
kernel and delivered when the block ends, by which time the handler knows the run.
The wrapper inherits the blocked mask across exec, so a stop sent to it before it has
set up its own handling is held too, never lost.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator

STOP_SIGNALS = frozenset({signal.SIGINT, signal.SIGTERM})


@contextlib.contextmanager
def deferred_stops() -> Iterator[None]:
    """Hold SIGINT/SIGTERM pending inside the block; restore the previous mask after it."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


__all__ = ["STOP_SIGNALS", "deferred_stops"]

"""The event loop the client runs on: uvloop when installed (`proctor[fast]`), else asyncio.

uvloop's C transports and timers roughly halve the per-chunk cost of the event loop, which
is most of what one client core spends at high concurrency (see bench/NOTES.md, Capacity).
PROCTOR_EVENT_LOOP=asyncio forces the standard loop (the bench's before/after row).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
from collections.abc import Coroutine, Iterator
from typing import Any, TypeVar

T = TypeVar("T")
ENV = "PROCTOR_EVENT_LOOP"


def loop_name() -> str:
    """ "uvloop" or "asyncio": the loop run() will use."""
    if os.environ.get(ENV, "auto").strip().lower() == "asyncio":
        return "asyncio"
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return "asyncio"
    return "uvloop"


def run(coro: Coroutine[Any, Any, T]) -> T:
    """asyncio.run(coro) on the fastest available loop."""
    box: list[T] = []

    async def main() -> None:
        # The main task ends with None, not coro's result: when asyncio.run puts SIGINT's
        # handler back, the signal module formats the old handler (which holds the task)
        # with repr, and the task's repr holds its result's: a bench's records took 35 ms
        # there, twice a run, growing with the records (bench/NOTES.md, Timing error).
        box.append(await coro)

    if loop_name() == "uvloop":
        import uvloop

        uvloop.run(main())
    else:
        asyncio.run(main())
    return box[0]


GC_ENV = "PROCTOR_GC"  # "on": keep the cyclic collector running during the measured part


@contextlib.contextmanager
def quiet_gc() -> Iterator[None]:
    """No cyclic garbage collection during the measured part.

    A full collection over the records gathered so far stopped the loop for 90-160 ms at
    2,000 req/s (docs/bench.md, Rate), and every timestamp taken after it is late by that
    much. The hot path makes no reference cycles (a collection after 4,000 requests finds 0
    unreachable objects), so memory stays bounded by reference counting; what is there before
    is collected and frozen, and the collector runs again after.
    """
    if os.environ.get(GC_ENV, "").strip().lower() == "on" or not gc.isenabled():
        yield
        return
    gc.collect()
    gc.freeze()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
        gc.unfreeze()

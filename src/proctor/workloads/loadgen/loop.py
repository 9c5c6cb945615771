"""The event loop the client runs on: uvloop when installed (`proctor[fast]`), else asyncio.

uvloop's C transports and timers roughly halve the per-chunk cost of the event loop, which
is most of what one client core spends at high concurrency (see docs/bench.md, Capacity).
PROCTOR_EVENT_LOOP=asyncio forces the standard loop (the bench's before/after row).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")
ENV = "PROCTOR_EVENT_LOOP"


def loop_name() -> str:
    """"uvloop" or "asyncio": the loop run() will use."""
    if os.environ.get(ENV, "auto").strip().lower() == "asyncio":
        return "asyncio"
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return "asyncio"
    return "uvloop"


def run(coro: Coroutine[Any, Any, T]) -> T:
    """asyncio.run(coro) on the fastest available loop."""
    if loop_name() == "uvloop":
        import uvloop

        return uvloop.run(coro)
    return asyncio.run(coro)

"""Per-request total and idle timeouts, enforced by one periodic check per event loop.

aiohttp's sock_read timeout re-arms a timer on every read and its total timeout arms one per
request; at thousands of chunks per second that is a measurable share of one client core.
Here a read only stores a timestamp; one task per loop wakes every `period` seconds and
cancels the requests past a deadline, which then end as reason "timeout".
A deadline is enforced within `period` of being passed (at most 1 s, an eighth of the limit).
"""

from __future__ import annotations

import asyncio
import time
import weakref


class Flight:
    """One request in flight: its task, start and last read (perf_counter seconds)."""

    __slots__ = ("expired", "last", "start", "task")

    def __init__(self, task: asyncio.Task[object], start: float) -> None:
        self.task, self.start, self.last, self.expired = task, start, start, False


class Deadlines:
    def __init__(self) -> None:
        self.flights: dict[Flight, tuple[float, float]] = {}  # flight -> (total, idle)
        self._task: asyncio.Task[None] | None = None
        self._period = 1.0

    def add(self, total: float, idle: float) -> Flight:
        task = asyncio.current_task()
        assert task is not None, "requests run inside a task"
        flight = Flight(task, time.perf_counter())
        self.flights[flight] = (total, idle)
        period = max(0.01, min(1.0, total / 8, idle / 8))
        running = self._task is not None and not self._task.done()
        self._period = min(self._period, period) if running else period
        if not running:
            self._task = asyncio.get_running_loop().create_task(self._watch())
        return flight

    def remove(self, flight: Flight) -> None:
        self.flights.pop(flight, None)

    async def _watch(self) -> None:
        while self.flights:
            await asyncio.sleep(self._period)
            now = time.perf_counter()
            for f, (total, idle) in list(self.flights.items()):
                if not f.expired and (now - f.start > total or now - f.last > idle):
                    f.expired = True
                    f.task.cancel()
        self._period = 1.0


_per_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Deadlines] = (
    weakref.WeakKeyDictionary()
)


def for_loop() -> Deadlines:
    """The Deadlines of the running loop (created on first use, gone with the loop)."""
    loop = asyncio.get_running_loop()
    d = _per_loop.get(loop)
    if d is None:
        d = _per_loop[loop] = Deadlines()
    return d


def settle(flight: Flight) -> bool:
    """After catching the CancelledError an expiry caused: True when the task may run on
    (False: someone else cancelled it too, so the error must propagate)."""
    uncancel = getattr(flight.task, "uncancel", None)  # Python 3.11+
    return uncancel is None or uncancel() == 0

"""Waiting for a request's send time with sub-millisecond precision.

uvloop's timers (libuv's) count whole milliseconds: `asyncio.sleep` there wakes up to about
1 ms off the intended time, so a paced request's schedule delay had a p99 of ~1.1-1.4 ms at
500-2,000 req/s on quiet cores (bench/NOTES.md, *Timing error*), over issue 23's 1 ms. Here a
wait ends through a timerfd (CLOCK_MONOTONIC, the clock of time.perf_counter, armed with the
absolute due time in nanoseconds) that the event loop watches like a socket: the loop wakes
when the kernel's timer fires, with no millisecond rounding. One timerfd per arrival loop; one
wait at a time (the arrival loop is the only caller). Where timerfd is missing (not Linux,
no libc through ctypes, perf_counter on another clock), a wait is the loop's own timer.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import math
import os
import sys
import time
from collections.abc import Callable, Sequence

_CLOCK_MONOTONIC = 1
_TFD_TIMER_ABSTIME = 1
_TFD_NONBLOCK = os.O_NONBLOCK
_TFD_CLOEXEC = os.O_CLOEXEC


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


def _libc() -> ctypes.CDLL | None:
    if sys.platform != "linux" or time.get_clock_info("perf_counter").implementation != (
        "clock_gettime(CLOCK_MONOTONIC)"
    ):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.timerfd_create.argtypes = [ctypes.c_int, ctypes.c_int]
        libc.timerfd_settime.argtypes = [
            ctypes.c_int,
            ctypes.c_int,
            ctypes.POINTER(_Itimerspec),
            ctypes.c_void_p,
        ]
    except (OSError, AttributeError):
        return None
    return libc


_LIBC = _libc()
_clock = time.perf_counter


class Pacer:
    """`await pacer.run(dues, start)` calls start(i) at time.perf_counter() dues[i] for each i,
    in order, from the event loop's callbacks: the timerfd's, or poke() from a read that finds
    `next_due` past (the raw client's: fasthttp.Conn._readable, and Pool._drain, whose C read
    of a wave goes back to it after any read that finds a send due). A send due while the
    loop works through a row of ready reads so goes before the rest of them, not after: each
    read keeps its kernel stamp however late it is handled, a send has no such stamp (its time
    is when it leaves). start() should send at once (scheduler.spawn: an eager task). The timerfd
    is opened on the first run and closed with close() (or `with Pacer()`)."""

    def __init__(self) -> None:
        self.fd = -1
        self.loop: asyncio.AbstractEventLoop | None = None
        self.spec = _Itimerspec()
        self.broken = _LIBC is None
        self.next_due = math.inf  # the time of the next start() (inf: none)
        self.dues: Sequence[float] = ()
        self.start: Callable[[int], None] = _nothing
        self.i = 0
        self.done: asyncio.Future[None] | None = None
        self.busy = False
        self.later: asyncio.TimerHandle | None = None  # the fallback's timer

    def __enter__(self) -> Pacer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _open(self) -> bool:
        assert _LIBC is not None
        fd = _LIBC.timerfd_create(_CLOCK_MONOTONIC, _TFD_NONBLOCK | _TFD_CLOEXEC)
        if fd < 0:
            self.broken = True
            return False
        loop = asyncio.get_running_loop()
        try:
            loop.add_reader(fd, self._fired)
        except (OSError, NotImplementedError):
            os.close(fd)
            self.broken = True
            return False
        self.fd = fd
        return True

    def _fired(self) -> None:
        with contextlib.suppress(BlockingIOError, InterruptedError):
            os.read(self.fd, 8)
        self.poke()

    async def run(self, dues: Sequence[float], start: Callable[[int], None]) -> None:
        """start(i) at dues[i] (perf_counter seconds, ascending), never before; returns once
        the last was called. One run at a time."""
        self.loop = asyncio.get_running_loop()
        self.dues, self.start, self.i = dues, start, 0
        self.done = self.loop.create_future()
        if not self.broken and self.fd < 0:
            self._open()
        try:
            self.poke()
            await self.done
        finally:
            self.next_due, self.start, self.done = math.inf, _nothing, None
            if self.later is not None:
                self.later.cancel()
                self.later = None

    def poke(self) -> None:
        """Call start() for every due time past, then wait for the next one."""
        done = self.done
        if self.busy or done is None or done.done():
            return
        self.busy = True
        try:
            dues, i, n, start, clock = self.dues, self.i, len(self.dues), self.start, _clock
            while i < n and dues[i] <= clock():
                self.i = i + 1
                start(i)
                i += 1
            if i >= n:
                self.next_due = math.inf
                done.set_result(None)
                return
            self.next_due = due = dues[i]
            self._arm(due)
        except BaseException as e:  # into run(), not the loop's exception handler
            self.next_due = math.inf
            if not done.done():
                done.set_exception(e)
        finally:
            self.busy = False

    def _arm(self, due: float) -> None:
        if self.fd >= 0:
            assert _LIBC is not None
            v = self.spec.it_value
            v.tv_sec, v.tv_nsec = divmod(int(due * 1e9), 1_000_000_000)
            if not _LIBC.timerfd_settime(
                self.fd, _TFD_TIMER_ABSTIME, ctypes.byref(self.spec), None
            ):
                return
        assert self.loop is not None  # no timerfd: the loop's timer (uvloop: whole ms)
        if self.later is not None:
            self.later.cancel()
        self.later = self.loop.call_later(max(0.0, due - _clock()), self._late)

    def _late(self) -> None:
        self.later = None
        if _clock() < self.next_due:  # woke early (millisecond timers): wait the rest
            self._arm(self.next_due)
            return
        self.poke()

    def close(self) -> None:
        if self.fd >= 0:
            assert self.loop is not None
            if not self.loop.is_closed():
                self.loop.remove_reader(self.fd)
            os.close(self.fd)
            self.fd = -1


def _nothing(i: int) -> None:
    return None

"""Waiting for a request's send time with sub-millisecond precision.

uvloop's timers (libuv's) count whole milliseconds: `asyncio.sleep` there wakes up to about
1 ms off the intended time, so a paced request's schedule delay had a p99 of ~1.1-1.4 ms at
500-2,000 req/s on quiet cores (bench/NOTES.md, *Timing error*), over issue 23's 1 ms. Here a
wait ends through a timerfd (CLOCK_MONOTONIC, the clock of time.perf_counter, armed with the
absolute due time in nanoseconds) that the event loop watches like a socket: the loop wakes
when the kernel's timer fires, with no millisecond rounding. One timerfd per arrival loop; one
wait at a time (the arrival loop is the only caller). Where timerfd is missing (not Linux,
no libc through ctypes, perf_counter on another clock), a wait is asyncio.sleep, as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import sys
import time

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


class Pacer:
    """`await pacer.until(due)` returns at time.perf_counter() `due`; one wait at a time.
    The timerfd is opened on the first wait and closed with close() (or `with Pacer()`)."""

    def __init__(self) -> None:
        self.fd = -1
        self.loop: asyncio.AbstractEventLoop | None = None
        self.spec = _Itimerspec()
        self.waiter: asyncio.Future[None] | None = None
        self.broken = _LIBC is None

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
        self.fd, self.loop = fd, loop
        return True

    def _fired(self) -> None:
        with contextlib.suppress(BlockingIOError, InterruptedError):
            os.read(self.fd, 8)
        w = self.waiter
        if w is not None and not w.done():
            w.set_result(None)

    async def until(self, due: float) -> None:
        if due <= time.perf_counter():
            return
        if self.broken or (self.fd < 0 and not self._open()):
            await asyncio.sleep(due - time.perf_counter())
            return
        assert _LIBC is not None and self.loop is not None
        v = self.spec.it_value
        v.tv_sec, v.tv_nsec = divmod(int(due * 1e9), 1_000_000_000)
        if _LIBC.timerfd_settime(self.fd, _TFD_TIMER_ABSTIME, ctypes.byref(self.spec), None):
            await asyncio.sleep(max(0.0, due - time.perf_counter()))
            return
        self.waiter = self.loop.create_future()
        try:
            await self.waiter
        finally:
            self.waiter = None

    def close(self) -> None:
        if self.fd >= 0:
            assert self.loop is not None
            if not self.loop.is_closed():
                self.loop.remove_reader(self.fd)
            os.close(self.fd)
            self.fd = -1

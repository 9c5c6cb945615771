"""When the bytes arrived: kernel receive timestamps on the client's sockets.

A timestamp taken when the event loop gets round to a read is late by however long the ready
socket waited for a busy loop (at concurrency 1000 on one core: p99 tens of ms, issue 23). The
kernel stamps every received segment when it arrives (SO_TIMESTAMPNS, CLOCK_REALTIME); recvmsg
hands back, for TCP, the stamp of the last segment the read copied. Read promptly, one read
holds one server write, so each SSE message gets the time its own bytes arrived, however late
the loop read them. When the loop was so late that a stream's next message had arrived too
(later than one inter-token gap), both are stamped with the later arrival: that token's
ITL reads 0 and the earlier one is late; headroom.summarize counts them from the records.

The stamps are mapped onto time.perf_counter (CLOCK_MONOTONIC, the clock of every other time
in a record) by the offset of the two clocks, read every OFFSET_S: it moves only when the wall
clock is stepped, never by NTP slewing (both clocks slew together).

The kernel stamps only while some socket asks for stamps, and it starts stamping a moment
after the first one asks (a deferred switch, run from a kernel work queue, which a loaded
machine runs late): a pool keeps one socket asking from its start, and opens only once a
loopback TCP segment comes back stamped (or STAMPING_WAIT_S has passed).

Linux only (the option number is asm-generic's, as on x86-64, arm64, riscv and ppc); anywhere
the option is refused or a read comes back without a stamp, the read is stamped when the loop
handled it, as before, and `ReadClock.fallbacks` counts those reads.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import sys
import time
import weakref
from array import array

SO_TIMESTAMPNS = 35  # == SCM_TIMESTAMPNS; not exported by Python's socket module
_TIMESPEC = struct.Struct("@qq")  # 64-bit timespec: tv_sec, tv_nsec
_unpack = _TIMESPEC.unpack_from
_SOL_SOCKET = socket.SOL_SOCKET
# The two clocks' offset changes only when the wall clock is stepped: read it this often.
OFFSET_S = 0.05
ANC_SPACE = socket.CMSG_SPACE(_TIMESPEC.size) if hasattr(socket, "CMSG_SPACE") else 0
# Read delays kept for the percentiles: beyond this many, every other one is dropped and
# only every 2nd (4th, ...) read is kept from then on: memory stays bounded at any rate.
MAX_SAMPLES = 1 << 18
# A stamp more than this before the read is not believed (a clock step between the two).
MAX_BELIEVED_S = 60.0
# How long a pool waits at its start for the kernel's deferred switch to stamping.
STAMPING_WAIT_S = 2.0
CLOCK = "kernel receive timestamp (SO_TIMESTAMPNS) of the read's last segment"
FALLBACK_CLOCK = "time.perf_counter when the event loop handled the read"


def enable(sock: socket.socket) -> bool:
    """Ask the kernel to stamp every segment this socket receives; False where it cannot."""
    if sys.platform != "linux" or not ANC_SPACE:
        return False
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    except OSError:
        return False
    return True


def keep_stamping() -> socket.socket | None:
    """A socket that only asks for stamps, opened before any connection, returned once the
    kernel stamps (stamping_on): the switch is on before the first request is sent, and stays
    on while this is open. Under a CPU hog the deferred switch came after a response's first
    read, which then had no stamp."""
    try:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    except OSError:
        return None
    if not enable(s):
        s.close()
        return None
    global _stamps_seen
    if _stamps_seen is not False:  # a kernel that never stamped is not waited for twice
        _stamps_seen = stamping_on(STAMPING_WAIT_S)
    return s


_stamps_seen: bool | None = None


def stamping_on(wait_s: float = 0.0) -> bool:
    """Whether a loopback TCP segment comes back with the kernel's stamp, trying again every
    millisecond for up to `wait_s` (TCP, because a UDP read without a stamp is given the
    read's own time by the kernel); False where loopback TCP cannot be opened."""
    try:
        with (
            socket.create_server(("127.0.0.1", 0)) as lsock,
            socket.create_connection(lsock.getsockname(), timeout=5) as c,
            lsock.accept()[0] as srv,
        ):
            if not enable(c):
                return False
            deadline = time.monotonic() + wait_s
            while True:
                srv.sendall(b"x")
                _, anc, _, _ = c.recvmsg(1, ANC_SPACE)
                if any(lvl == _SOL_SOCKET and typ == SO_TIMESTAMPNS for lvl, typ, _ in anc):
                    return True
                if time.monotonic() >= deadline:
                    return False
                time.sleep(0.001)
    except OSError:
        return False


class ReadClock:
    """Per event loop: turns a read's ancillary data into its arrival time, and records how
    late the loop read what had arrived (the error a loop-time stamp would have had)."""

    __slots__ = ("delays", "fallbacks", "off", "off_until", "reads", "recording", "stride")

    def __init__(self) -> None:
        self.delays = array("d")
        self.reads = 0
        self.fallbacks = 0
        self.stride = 1
        self.recording = False
        self.off = 0  # CLOCK_REALTIME minus CLOCK_MONOTONIC, ns
        self.off_until = float("-inf")

    def start(self) -> None:
        self.delays = array("d")
        self.reads = self.fallbacks = 0
        self.stride = 1
        self.recording = True

    def stop(self) -> tuple[list[float], int, int]:
        """(sampled read delays in seconds, reads, reads without a kernel stamp)."""
        self.recording = False
        return self.delays.tolist(), self.reads, self.fallbacks

    def arrival(self, ancdata: list[tuple[int, int, bytes]], now: float) -> float:
        """The perf_counter time the read's last segment arrived; `now` when unknown."""
        ts = now
        if ancdata:
            level, kind, data = ancdata[0]  # the only control message asked for
            if kind == SO_TIMESTAMPNS and level == _SOL_SOCKET and len(data) >= 16:
                sec, nsec = _unpack(data)
                if now > self.off_until:  # the clocks' offset, read again every OFFSET_S
                    self.off = clock_offset_ns()
                    self.off_until = now + OFFSET_S
                # Integer nanoseconds: a float of epoch seconds keeps only ~0.24 us.
                t = (sec * 1_000_000_000 + nsec - self.off) * 1e-9
                if t > now - MAX_BELIEVED_S:
                    # min: the two clock reads may straddle the stamp by nanoseconds
                    ts = t if t < now else now
                    if self.recording:
                        self._record(now - ts)
                    return ts
        if self.recording:
            self.fallbacks += 1
            self._record(0.0)
        return ts

    def note(self, now: float, ts: float, stamped: bool) -> None:
        """A read stamped elsewhere (the C read path, _fastread.c), counted as arrival counts
        its reads: how late it was read, or one more read without a stamp."""
        if not stamped:
            self.fallbacks += 1
        self._record(now - ts if stamped else 0.0)

    def note_all(self, delays: bytes, unstamped: int) -> None:
        """The reads of one drain (_fastread.drain): their delays as native doubles (0.0 for
        a read without a stamp), `unstamped` of them without one; kept as note keeps them."""
        got = array("d")
        got.frombytes(delays)
        self.fallbacks += unstamped
        first = self.reads + 1
        self.reads += len(got)
        stride = self.stride
        if stride > 1:  # the reads whose number is a multiple of the stride, as _record
            got = got[(-first) % stride :: stride]
        self.delays.extend(got)
        while len(self.delays) >= MAX_SAMPLES:
            self.delays = array("d", self.delays[::2])
            self.stride *= 2

    def _record(self, delay: float) -> None:
        self.reads += 1
        if self.reads % self.stride == 0:
            d = self.delays
            d.append(delay)
            if len(d) >= MAX_SAMPLES:
                self.delays = array("d", d[::2])
                self.stride *= 2


_per_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, ReadClock] = (
    weakref.WeakKeyDictionary()
)


def clock_offset_ns(tries: int = 3) -> int:
    """CLOCK_REALTIME minus CLOCK_MONOTONIC in ns: the wall read between two monotonic reads,
    from the try whose pair is closest. One bare pair is off by however long the thread was
    preempted between its reads, milliseconds on a loaded machine (a CI flake)."""
    best_gap, best = -1, 0
    for _ in range(tries):
        before = time.perf_counter_ns()
        wall = time.time_ns()
        after = time.perf_counter_ns()
        if best_gap < 0 or after - before < best_gap:
            best_gap, best = after - before, wall - (before + after) // 2
    return best


def for_loop() -> ReadClock:
    """The ReadClock of the running loop (created on first use, gone with the loop)."""
    loop = asyncio.get_running_loop()
    c = _per_loop.get(loop)
    if c is None:
        c = _per_loop[loop] = ReadClock()
    return c

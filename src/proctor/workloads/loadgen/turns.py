"""A closed loop's new requests, spread over the event loop's rounds.

When many streams end together (at concurrency 1000, streams that started together end
together), their lanes wake in one round of the event loop, and each builds and sends its next
request before the loop polls its sockets again: tens of milliseconds of Python at 1000
streams, while the tokens of every other stream wait in the kernel. A read that late can hold
two tokens of a stream, stamped with the later one's arrival: an inter-token gap of 0 beside one
of twice the gap, or a TTFT late by a gap. Past TURNS_PER_ROUND new requests in a round, a lane
waits for the next round (asyncio.sleep(0): the loop polls, and the reads go first). Nothing is
measured later for it: a request's clock starts when it is sent. Closed loops only (rate inf,
multi-turn sessions); a paced request leaves when it is due (pacer.py).
Measured in bench/NOTES.md, *Reads before new requests*.
"""

from __future__ import annotations

import asyncio

# Requests a closed loop starts in one round of the event loop before it polls again: about
# 1-2 ms of Python at 30-60 us a request (bench/NOTES.md, *Reads before new requests*).
TURNS_PER_ROUND = 32


class Turns:
    """The new requests of one closed loop in the current round of its event loop.

    A lane asks `spent()` before it starts a request; when True, it awaits `next_round()`."""

    __slots__ = ("count", "loop", "marked")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.count = 0  # requests started in this round
        self.marked = False  # a reset is queued for the start of the next round

    def spent(self) -> bool:
        """Count a request about to start; True when this round has had its share."""
        if not self.marked:
            # Queued now, it runs before anything this round queues after it: the lanes
            # this round defers, and the wake-ups of the next round's reads.
            self.marked = True
            self.loop.call_soon(self._reset)
        self.count += 1
        return self.count > TURNS_PER_ROUND

    def _reset(self) -> None:
        self.count = 0
        self.marked = False

    async def next_round(self) -> None:
        while True:
            await asyncio.sleep(0)
            if not self.spent():
                return

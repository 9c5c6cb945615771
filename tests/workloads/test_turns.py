"""A closed loop starts at most TURNS_PER_ROUND requests a round of its event loop, so reads
that came meanwhile are taken before the rest (turns.py): on the rate-inf lanes and on the
multi-turn sessions, with uvloop and with asyncio's own loop; every request still goes, once,
and a loop with nothing to read does not stall."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from typing import Any

import pytest

from proctor.workloads.loadgen.client import PlannedRequest
from proctor.workloads.loadgen.config import BenchConfig
from proctor.workloads.loadgen.loop import run as run_loop
from proctor.workloads.loadgen.multiturn import run_conversations
from proctor.workloads.loadgen.records import RequestRecord
from proctor.workloads.loadgen.scheduler import run_requests
from proctor.workloads.loadgen.turns import TURNS_PER_ROUND

pytestmark = pytest.mark.timeout(60)

CFG = BenchConfig(base_url="http://127.0.0.1:9", model="m")


@pytest.fixture(params=["uvloop", "asyncio"])
def loop_kind(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setenv("PROCTOR_EVENT_LOOP", request.param)
    yield request.param


class Rounds:
    """Counts the event loop's rounds: a callback that queues itself again runs once each."""

    def __init__(self) -> None:
        self.n = 0
        self.on = True

    def start(self) -> None:
        asyncio.get_running_loop().call_soon(self._tick)

    def _tick(self) -> None:
        self.n += 1
        if self.on:
            asyncio.get_running_loop().call_soon(self._tick)


def _next_round(req: PlannedRequest) -> Awaitable[None]:
    return asyncio.sleep(0)


class RoundSender:
    """Records the round each request starts in; a request ends when `until(req)` is done.
    By default one round after it starts, so every lane ends together, round after round: the
    case where a closed loop's lanes all wake in one round."""

    path = "rounds"

    def __init__(
        self, rounds: Rounds, until: Callable[[PlannedRequest], Awaitable[None]] = _next_round
    ) -> None:
        self.rounds, self.until = rounds, until
        self.started: list[tuple[int, int]] = []  # (round, request index)

    async def send(
        self,
        cfg: BenchConfig,
        model: str,
        req: PlannedRequest,
        record: RequestRecord,
        count_tokens: Callable[[str], int] | None = None,
    ) -> RequestRecord:
        self.started.append((self.rounds.n, req.index))
        await self.until(req)
        record.success = True
        return record


def _per_round(started: list[tuple[int, int]]) -> int:
    counts: dict[int, int] = {}
    for r, _ in started:
        counts[r] = counts.get(r, 0) + 1
    return max(counts.values())


def _closed(
    sender: RoundSender, n: int, concurrency: int
) -> Coroutine[Any, Any, list[RequestRecord]]:
    reqs = [PlannedRequest(i, "p", 4, 4) for i in range(n)]

    async def main() -> list[RequestRecord]:
        sender.rounds.start()
        try:
            return await run_requests(
                sender, CFG, "m", reqs, concurrency=concurrency, rate=float("inf"), seed=0
            )
        finally:
            sender.rounds.on = False

    return main()


def test_lanes_that_end_together_start_their_next_requests_a_share_a_round(
    loop_kind: str,
) -> None:
    sender = RoundSender(Rounds())
    recs = run_loop(_closed(sender, n=1000, concurrency=200))
    assert [r.index for r in recs] == list(range(1000)) and all(r.success for r in recs)
    assert sorted(i for _, i in sender.started) == list(range(1000))  # each once
    assert _per_round(sender.started) <= TURNS_PER_ROUND


def test_a_read_that_came_as_lanes_woke_goes_before_the_rest_of_their_new_requests(
    loop_kind: str,
) -> None:
    """200 streams end in one callback, and a socket gets bytes to read in the same callback:
    the read is taken after at most one round's share of the 200 new requests (before
    turns.py: after all of them)."""
    a, b = socket.socketpair()
    release: list[asyncio.Future[None]] = []
    seen: list[int] = []

    def until(req: PlannedRequest) -> Awaitable[None]:
        # the first request of each lane ends with the others', the rest a round after
        return release[0] if req.index < 200 else asyncio.sleep(0)

    sender = RoundSender(Rounds(), until)

    async def main() -> list[RequestRecord]:
        loop = asyncio.get_running_loop()
        release.append(loop.create_future())
        b.setblocking(False)

        def readable() -> None:
            b.recv(64)
            seen.append(len(sender.started) - 200)  # new requests started before this read
            loop.remove_reader(b.fileno())

        def end_together() -> None:
            release[0].set_result(None)
            a.send(b"token")

        loop.add_reader(b.fileno(), readable)
        loop.call_later(0.05, end_together)
        reqs = [PlannedRequest(i, "p", 4, 4) for i in range(400)]
        return await run_requests(
            sender, CFG, "m", reqs, concurrency=200, rate=float("inf"), seed=0
        )

    try:
        recs = run_loop(main())
    finally:
        a.close()
        b.close()
    assert len(recs) == 400 and all(r.success for r in recs)
    assert seen and seen[0] <= TURNS_PER_ROUND, f"the read waited for {seen} new requests"


def test_multi_turn_sessions_that_end_together_take_a_share_a_round(loop_kind: str) -> None:
    rounds = Rounds()
    started: list[tuple[int, int]] = []

    async def send(req: PlannedRequest, rec: RequestRecord) -> None:
        started.append((rounds.n, req.index))
        await asyncio.sleep(0)
        rec.success = True

    reqs = [
        PlannedRequest(c * 3 + t, "p", 4, 4, conversation=c, turn=t)
        for c in range(200)
        for t in range(3)
    ]

    async def main() -> list[RequestRecord]:
        rounds.start()
        try:
            return await run_conversations(send, reqs, concurrency=200)
        finally:
            rounds.on = False

    recs = run_loop(main())
    assert [r.index for r in recs] == list(range(600)) and all(r.success for r in recs)
    assert _per_round(started) <= TURNS_PER_ROUND

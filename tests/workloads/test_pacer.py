"""A paced request leaves at its intended time, never before it (issue 23, point 2).

uvloop's timers count whole milliseconds: asyncio.sleep there woke up to ~0.5 ms before the
time asked, so requests left before their place in vLLM's arrival process (start_time <
queued_at) and the others up to ~1 ms after it. The pacer waits on a timerfd armed with the
absolute due time instead. These tests hold the first half, which does not depend on the
machine's speed: no request leaves early. (How late: bench/loadgen_rate.py.)
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable

import pytest

from proctor.workloads.loadgen import pacer
from proctor.workloads.loadgen.client import PlannedRequest
from proctor.workloads.loadgen.config import BenchConfig
from proctor.workloads.loadgen.loop import run as run_loop
from proctor.workloads.loadgen.records import RequestRecord
from proctor.workloads.loadgen.scheduler import run_requests

pytestmark = pytest.mark.timeout(60)


class StampingSender:
    """Takes every request at once: start_time is when the scheduler handed it over."""

    path = "stamp"

    async def send(
        self,
        cfg: BenchConfig,
        model: str,
        req: PlannedRequest,
        record: RequestRecord,
        count_tokens: Callable[[str], int] | None = None,
    ) -> RequestRecord:
        record.start_time = time.perf_counter()
        record.success = True
        return record


def test_paced_requests_never_leave_before_their_time() -> None:
    cfg = BenchConfig(base_url="http://127.0.0.1:9", model="m", burstiness=1.0)
    reqs = [PlannedRequest(i, "p", 4, 4) for i in range(400)]
    recs = run_loop(
        run_requests(StampingSender(), cfg, "m", reqs, concurrency=64, rate=2000.0, seed=1)
    )
    assert len(recs) == 400 and all(r.success for r in recs)
    early = [r.queued_at - r.start_time for r in recs if r.start_time < r.queued_at]
    assert not early, f"{len(early)} requests left early, by up to {max(early) * 1e3:.3f} ms"


@pytest.mark.skipif(sys.platform != "linux", reason="timerfd: Linux")
def test_the_pacer_starts_each_at_or_after_its_time_in_order_and_closes_its_timer() -> None:
    async def main() -> list[tuple[int, float]]:
        got: list[tuple[int, float]] = []
        with pacer.Pacer() as p:
            t, dues = time.perf_counter(), []
            for i in range(200):
                t += 0.0003 + 0.0007 * math.sin(i) ** 2
                dues.append(t)
            dues[50:53] = [dues[50]] * 3  # due together: one wake-up starts all three
            await p.run(dues, lambda i: got.append((i, time.perf_counter() - dues[i])))
            assert p.fd >= 0  # a timerfd was used, not the loop's timer
            assert p.next_due == math.inf
        assert p.fd == -1
        return got

    got = run_loop(main())
    assert [i for i, _ in got] == list(range(200))
    assert min(late for _, late in got) >= 0.0


def test_a_start_that_raises_ends_the_run_with_its_error() -> None:
    def start(i: int) -> None:
        if i == 3:
            raise RuntimeError("boom")

    async def main() -> None:
        with pacer.Pacer() as p:
            t = time.perf_counter()
            await p.run([t + 0.001 * i for i in range(10)], start)

    with pytest.raises(RuntimeError, match="boom"):
        run_loop(main())


def test_without_a_timerfd_the_loop_timer_paces_never_early(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(pacer, "_LIBC", None)
    cfg = BenchConfig(base_url="http://127.0.0.1:9", model="m", burstiness=1.0)
    reqs = [PlannedRequest(i, "p", 4, 4) for i in range(200)]
    recs = run_loop(
        run_requests(StampingSender(), cfg, "m", reqs, concurrency=64, rate=2000.0, seed=3)
    )
    assert [r.index for r in recs] == list(range(200))
    assert all(r.start_time >= r.queued_at for r in recs)

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
def test_the_pacer_wakes_at_or_after_each_due_time_and_closes_its_timer() -> None:
    async def main() -> list[float]:
        late = []
        with pacer.Pacer() as p:
            t = time.perf_counter()
            for i in range(200):
                t += 0.0003 + 0.0007 * math.sin(i) ** 2
                await p.until(t)
                late.append(time.perf_counter() - t)
            assert p.fd >= 0  # a timerfd was used, not the asyncio.sleep fallback
        assert p.fd == -1
        return late

    late = run_loop(main())
    assert min(late) >= 0.0

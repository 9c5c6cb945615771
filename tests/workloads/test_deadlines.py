"""The per-loop deadline checker: idle and total limits cancel only the late request, in time."""

from __future__ import annotations

import asyncio
import time

from proctor.workloads.loadgen.deadlines import for_loop, settle


async def _request(total: float, idle: float, reads: list[float]) -> tuple[str, float]:
    deadlines = for_loop()
    flight = deadlines.add(total, idle)
    t0 = time.perf_counter()
    try:
        for gap in reads:
            await asyncio.sleep(gap)
            flight.last = time.perf_counter()
        return "done", time.perf_counter() - t0
    except asyncio.CancelledError:
        if flight.expired and settle(flight):
            return "timeout", time.perf_counter() - t0
        raise
    finally:
        deadlines.remove(flight)


def test_idle_and_total_limits_cancel_only_the_late_request() -> None:
    async def main() -> list[tuple[str, float]]:
        return await asyncio.gather(
            _request(total=5.0, idle=0.4, reads=[0.1] * 5),  # steady: finishes
            _request(total=5.0, idle=0.4, reads=[0.1, 2.0]),  # goes quiet: idle timeout
            _request(total=0.8, idle=5.0, reads=[0.2] * 10),  # busy but too long: total
        )

    steady, quiet, long = asyncio.run(main())
    assert steady[0] == "done"
    assert quiet[0] == "timeout" and 0.4 <= quiet[1] < 0.4 + 0.1 + 0.3
    assert long[0] == "timeout" and 0.8 <= long[1] < 0.8 + 0.3


def test_a_cancel_from_elsewhere_still_propagates() -> None:
    async def main() -> str:
        task = asyncio.ensure_future(_request(total=5.0, idle=5.0, reads=[10.0]))
        await asyncio.sleep(0.1)
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            return "propagated"
        return "swallowed"

    assert asyncio.run(main()) == "propagated"

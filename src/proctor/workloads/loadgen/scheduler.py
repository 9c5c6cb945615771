"""When requests are sent: a concurrency semaphore and an arrival process.

Request rate inf sends every request at once (bounded by the semaphore); a finite rate
draws gaps from a gamma distribution with shape = burstiness (1.0 = Poisson), as vLLM does.
Arrivals follow an absolute schedule, so sleep drift does not lower the offered rate.
Client queue time = start (just before the POST) - scheduled arrival.
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from collections.abc import Callable, Sequence

import aiohttp

from proctor.workloads.loadgen.client import PlannedRequest, send_request
from proctor.workloads.loadgen.config import BenchConfig
from proctor.workloads.loadgen.records import RequestRecord


class Counter:
    """Finished and failed request counts, read by the progress display from another thread."""

    def __init__(self) -> None:
        self.value = 0
        self.failed = 0

    def done(self, record: RequestRecord) -> None:
        if not record.success:
            self.failed += 1
        self.value += 1


def arrival_offsets(n: int, rate: float, burstiness: float, seed: int) -> list[float]:
    """Seconds after the start at which each of n requests arrives."""
    if math.isinf(rate):
        return [0.0] * n
    rng = random.Random(seed)
    theta = 1.0 / (rate * burstiness)
    t, out = 0.0, []
    for _ in range(n):
        out.append(t)
        t += rng.gammavariate(burstiness, theta)
    return out


async def run_requests(
    session: aiohttp.ClientSession,
    cfg: BenchConfig,
    model: str,
    requests: Sequence[PlannedRequest],
    *,
    concurrency: int,
    rate: float,
    seed: int,
    worker: int = 0,
    counter: Counter | None = None,
    count_tokens: Callable[[str], int] | None = None,
) -> list[RequestRecord]:
    if math.isinf(rate):
        return await _pool(session, cfg, model, requests, concurrency, worker, counter,
                           count_tokens)
    sem = asyncio.Semaphore(concurrency)
    offsets = arrival_offsets(len(requests), rate, cfg.burstiness, seed)

    async def one(req: PlannedRequest, rec: RequestRecord) -> RequestRecord:
        async with sem:
            await send_request(session, cfg, model, req, rec, count_tokens)
        if counter is not None:
            counter.done(rec)
        return rec

    t0 = time.perf_counter()
    tasks: list[asyncio.Task[RequestRecord]] = []
    for req, off in zip(requests, offsets, strict=True):
        due = t0 + off
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        rec = RequestRecord(index=req.index, prompt_len=req.prompt_len,
                            expected_output_len=req.output_len, warmup=req.warmup,
                            worker=worker, queued_at=due)
        tasks.append(asyncio.create_task(one(req, rec)))
    return list(await asyncio.gather(*tasks))


async def _pool(
    session: aiohttp.ClientSession, cfg: BenchConfig, model: str,
    requests: Sequence[PlannedRequest], concurrency: int, worker: int,
    counter: Counter | None, count_tokens: Callable[[str], int] | None,
) -> list[RequestRecord]:
    """Rate inf: `concurrency` senders take requests in order. Same semantics as a semaphore
    with everything queued at t=0, without waking thousands of waiters (O(n) in asyncio)."""
    t0 = time.perf_counter()
    records = [RequestRecord(index=r.index, prompt_len=r.prompt_len,
                             expected_output_len=r.output_len, warmup=r.warmup, worker=worker,
                             queued_at=t0) for r in requests]
    todo = iter(range(len(requests)))

    async def sender() -> None:
        for i in todo:
            await send_request(session, cfg, model, requests[i], records[i], count_tokens)
            if counter is not None:
                counter.done(records[i])

    await asyncio.gather(*(sender() for _ in range(min(concurrency, len(requests)))))
    return records

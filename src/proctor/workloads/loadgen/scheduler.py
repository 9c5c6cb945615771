"""When requests are sent: a concurrency semaphore and an arrival process.

Request rate inf sends every request at once (bounded by the semaphore). A finite rate builds
vLLM's arrival process (vllm/benchmarks/serve.py get_request): one gap per request from a
gamma distribution with shape = burstiness (1.0 = Poisson; inf = every gap 1/rate), summed,
then rescaled so the last request arrives at exactly N / rate. The offered rate is then the
rate asked for, whatever the seed; only the order of the gaps is random.
A trace (--dataset trace:PATH) brings its own schedule: each record due at its timestamp /
--trace-speed after the start, sent by the same loop.
Arrivals follow an absolute schedule, so sleep drift does not lower the offered rate; each
request is sent from the callback that finds it due (pacer.Pacer: a timerfd, or a read that
comes after its time), ahead of the reads waiting in the loop.
Each record keeps its intended send time (queued_at) and its actual one (start_time, just
before the POST); their difference is the request's schedule delay, which includes any wait
for a concurrency slot.
"""

from __future__ import annotations

import asyncio
import math
import random
import sys
import time
from collections.abc import Callable, Coroutine, Iterator, Sequence
from typing import Any, TypeVar

from proctor.workloads.loadgen.client import PlannedRequest, Sender
from proctor.workloads.loadgen.config import BenchConfig
from proctor.workloads.loadgen.metrics import percentile
from proctor.workloads.loadgen.pacer import Pacer
from proctor.workloads.loadgen.records import RequestRecord
from proctor.workloads.loadgen.turns import Turns

T = TypeVar("T")
EAGER = sys.version_info >= (3, 12)


class Counter:
    """Finished and failed request counts, read by the progress display from another thread.

    `timed_out` (a part of `failed`): requests the client gave up on with no answer. The drain
    reads them apart: no answer is a hang's sign, never an error answer (a fault's).
    """

    def __init__(self) -> None:
        self.value = 0
        self.failed = 0
        self.timed_out = 0

    def done(self, record: RequestRecord) -> None:
        if not record.success:
            self.failed += 1
            if record.reason == "timeout":
                self.timed_out += 1
        self.value += 1


def arrival_offsets(n: int, rate: float, burstiness: float, seed: int) -> list[float]:
    """Seconds after the start at which each of n requests is due: vLLM's cumulative gamma
    gaps, rescaled so that the last one is n / rate."""
    if math.isinf(rate) or n == 0:
        return [0.0] * n
    if math.isinf(burstiness):
        gaps = [1.0 / rate] * n
    else:
        rng = random.Random(seed)
        theta = 1.0 / (rate * burstiness)
        gaps = [rng.gammavariate(burstiness, theta) for _ in range(n)]
    out, t = [], 0.0
    for gap in gaps:
        t += gap
        out.append(t)
    if t <= 0:
        return out
    scale = (n / rate) / t
    return [x * scale for x in out]


async def run_requests(
    sender: Sender,
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
    claim: Callable[[], int] | None = None,
    schedule: Sequence[float] | None = None,
) -> list[RequestRecord]:
    """The records of `requests`, sent as `rate` and `concurrency` say, or at `schedule` (a
    trace: the seconds after the start each one is due). With `claim` (rate inf only), lanes
    take the index claim() returns instead of the next in order, and stop at an index past the
    end: workers sharing one list then finish together."""
    if schedule is None and math.isinf(rate):
        return await _pool(
            sender, cfg, model, requests, concurrency, worker, counter, count_tokens, claim
        )
    sem = asyncio.Semaphore(concurrency)
    send = sender.send
    if schedule is not None:
        offsets = list(schedule)
    else:
        offsets = arrival_offsets(len(requests), rate, cfg.burstiness, seed)

    async def one(req: PlannedRequest, rec: RequestRecord) -> RequestRecord:
        async with sem:
            await send(cfg, model, req, rec, count_tokens)
        if counter is not None:
            counter.done(rec)
        return rec

    t0 = time.perf_counter()
    dues = [t0 + off for off in offsets]
    tasks: list[asyncio.Task[RequestRecord]] = []
    loop = asyncio.get_running_loop()

    def start(i: int) -> None:
        req = requests[i]
        tasks.append(spawn(loop, one(req, record_of(req, worker, dues[i]))))

    with Pacer() as pacer:  # a timerfd: uvloop's own timers count whole milliseconds
        watch = getattr(sender, "watch", None)
        if watch is not None:
            watch(pacer)  # its reads let a due send go first
        try:
            await pacer.run(dues, start)
        finally:
            if watch is not None:
                watch(None)
    return list(await asyncio.gather(*tasks))


def spawn(loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
    """A task for `coro` that runs its first step now (Python 3.12's eager start) rather than
    in the loop's next round: a paced request's send then leaves from the callback that found
    it due, before the loop takes the ready reads queued meanwhile. Before 3.12, a plain task."""
    if EAGER:
        return asyncio.Task(coro, loop=loop, eager_start=True)  # type: ignore[call-arg,unused-ignore]
    return loop.create_task(coro)


def record_of(req: PlannedRequest, worker: int, queued_at: float) -> RequestRecord:
    """The record a planned request starts with, queued at `queued_at` (perf_counter)."""
    return RequestRecord(
        index=req.index,
        prompt_len=req.prompt_len,
        expected_output_len=req.output_len,
        warmup=req.warmup,
        worker=worker,
        queued_at=queued_at,
    )


async def _pool(
    sender: Sender,
    cfg: BenchConfig,
    model: str,
    requests: Sequence[PlannedRequest],
    concurrency: int,
    worker: int,
    counter: Counter | None,
    count_tokens: Callable[[str], int] | None,
    claim: Callable[[], int] | None = None,
) -> list[RequestRecord]:
    """Rate inf: `concurrency` lanes take requests in order. Same semantics as a semaphore
    with everything queued at t=0, without waking thousands of waiters (O(n) in asyncio)."""
    t0 = time.perf_counter()
    n = len(requests)
    todo: Iterator[int] = iter(range(n)) if claim is None else iter(claim, -1)
    taken: dict[int, RequestRecord] = {}
    send = sender.send
    turns = Turns(asyncio.get_running_loop())

    async def lane() -> None:
        for i in todo:
            if i >= n:
                break
            if turns.spent():  # many lanes woke together: the reads go first (turns.py)
                await turns.next_round()
            req = requests[i]
            rec = taken[i] = record_of(req, worker, t0)
            await send(cfg, model, req, rec, count_tokens)
            if counter is not None:
                counter.done(rec)

    await asyncio.gather(*(lane() for _ in range(min(concurrency, n))))
    return [taken[i] for i in sorted(taken)]


def schedule_report(
    records: Sequence[RequestRecord], target_rate: float | None
) -> dict[str, float | int | None]:
    """metrics.json "schedule": did the client send when it said it would?

    Schedule delay = actual send time (start_time, just before the POST) - intended send time
    (queued_at), over the measured requests that were sent; it includes any wait for a
    concurrency slot. achieved_rate: with a target rate, requests sent over the time from the
    schedule's start (the last intended time - n / target) to the last send, which is the
    target when every request left on time; with rate inf, (sent - 1) / (last send - first
    send). With rate inf nothing is scheduled: target_rate and the delays are null.
    """
    sent = [r for r in records if r.start_time > 0]
    starts = sorted(r.start_time for r in sent)
    span = starts[-1] - starts[0] if len(starts) > 1 else 0.0
    achieved = (len(starts) - 1) / span if span > 0 else None
    out: dict[str, float | int | None] = {
        "target_rate": target_rate,
        "achieved_rate": achieved,
        "sent": len(sent),
        "schedule_delay_p50_ms": None,
        "schedule_delay_p99_ms": None,
        "schedule_delay_max_ms": None,
    }
    if target_rate is not None and sent:
        delays = [max(0.0, r.start_time - r.queued_at) * 1000 for r in sent]
        out["schedule_delay_p50_ms"] = percentile(delays, 50)
        out["schedule_delay_p99_ms"] = percentile(delays, 99)
        out["schedule_delay_max_ms"] = max(delays)
        begin = max(r.queued_at for r in sent) - len(sent) / target_rate
        took = starts[-1] - begin
        out["achieved_rate"] = len(sent) / took if took > 0 else None
    return out

"""--workers N: the load spread over N processes, records merged, metrics computed once.

Each worker gets an equal share of the concurrency, its own event loop and connection pool,
and every N-th warmup. Without a request rate, the measured requests are one list that every
worker's lanes claim from (a shared counter), so the workers finish together: a static split
leaves the pool waiting on its slowest worker (on the 16-core GPU host the workers' windows
ended up to 1.5 s apart and 8 workers gave 4.5x; bench/loadgen_scaling.py). With a rate, each
worker sends every N-th request on its own schedule at rate / N. Workers finish their warmups,
then wait for the parent's go (so profiling starts first and the measured parts start together).
The measured duration is the latest worker end minus the earliest worker start; both are
CLOCK_MONOTONIC readings, comparable across processes. A worker that dies is reported.
Ctrl-C or SIGTERM of the parent, or a failed worker, stops every worker at once (they ignore
SIGINT themselves: no traceback each), and a worker whose parent is gone exits by itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import multiprocessing as mp
import os
import pickle
import queue
import signal
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.sharedctypes import Synchronized
from multiprocessing.synchronize import Event
from pathlib import Path
from typing import Any

from proctor.errors import WorkloadFailed
from proctor.workloads.loadgen import cores
from proctor.workloads.loadgen.client import PlannedRequest, open_sender
from proctor.workloads.loadgen.config import BenchConfig
from proctor.workloads.loadgen.headroom import Probe, Sample
from proctor.workloads.loadgen.loop import quiet_gc
from proctor.workloads.loadgen.loop import run as run_loop
from proctor.workloads.loadgen.progress import PollingProgress
from proctor.workloads.loadgen.records import RequestRecord
from proctor.workloads.loadgen.scheduler import Counter, run_requests


class _SharedCounter(Counter):
    """Counter that also publishes to a shared value every few requests."""

    def __init__(
        self,
        shared: Synchronized[int],
        shared_failed: Synchronized[int],
        shared_timed_out: Synchronized[int],
    ) -> None:
        super().__init__()
        self._shared = shared
        self._shared_failed = shared_failed
        self._shared_timed_out = shared_timed_out
        self._published = 0
        self._published_failed = 0
        self._published_timed_out = 0

    def flush(self) -> None:
        with self._shared.get_lock():
            self._shared.value += self.value - self._published
        self._published = self.value
        with self._shared_failed.get_lock():
            self._shared_failed.value += self.failed - self._published_failed
        self._published_failed = self.failed
        with self._shared_timed_out.get_lock():
            self._shared_timed_out.value += self.timed_out - self._published_timed_out
        self._published_timed_out = self.timed_out


@dataclass(frozen=True)
class SharedPool:
    """The measured requests every worker claims from: a pickle file and the next index."""

    path: str
    next_index: Synchronized[int]


def split(total: int, parts: int) -> list[int]:
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


def _claimer(next_index: Synchronized[int]) -> Callable[[], int]:
    def claim() -> int:
        with next_index.get_lock():
            i = int(next_index.value)
            next_index.value = i + 1
        return i

    return claim


async def _worker_main(
    wid: int,
    cfg: BenchConfig,
    model: str,
    reqs: list[PlannedRequest],
    concurrency: int,
    rate: float,
    shared: Synchronized[int],
    shared_failed: Synchronized[int],
    shared_timed_out: Synchronized[int],
    warm_done: Event,
    go: Event,
    pool: SharedPool | None,
) -> tuple[list[RequestRecord], float, float, Sample]:
    counter = _SharedCounter(shared, shared_failed, shared_timed_out)

    async def publish() -> None:
        while True:
            await asyncio.sleep(0.2)
            counter.flush()

    pub = asyncio.create_task(publish())
    warm = [r for r in reqs if r.warmup]
    meas = [r for r in reqs if not r.warmup]
    claim = None
    if pool is not None:
        with open(pool.path, "rb") as f:
            meas = pickle.load(f)
        claim = _claimer(pool.next_index)
    records: list[RequestRecord] = []
    async with open_sender(cfg, limit=concurrency) as sender:
        if warm:
            records += await run_requests(
                sender,
                cfg,
                model,
                warm,
                concurrency=concurrency,
                rate=float("inf"),
                seed=cfg.seed + 7919 * wid,
                worker=wid,
                counter=counter,
            )
        counter.flush()
        warm_done.set()
        while not go.wait(0.05):  # a dead parent is noticed by _exit_with_parent
            await asyncio.sleep(0)
        with quiet_gc():
            probe = Probe().start()
            t0 = time.perf_counter()
            records += await run_requests(
                sender,
                cfg,
                model,
                meas,
                concurrency=concurrency,
                rate=rate,
                seed=cfg.seed + 1 + 7919 * wid,
                worker=wid,
                counter=counter,
                claim=claim,
            )
            t1 = time.perf_counter()
            sample = probe.stop()
    pub.cancel()
    counter.flush()
    return records, t0, t1, sample


def _exit_with_parent(parent: int) -> None:
    """A thread: leave when the parent is gone (killed outright, it stops nobody), even while
    this worker's result waits in a full queue pipe that nobody reads any more."""
    while os.getppid() == parent:
        time.sleep(0.25)
    os._exit(3)


def _worker(
    wid: int,
    cfg: BenchConfig,
    model: str,
    reqs: list[PlannedRequest],
    concurrency: int,
    rate: float,
    shared: Synchronized[int],
    shared_failed: Synchronized[int],
    shared_timed_out: Synchronized[int],
    warm_done: Event,
    go: Event,
    out: mp.Queue[Any],
    pool: SharedPool | None = None,
) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops us on Ctrl-C
    cores.pin(cfg.client_cores[wid : wid + 1])  # checked in runner.run_benchmark
    threading.Thread(target=_exit_with_parent, args=(os.getppid(),), daemon=True).start()
    records, t0, t1, sample = run_loop(
        _worker_main(
            wid,
            cfg,
            model,
            reqs,
            concurrency,
            rate,
            shared,
            shared_failed,
            shared_timed_out,
            warm_done,
            go,
            pool,
        )
    )
    out.put((wid, t0, t1, [r.to_dict() for r in records], sample.to_dict()))


def run_workers(
    cfg: BenchConfig, model: str, reqs: list[PlannedRequest], bar: PollingProgress, profile: Any
) -> tuple[list[RequestRecord], float, list[Sample]]:
    with cores.pinned(cfg.client_cores[cfg.workers :]):  # the parent: after the workers' cores
        return _run_workers(cfg, model, reqs, bar, profile)


def _run_workers(
    cfg: BenchConfig, model: str, reqs: list[PlannedRequest], bar: PollingProgress, profile: Any
) -> tuple[list[RequestRecord], float, list[Sample]]:
    from proctor.workloads.loadgen.runner import _profile  # runner imports us lazily

    n = cfg.workers
    ctx = mp.get_context("spawn")  # no inherited event loop or threads
    shared: Synchronized[int] = ctx.Value("q", 0)
    shared_failed: Synchronized[int] = ctx.Value("q", 0)
    shared_timed_out: Synchronized[int] = ctx.Value("q", 0)
    out: mp.Queue[Any] = ctx.Queue()
    go = ctx.Event()
    conc = split(cfg.concurrency, n)
    scratch = None
    pool = None
    if math.isinf(cfg.request_rate):
        scratch = tempfile.TemporaryDirectory(prefix="proctor-loadgen-")
        # One pickle read by every worker, not one per worker through the spawn pipe.
        pool = SharedPool(str(Path(scratch.name) / "measured.pickle"), ctx.Value("q", 0))
        with open(pool.path, "wb") as f:
            pickle.dump([r for r in reqs if not r.warmup], f, protocol=pickle.HIGHEST_PROTOCOL)
    procs, warm_events = [], []
    for wid in range(n):
        ev = ctx.Event()
        share = [r for r in reqs[wid::n] if pool is None or r.warmup]
        p = ctx.Process(
            target=_worker,
            name=f"proctor-loadgen-{wid}",
            args=(
                wid,
                cfg,
                model,
                share,
                conc[wid],
                cfg.request_rate / n,
                shared,
                shared_failed,
                shared_timed_out,
                ev,
                go,
                out,
                pool,
            ),
            daemon=True,
        )
        p.start()
        procs.append(p)
        warm_events.append(ev)
    results: dict[int, tuple[float, float, list[dict[str, Any]], dict[str, Any]]] = {}

    def check_alive() -> None:
        for wid, p in enumerate(procs):
            code = p.exitcode
            if wid not in results and not p.is_alive() and code not in (None, 0):
                how = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit {code}"
                raise WorkloadFailed(
                    f"load-generator worker {wid} died ({how})",
                    hint="run with --workers 1 to see its error",
                )

    stops = (signal.SIGINT, signal.SIGTERM)

    def stopped(signum: int, frame: Any) -> None:
        # Ctrl-C or SIGTERM, once: later ones are ignored, so the cleanup in the finally below
        # runs whole (Slurm's scancel signals every process, then the run wrapper does again).
        for s in stops:
            signal.signal(s, signal.SIG_IGN)
        raise KeyboardInterrupt

    main = threading.current_thread() is threading.main_thread()  # handlers live only there
    previous = {s: signal.signal(s, stopped) for s in stops} if main else {}
    finished = False
    try:
        n_warm = sum(r.warmup for r in reqs)
        if n_warm:
            bar.phase(
                "warmup",
                n_warm,
                lambda: int(shared.value),
                lambda: int(shared_failed.value),
                lambda: int(shared_timed_out.value),
            )
        while not all(ev.is_set() for ev in warm_events):
            check_alive()
            time.sleep(0.05)
        if cfg.profile:
            run_loop(_profile(cfg, "start", profile))
        bar.phase(
            "benchmark",
            len(reqs) - n_warm,
            lambda: int(shared.value),
            lambda: int(shared_failed.value),
            lambda: int(shared_timed_out.value),
        )
        go.set()
        while len(results) < n:
            try:
                wid, t0, t1, recs, sample = out.get(timeout=0.2)
                results[wid] = (t0, t1, recs, sample)
            except queue.Empty:
                check_alive()
        if cfg.profile:
            run_loop(_profile(cfg, "stop", profile))
        finished = True
    finally:
        for s in previous:
            signal.signal(s, signal.SIG_IGN)  # from here on, nothing cuts the cleanup short
        try:
            for p in procs:
                if not finished:
                    p.kill()  # interrupted or a worker failed: the others stop sending now
                p.join(5)
                if p.is_alive():
                    p.kill()
                    with contextlib.suppress(Exception):
                        p.join(2)
            if scratch is not None:
                scratch.cleanup()
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler if handler is not None else signal.SIG_DFL)
    records = [RequestRecord.from_dict(d) for _, _, recs, _ in results.values() for d in recs]
    records.sort(key=lambda r: r.index)
    duration = max(v[1] for v in results.values()) - min(v[0] for v in results.values())
    samples = [Sample.from_dict(results[w][3]) for w in sorted(results)]
    return records, duration, samples

"""The client's own headroom during the measured part: CPU use and event-loop lag.

A load client that is itself saturated measures itself, not the server. Every benchmark
records, per client process, the CPU seconds it used over the measured window
(time.process_time: every thread of the process) and the lateness of a probe that sleeps
PROBE_S and wakes: with an idle loop that lag stays within ~1 ms (the event loop's timer
resolution); a loop busy with callbacks wakes the probe late by the length of the busy stretch.

metrics.json "client": cpu_percent (% of one core, summed over worker processes),
loop_lag_p50_ms / p99 / max (over the pooled probe samples), client_bound and its reasons:
- a worker process used more than CPU_BOUND_PERCENT of one core, or
- the loop-lag p99 was above LAG_BOUND_MS (a late wake-up delays every timestamp taken in it).
Both bounds are measured in docs/bench.md (Headroom); `path` and `loop` say which HTTP client
and event loop ran.

Every latency is a difference of two time.perf_counter() (CLOCK_MONOTONIC) times: the start,
read just before the request is written, and the arrival of the bytes that carried each token.
On the raw http:// client on Linux that arrival is the kernel's receive timestamp of the read
(rxtime.py), so a busy loop no longer moves a measurement; elsewhere (aiohttp, https://) it is
when the event loop handled the read, late by the wait the probe sees. "timing" names the
clock and gives the bench's own estimate of its error: how late the loop read what had
arrived (measured per read from the kernel stamps: the error a loop-time stamp would have had,
and the bound on a stamped one: none), and the tokens whose read also held the stream's next
token (stamped with that later arrival: late by up to one inter-token gap).

"timeline" gives each process's headroom over time, per BIN_S of its measured part (twice as
long bins, as often as needed, to keep a long run's at most MAX_BINS): CPU % of one core,
the longest loop lag, and the involuntary context switches (the kernel took the core away:
another process or kernel work wanted it). "cores": the CPU cores each process was allowed
(--client-cores pins them). A client whose tail comes from one worker's bad second shows it
here, and bench/loadgen_rate.py --tail prints it beside the schedule delays.
"""

from __future__ import annotations

import asyncio
import math
import os
import time
from dataclasses import dataclass, field
from typing import Any

from proctor.workloads.loadgen import rxtime
from proctor.workloads.loadgen.metrics import percentile

PROBE_S = 0.005
CPU_BOUND_PERCENT = 90.0
LAG_BOUND_MS = 10.0
# Above this share of tokens read together with the next one, by a loop that read late, the
# ITL and TTFT tails are off by up to one inter-token gap (a p99 moves once 1 % is).
SHARED_READ_BOUND = 0.01
# Merged tokens are late by at most one gap: below a millisecond that error is below what the
# timings claim anyway (a server that writes its tokens at once has gaps of ~0).
MATERIAL_GAP_MS = 1.0
# The share of a core each worker should use when a bench is sized again (more_workers).
WORKER_TARGET_PERCENT = 50.0
BIN_S = 0.5
MAX_BINS = 720
TIMELINE_COLUMNS = ("t_s", "cpu_percent", "loop_lag_max_ms", "involuntary_switches")


def _switches() -> int:
    """Involuntary context switches of this process so far (0 where getrusage lacks them)."""
    try:
        import resource
    except ImportError:  # not on Windows
        return 0
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_nivcsw)


def _cores() -> list[int]:
    getter = getattr(os, "sched_getaffinity", None)
    return sorted(getter(0)) if getter is not None else []


@dataclass
class Sample:
    """One client process over its measured window."""

    cpu_s: float = 0.0
    wall_s: float = 0.0
    lags_s: list[float] = field(default_factory=list)
    # Raw client only: how late the loop read bytes after their kernel stamp (sampled), the
    # reads, and the reads that came back without a stamp (timed when the loop read them).
    read_delays_s: list[float] = field(default_factory=list)
    reads: int = 0
    unstamped: int = 0
    # One row per BIN_S: [start, end (perf_counter s), CPU s, longest lag s, involuntary
    # context switches]; and the cores the process was allowed.
    bins: list[list[float]] = field(default_factory=list)
    cores: list[int] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "bins": self.bins,
            "cores": self.cores,
            "cpu_s": self.cpu_s,
            "wall_s": self.wall_s,
            "lags_s": self.lags_s,
            "read_delays_s": self.read_delays_s,
            "reads": self.reads,
            "unstamped": self.unstamped,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Sample:
        return cls(
            float(d["cpu_s"]),
            float(d["wall_s"]),
            [float(x) for x in d["lags_s"]],
            [float(x) for x in d.get("read_delays_s", [])],
            int(d.get("reads", 0)),
            int(d.get("unstamped", 0)),
            [[float(x) for x in row] for row in d.get("bins", [])],
            [int(c) for c in d.get("cores", [])],
        )


class Probe:
    """Start it where the measured part starts and stop it where it ends (same loop)."""

    def __init__(self, period_s: float = PROBE_S) -> None:
        self.period = period_s
        self.sample = Sample()
        self._task: asyncio.Task[None] | None = None
        self._cpu0 = self._wall0 = 0.0
        self._reads: rxtime.ReadClock | None = None
        self._bin: list[float] = []  # the open timeline bin: start, CPU s, switches
        self._worst = 0.0  # its longest lag so far

    def start(self) -> Probe:
        self._cpu0, self._wall0 = time.process_time(), time.perf_counter()
        self._task = asyncio.get_running_loop().create_task(self._run())
        self._reads = rxtime.for_loop()
        self._reads.start()
        return self

    async def _run(self) -> None:
        lags = self.sample.lags_s
        period = self.period
        clock = time.perf_counter
        self.sample.cores = _cores()
        self._bin = [self._wall0, self._cpu0, float(_switches())]
        while True:
            t = clock()
            await asyncio.sleep(period)
            now = clock()
            lag = max(0.0, now - t - period)
            lags.append(lag)
            if lag > self._worst:
                self._worst = lag
            if now - self._bin[0] >= BIN_S:
                self._close_bin(now)

    def _close_bin(self, now: float) -> None:
        """The bin open since self._bin[0] ends at `now`: a row of Sample.bins."""
        start, cpu0, sw0 = self._bin
        cpu, sw = time.process_time(), float(_switches())
        self.sample.bins.append([start, now, cpu - cpu0, self._worst, sw - sw0])
        self._bin, self._worst = [now, cpu, sw], 0.0

    def stop(self) -> Sample:
        if self._task is not None:
            self._task.cancel()
            self._task = None
            if self._bin:
                self._close_bin(time.perf_counter())
        if self._reads is not None:
            s = self.sample
            s.read_delays_s, s.reads, s.unstamped = self._reads.stop()
            self._reads = None
        self.sample.cpu_s = time.process_time() - self._cpu0
        self.sample.wall_s = time.perf_counter() - self._wall0
        return self.sample


def summarize(
    samples: list[Sample],
    *,
    path: str,
    loop: str,
    itls: list[float] | None = None,
    reader: str | None = None,
) -> dict[str, Any]:
    """metrics.json "client" from every client process's sample (and the measured requests'
    ITLs, for the tokens that shared a read with the next one)."""
    lags = [x for s in samples for x in s.lags_s]
    per_proc = [100.0 * s.cpu_s / s.wall_s if s.wall_s > 0 else 0.0 for s in samples]
    cpu = sum(per_proc)
    p50, p99 = percentile(lags, 50) * 1000, percentile(lags, 99) * 1000
    lag_max = max(lags, default=0.0) * 1000
    reasons: list[str] = []
    busiest = max(per_proc, default=0.0)
    if busiest > CPU_BOUND_PERCENT:
        who = "the client" if len(samples) == 1 else "a client worker"
        reasons.append(f"{who} used {busiest:.0f}% of one core (> {CPU_BOUND_PERCENT:.0f}%)")
    stamps = timing(samples, p50, p99, itls or [])
    if p99 > LAG_BOUND_MS:
        # With kernel stamps a late loop no longer delays token times, only sends.
        late = (
            "requests were sent late"
            if stamps["token_clock"] == rxtime.CLOCK
            else "timestamps were taken late"
        )
        reasons.append(f"event-loop lag p99 {p99:.1f} ms (> {LAG_BOUND_MS:g} ms): {late}")
    if (merged := _merged_by_late_reads(stamps)) is not None:
        reasons.append(merged)
    fix = more_workers(len(samples), busiest) if reasons else None
    return {
        "cpu_percent": round(cpu, 1),
        "cpu_percent_per_process": [round(x, 1) for x in per_proc],
        "loop_lag_p50_ms": round(p50, 3),
        "loop_lag_p99_ms": round(p99, 3),
        "loop_lag_max_ms": round(lag_max, 3),
        "loop_lag_samples": len(lags),
        "client_bound": bool(reasons),
        "reasons": reasons,
        "fix": fix,
        "bounds": {
            "cpu_percent": CPU_BOUND_PERCENT,
            "loop_lag_p99_ms": LAG_BOUND_MS,
            "tokens_sharing_a_read_fraction": SHARED_READ_BOUND,
        },
        "path": path,
        "reader": reader,  # client.read_path: "C" or "Python"
        "loop": loop,
        "processes": len(samples),
        "cores": [s.cores for s in samples],
        "timing": stamps,
        "timeline": timeline(samples),
    }


def more_workers(workers: int, busiest_percent: float) -> str:
    """What to run instead of a client-bound bench: enough workers that each would use about
    WORKER_TARGET_PERCENT of a core (at least one more). Measured on the GPU host (bench/NOTES.md,
    *The send-first pacer and pinned workers*): the timing and schedule targets held at about
    half a core a worker (500 streams at a 10 ms ITL, ~1,700 req/s of 128-token answers)."""
    k = max(workers + 1, math.ceil(workers * busiest_percent / WORKER_TARGET_PERCENT))
    return (
        f"run with --workers {k} (each on a core of its own; --client-cores to pin them), "
        f"or less load per client process"
    )


def _merged_by_late_reads(stamps: dict[str, Any]) -> str | None:
    """The client-bound reason when too many tokens shared a read with the next one and the
    loop read late: the kernel had merged them while nothing read (one stamp, the later). A
    prompt loop (read delay p99 under half a gap) means the server sent them together, which
    the records then say truly; so do gaps under MATERIAL_GAP_MS (the error is under them)."""
    share = float(stamps.get("tokens_sharing_a_read_fraction", 0.0))
    gap = float(stamps.get("inter_token_gap_p50_ms", 0.0))
    late = float(stamps.get("loop_read_delay_p99_ms", 0.0))
    if share <= SHARED_READ_BOUND or gap < MATERIAL_GAP_MS or late <= gap / 2:
        return None
    return (
        f"{share:.1%} of tokens were read together with the next one (> "
        f"{SHARED_READ_BOUND:.0%}), by a loop that read {late:.1f} ms after arrival at p99 "
        f"(gap {gap:.1f} ms): ITL and TTFT tails may be off by up to one gap"
    )


def timeline(samples: list[Sample]) -> dict[str, Any]:
    """metrics.json "client".timeline: per process (in the order of "cpu_percent_per_process"),
    one row per bin of its measured part: the columns TIMELINE_COLUMNS, t_s the bin's start in
    seconds after the earliest process's (origin_perf_counter_s, the records' clock)."""
    with_bins = [s.bins for s in samples if s.bins]
    origin = min((b[0][0] for b in with_bins), default=0.0)
    k = 1
    while max(map(len, with_bins), default=0) > MAX_BINS * k:
        k *= 2
    per: list[list[list[float]]] = []
    for s in samples:
        rows = []
        for i in range(0, len(s.bins), k):
            group = s.bins[i : i + k]
            start, end = group[0][0], group[-1][1]
            cpu = sum(r[2] for r in group)
            rows.append(
                [
                    round(start - origin, 3),
                    round(100.0 * cpu / (end - start), 1) if end > start else 0.0,
                    round(max(r[3] for r in group) * 1000, 3),
                    int(sum(r[4] for r in group)),
                ]
            )
        per.append(rows)
    return {
        "bin_s": BIN_S * k,
        "origin_perf_counter_s": origin,
        "columns": list(TIMELINE_COLUMNS),
        "per_process": per,
    }


def timing(
    samples: list[Sample], lag_p50: float, lag_p99: float, itls: list[float]
) -> dict[str, Any]:
    """metrics.json "client".timing: the clock of each time and the bench's estimate of how
    late its token times are (ms)."""
    reads = sum(s.reads for s in samples)
    unstamped = sum(s.unstamped for s in samples)
    start = "time.perf_counter (CLOCK_MONOTONIC) just before the request was written"
    if reads == 0 or unstamped == reads:  # aiohttp, or no kernel stamps on this platform
        return {
            "clock": "time.perf_counter (CLOCK_MONOTONIC), read when the event loop handled "
            "each event",
            "start_clock": start,
            "token_clock": rxtime.FALLBACK_CLOCK,
            "reading_late_p50_ms": round(lag_p50, 3),
            "reading_late_p99_ms": round(lag_p99, 3),
            "estimated_from": "event-loop lag probe",
        }
    delays = [x for s in samples for x in s.read_delays_s]
    shared = sum(1 for x in itls if x == 0.0)  # same read as the token before it
    # A stamped read is exact for its last segment; an unstamped one is late by its read
    # delay, which is not known for it: the loop-lag probe stands in.
    frac = unstamped / reads
    share = shared / len(itls) if itls else 0.0
    gap = percentile([x for x in itls if x > 0.0], 50) * 1000  # a typical inter-token gap

    def late(q: float, lag: float) -> float:
        """The q-quantile of lateness: of the reads without a stamp (the probe's lag) when
        more than 1-q of them lacked one, else one gap when more than 1-q of the tokens
        shared a read, else 0 (stamped at arrival)."""
        return max(lag if frac > 1 - q else 0.0, gap if share > 1 - q else 0.0)

    return {
        "clock": "time.perf_counter (CLOCK_MONOTONIC); token times are kernel receive "
        "timestamps mapped onto it",
        "start_clock": start,
        "token_clock": rxtime.CLOCK,
        "reads": reads,
        "unstamped_reads": unstamped,
        "loop_read_delay_p50_ms": round(percentile(delays, 50) * 1000, 3),
        "loop_read_delay_p99_ms": round(percentile(delays, 99) * 1000, 3),
        "loop_read_delay_max_ms": round(max(delays, default=0.0) * 1000, 3),
        "tokens_sharing_a_read": shared,
        "tokens_sharing_a_read_fraction": round(share, 6),
        "inter_token_gap_p50_ms": round(gap, 3),
        # The loop's read delay is what a loop-time stamp would have added; a kernel-stamped
        # token is late only when it shared its read with a later one (by up to one ITL).
        "reading_late_p50_ms": round(late(0.5, lag_p50), 3),
        "reading_late_p99_ms": round(late(0.99, lag_p99), 3),
        "estimated_from": "kernel receive timestamps (per read: arrival vs read time); "
        "loop-lag probe for reads without one",
    }


def format_headroom(client: dict[str, Any] | None) -> str:
    """The summary's client line: "client-bound: ..." when it was, else its headroom."""
    if not client:
        return "client headroom: not measured"
    if client.get("client_bound"):
        fix = client.get("fix")
        return (
            "client-bound: "
            + "; ".join(client.get("reasons", []))
            + " -- these figures may be the client's limits, not the server's"
            + (f"; fix: {fix}" if fix else "")
        )
    return (
        f"client headroom: ok (CPU {client['cpu_percent']:.0f}% of one core, "
        f"loop lag p99 {client['loop_lag_p99_ms']:.1f} ms; {client['path']} client, "
        f"{client['loop']} loop)"
    )

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

Every latency is a difference of two time.perf_counter() readings (CLOCK_MONOTONIC) taken when
the event loop handled the event, not when the bytes arrived: a reading is late by the time the
ready event waited for a busy loop, the same wait the probe sees. So "timing" states the clock
and estimates the lateness of each reading from the probe's lags (an estimate: the probe is
one more callback on the same loop, and a TTFT is late by the difference of two such waits).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from proctor.workloads.loadgen.metrics import percentile

PROBE_S = 0.005
CPU_BOUND_PERCENT = 90.0
LAG_BOUND_MS = 10.0


@dataclass
class Sample:
    """One client process over its measured window."""

    cpu_s: float = 0.0
    wall_s: float = 0.0
    lags_s: list[float] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"cpu_s": self.cpu_s, "wall_s": self.wall_s, "lags_s": self.lags_s}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Sample:
        return cls(float(d["cpu_s"]), float(d["wall_s"]), [float(x) for x in d["lags_s"]])


class Probe:
    """Start it where the measured part starts and stop it where it ends (same loop)."""

    def __init__(self, period_s: float = PROBE_S) -> None:
        self.period = period_s
        self.sample = Sample()
        self._task: asyncio.Task[None] | None = None
        self._cpu0 = self._wall0 = 0.0

    def start(self) -> Probe:
        self._cpu0, self._wall0 = time.process_time(), time.perf_counter()
        self._task = asyncio.get_running_loop().create_task(self._run())
        return self

    async def _run(self) -> None:
        lags = self.sample.lags_s
        period = self.period
        clock = time.perf_counter
        while True:
            t = clock()
            await asyncio.sleep(period)
            lags.append(max(0.0, clock() - t - period))

    def stop(self) -> Sample:
        if self._task is not None:
            self._task.cancel()
            self._task = None
        self.sample.cpu_s = time.process_time() - self._cpu0
        self.sample.wall_s = time.perf_counter() - self._wall0
        return self.sample


def summarize(samples: list[Sample], *, path: str, loop: str) -> dict[str, Any]:
    """metrics.json "client" from every client process's sample."""
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
    if p99 > LAG_BOUND_MS:
        reasons.append(
            f"event-loop lag p99 {p99:.1f} ms (> {LAG_BOUND_MS:g} ms): timestamps were taken late"
        )
    return {
        "cpu_percent": round(cpu, 1),
        "cpu_percent_per_process": [round(x, 1) for x in per_proc],
        "loop_lag_p50_ms": round(p50, 3),
        "loop_lag_p99_ms": round(p99, 3),
        "loop_lag_max_ms": round(lag_max, 3),
        "loop_lag_samples": len(lags),
        "client_bound": bool(reasons),
        "reasons": reasons,
        "bounds": {"cpu_percent": CPU_BOUND_PERCENT, "loop_lag_p99_ms": LAG_BOUND_MS},
        "path": path,
        "loop": loop,
        "processes": len(samples),
        "timing": {
            "clock": "time.perf_counter (CLOCK_MONOTONIC), read when the event loop handled "
            "each event",
            "reading_late_p50_ms": round(p50, 3),
            "reading_late_p99_ms": round(p99, 3),
            "estimated_from": "event-loop lag probe",
        },
    }


def format_headroom(client: dict[str, Any] | None) -> str:
    """The summary's client line: "client-bound: ..." when it was, else its headroom."""
    if not client:
        return "client headroom: not measured"
    if client.get("client_bound"):
        return (
            "client-bound: "
            + "; ".join(client.get("reasons", []))
            + " -- these figures may be the client's limits, not the server's"
        )
    return (
        f"client headroom: ok (CPU {client['cpu_percent']:.0f}% of one core, "
        f"loop lag p99 {client['loop_lag_p99_ms']:.1f} ms; {client['path']} client, "
        f"{client['loop']} loop)"
    )

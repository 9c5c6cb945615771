"""The steady-state window of a bench: metrics.json "steady_state" (issue 23 point 3).

Whole-run figures mix three phases: ramp-up (requests still being started), the plateau (the
load asked for) and drain-out (the last requests finishing with the server half idle). The
plateau is found from the per-request records alone, the way AISBench and vllm-bench cut it:

- in flight at time t = requests started and not yet ended (failures included: they held a
  slot too); the peak is the exact maximum (metrics.exact_peak_concurrency).
- the window opens when the count first reaches NEAR_PEAK of the peak (at least 1) and closes
  when it last falls below that, so brief dips between one request ending and the next one
  starting do not cut the plateau in pieces.
- throughput in the window counts what happened inside it: requests that ended inside it,
  output tokens whose chunk arrived inside it (from TTFT and the inter-token gaps); latencies
  are those of the successful requests that started and ended inside it.

With --repeat each repeat is its own phase, so each gets its own window ("per_repeat").
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

from proctor.workloads.loadgen.metrics import describe
from proctor.workloads.loadgen.records import RequestRecord

NEAR_PEAK = 0.9
MIN_REQUESTS = 2  # fewer inside the window: the latencies are not judged


def _end(r: RequestRecord) -> float:
    return r.end_time if r.end_time >= r.start_time else r.start_time + max(r.latency, 0.0)


def plateau(records: Sequence[RequestRecord]) -> tuple[int, int, float, float] | None:
    """(peak, threshold, opens, closes) of the in-flight count, or None with no requests."""
    events: list[tuple[float, int]] = []
    starts = [r.start_time for r in records if r.start_time > 0]
    if not starts:
        return None
    for r in records:
        # A request that ended the instant it started was never in flight: sorted ends-first,
        # its own end would come before its start and the count would go negative.
        if r.start_time > 0 and _end(r) > r.start_time:
            events += [(r.start_time, 1), (_end(r), -1)]
    if not events:
        first = min(starts)
        return 0, 1, first, first  # nothing held a slot for any time: an empty window
    # Ends first at one instant: a client slot freed and taken again at once is one in flight
    # (exact_peak_concurrency counts starts first, so a zero-length request is seen there).
    events.sort()
    cur = peak = 0
    for _, delta in events:
        cur += delta
        peak = max(peak, cur)
    threshold = max(1, math.ceil(NEAR_PEAK * peak))
    opens: float | None = None
    closes = events[-1][0]
    cur = 0
    for t, delta in events:
        before = cur
        cur += delta
        if opens is None and cur >= threshold:
            opens = t
        if before >= threshold > cur:
            closes = t  # the last such fall wins
    assert opens is not None
    return peak, threshold, opens, closes


def _token_times(r: RequestRecord) -> list[tuple[float, float]]:
    """(arrival, tokens) of each content chunk: the output tokens spread evenly over them."""
    if not r.success or r.output_tokens <= 0:
        return []
    times = [r.start_time + r.ttft]
    for gap in r.itl:
        times.append(times[-1] + gap)
    each = r.output_tokens / len(times)
    return [(t, each) for t in times]


def _wall(t: float) -> str:
    """A perf_counter time (CLOCK_MONOTONIC, shared by the host's processes) as a UTC time, for
    the report's time axis; read on the host that measured, right after the bench."""
    stamp = t + time.time() - time.perf_counter()
    return datetime.fromtimestamp(stamp, timezone.utc).isoformat(timespec="milliseconds")


def window_report(records: Sequence[RequestRecord], percentiles: Sequence[float]) -> dict[str, Any]:
    found = plateau(records)
    if found is None:
        return {"found": False, "reason": "no request was sent"}
    peak, threshold, opens, closes = found
    span = closes - opens
    starts = [r.start_time for r in records if r.start_time > 0]
    run_span = max(_end(r) for r in records if r.start_time > 0) - min(starts)
    out: dict[str, Any] = {
        "found": span > 0,
        "peak_in_flight": peak,
        "threshold_in_flight": threshold,
        "near_peak": NEAR_PEAK,
        "opens_s": opens - min(starts),  # from the first request's start
        "closes_s": closes - min(starts),
        "opens_at": _wall(opens),
        "closes_at": _wall(closes),
        "duration_s": span,
        "fraction_of_run": span / run_span if run_span > 0 else 0.0,
    }
    if span <= 0:
        out["reason"] = "the in-flight count never held near its peak"
        return out
    ended = [r for r in records if r.start_time > 0 and opens <= _end(r) <= closes]
    tokens = sum(n for r in records for t, n in _token_times(r) if opens <= t <= closes)
    inside = [r for r in ended if r.success and r.start_time >= opens]
    out.update(
        requests_ended=len(ended),
        requests_inside=len(inside),
        request_throughput=sum(r.success for r in ended) / span,
        output_throughput=tokens / span,
    )
    if len(inside) < MIN_REQUESTS:
        out["latency_reason"] = f"fewer than {MIN_REQUESTS} requests started and ended inside"
        return out
    tpots = [(r.latency - r.ttft) / (r.output_tokens - 1) for r in inside if r.output_tokens > 1]
    for name, values in (
        ("ttft", [r.ttft for r in inside]),
        ("tpot", tpots),
        ("itl", [g for r in inside for g in r.itl]),
        ("e2el", [r.latency for r in inside]),
    ):
        stat = describe(values, percentiles)
        out[f"mean_{name}_ms"] = stat.mean
        out[f"median_{name}_ms"] = stat.median
        for p, value in stat.percentiles.items():
            out[f"p{p}_{name}_ms"] = value
    return out


def steady_state(
    measured: Sequence[RequestRecord], percentiles: Sequence[float], repeats: int
) -> dict[str, Any]:
    """The section for metrics.json: one window, or one per repeat (each its own phase)."""
    if repeats <= 1:
        return window_report(measured, percentiles)
    per = [
        window_report([r for r in measured if r.repeat == k], percentiles) for k in range(repeats)
    ]
    return {"found": all(w.get("found") for w in per), "per_repeat": per}

"""--repeat N: the measured phase run N times, and each metric's mean, stdev and 95% CI.

Each repeat's metrics are computed on its own records, exactly as a single run's are. Across
the N values of a metric (proctor/stats.py): mean, sample standard deviation (n - 1), standard
error stdev/sqrt(n) and the 95% confidence interval of the mean, mean ± t(0.975, n - 1) *
stderr (Student's t: with few repeats the normal 1.96 would claim too narrow an interval).
The repeats are taken as independent samples of the same system; drift between them (a
warming cache, throttling) shows as a wide interval, not as a bias the interval corrects.

The combined BenchMetrics that the summary block prints has totals for counts and duration
(every measured request of every repeat) and the mean over repeats for rates and latencies.
"""

from __future__ import annotations

import math
from typing import Any

from proctor.stats import CONFIDENCE, describe, t95
from proctor.workloads.loadgen.metrics import BenchMetrics, Stat

__all__ = ["CONFIDENCE", "combine", "describe", "format_repeats", "summarize", "t95"]

_COUNTS = ("completed", "failed", "total_input_tokens", "total_output_tokens")


def summarize(per_repeat: list[dict[str, Any]]) -> dict[str, dict[str, float | int]]:
    """Per metric (flat keys), the statistics over repeats; metrics missing or non-numeric in
    some repeat are left out."""
    out: dict[str, dict[str, float | int]] = {}
    for key in per_repeat[0]:
        values = [m.get(key) for m in per_repeat]
        if all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
            for v in values
        ):
            out[key] = describe([float(v) for v in values])  # type: ignore[arg-type]
    return out


def _mean(xs: list[float]) -> float:
    return math.fsum(xs) / len(xs)


def combine(per_repeat: list[BenchMetrics]) -> BenchMetrics:
    """One BenchMetrics for the summary: counts and duration summed, the rest averaged."""
    first = per_repeat[0]
    stats: dict[str, Stat] = {}
    for kind in first.stats_ms:
        ss = [m.stats_ms[kind] for m in per_repeat if kind in m.stats_ms]
        stats[kind] = Stat(
            mean=_mean([s.mean for s in ss]),
            median=_mean([s.median for s in ss]),
            std=_mean([s.std for s in ss]),
            percentiles={
                p: _mean([s.percentiles.get(p, 0.0) for s in ss]) for p in ss[0].percentiles
            },
        )
    failures: dict[str, int] = {}
    for m in per_repeat:
        for reason, n in m.failures_by_reason.items():
            failures[reason] = failures.get(reason, 0) + n
    goodputs = [m.request_goodput for m in per_repeat if m.request_goodput is not None]
    return first.model_copy(
        update={
            **{k: sum(getattr(m, k) for m in per_repeat) for k in _COUNTS},
            "duration_s": math.fsum(m.duration_s for m in per_repeat),
            "request_throughput": _mean([m.request_throughput for m in per_repeat]),
            "request_goodput": _mean(goodputs) if goodputs else None,
            "output_throughput": _mean([m.output_throughput for m in per_repeat]),
            "total_token_throughput": _mean([m.total_token_throughput for m in per_repeat]),
            "max_output_tokens_per_s": max(m.max_output_tokens_per_s for m in per_repeat),
            "max_concurrent_requests": max(m.max_concurrent_requests for m in per_repeat),
            "peak_concurrency": max(m.peak_concurrency for m in per_repeat),
            "stats_ms": stats,
            "failures_by_reason": failures,
        }
    )


# The metrics the summary shows with their interval (the rest are in metrics.json).
SHOWN = (
    ("request_throughput", "Request throughput (req/s)"),
    ("output_throughput", "Output token throughput (tok/s)"),
    ("total_token_throughput", "Total token throughput (tok/s)"),
    ("mean_ttft_ms", "Mean TTFT (ms)"),
    ("p99_ttft_ms", "P99 TTFT (ms)"),
    ("mean_tpot_ms", "Mean TPOT (ms)"),
    ("p99_tpot_ms", "P99 TPOT (ms)"),
    ("mean_itl_ms", "Mean ITL (ms)"),
    ("mean_e2el_ms", "Mean E2EL (ms)"),
)


def format_repeats(stats: dict[str, dict[str, float | int]], n: int) -> str:
    """The block printed under the summary: mean ± CI half-width, and stdev, per metric."""
    head = f" Repeats: {n}, mean ± 95% CI (t) "
    out = [f"{head:=^50}"]
    for key, label in SHOWN:
        s = stats.get(key)
        if s is None:
            continue
        out.append(
            f"{label + ':':<34} {s['mean']:.2f} ± {s['ci95_half']:.2f} (sd {s['stdev']:.2f})"
        )
    out.append("=" * 50)
    return "\n".join(out)

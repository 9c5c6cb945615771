"""Benchmark metrics as pure functions over request records, with vLLM's definitions.

Follows `vllm bench serve` (benchmark_serving.calculate_metrics):
- TTFT: first SSE message carrying `choices`, minus the request's start (taken just before
  the POST, so semaphore wait is excluded and reported separately as client queue time).
- TPOT: per successful request with more than one output token,
  (latency - ttft) / (output_tokens - 1); averaged over requests.
- ITL: gaps between successive messages carrying `choices`, pooled over all requests
  (per chunk, not per token).
- E2EL: last content message minus start.
- Throughputs divide by the measured duration; goodput counts requests meeting every SLO
  (TPOT SLO judged on TPOT that is 0 for single-token outputs, as vLLM does).
- std is the population standard deviation and percentiles interpolate linearly
  (numpy's defaults, which vLLM uses); an empty sample reads as 0, as in vLLM.
- Total input tokens: the server's usage.prompt_tokens of each successful request, else the
  planned prompt length (vLLM's client does the same).
- Peak output throughput and max_concurrent_requests: vLLM's one-second buckets over
  successful requests (the bucket count counts every request touching a second, so it can
  exceed the concurrency limit). `peak_concurrency` is the exact maximum of overlapping
  requests, and is what the summary prints as "Peak concurrent requests".
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence

from pydantic import BaseModel, Field

from proctor.workloads.loadgen.records import RequestRecord

METRIC_KINDS = ("ttft", "tpot", "itl", "e2el", "queue")


class Stat(BaseModel):
    mean: float = 0.0
    median: float = 0.0
    std: float = 0.0
    percentiles: dict[str, float] = Field(default_factory=dict)  # "99" -> value (ms)


class BenchMetrics(BaseModel):
    completed: int = 0
    failed: int = 0
    duration_s: float = 0.0
    max_concurrency: int | None = None
    request_rate: float | None = None  # None = inf
    total_input_tokens: int = 0
    total_output_tokens: int = 0
    request_throughput: float = 0.0
    request_goodput: float | None = None
    output_throughput: float = 0.0
    total_token_throughput: float = 0.0
    max_output_tokens_per_s: float = 0.0
    max_concurrent_requests: float = 0.0
    peak_concurrency: int = 0
    stats_ms: dict[str, Stat] = Field(default_factory=dict)  # kind -> Stat, in ms
    failures_by_reason: dict[str, int] = Field(default_factory=dict)

    def flat(self) -> dict[str, float | int | None]:
        """vLLM result-JSON style keys: mean_ttft_ms, p99_itl_ms, ..."""
        out: dict[str, float | int | None] = {
            "completed": self.completed,
            "failed": self.failed,
            "duration": self.duration_s,
            "max_concurrency": self.max_concurrency,
            "total_input_tokens": self.total_input_tokens,
            "total_output_tokens": self.total_output_tokens,
            "request_throughput": self.request_throughput,
            "request_goodput": self.request_goodput,
            "output_throughput": self.output_throughput,
            "total_token_throughput": self.total_token_throughput,
            "max_output_tokens_per_s": self.max_output_tokens_per_s,
            "max_concurrent_requests": self.max_concurrent_requests,
            "peak_concurrency": self.peak_concurrency,
        }
        for kind, stat in self.stats_ms.items():
            out[f"mean_{kind}_ms"] = stat.mean
            out[f"median_{kind}_ms"] = stat.median
            out[f"std_{kind}_ms"] = stat.std
            for p, value in stat.percentiles.items():
                out[f"p{p}_{kind}_ms"] = value
        return out


def percentile(values: Sequence[float], p: float) -> float:
    """numpy.percentile's default (linear) method."""
    if not values:
        return 0.0
    data = sorted(values)
    rank = (len(data) - 1) * p / 100.0
    lo = math.floor(rank)
    hi = min(lo + 1, len(data) - 1)
    return data[lo] + (data[hi] - data[lo]) * (rank - lo)


def _pct_key(p: float) -> str:
    return f"{p:g}"


def describe(values: Sequence[float], percentiles: Iterable[float], scale: float = 1000.0) -> Stat:
    if not values:
        return Stat(percentiles={_pct_key(p): 0.0 for p in percentiles})
    n = len(values)
    mean = math.fsum(values) / n
    var = math.fsum((v - mean) ** 2 for v in values) / n
    return Stat(
        mean=mean * scale,
        median=percentile(values, 50) * scale,
        std=math.sqrt(var) * scale,
        percentiles={_pct_key(p): percentile(values, p) * scale for p in percentiles},
    )


def _peaks(ok: Sequence[RequestRecord]) -> tuple[float, float]:
    """vLLM's bucketed peaks: max chunks in any second, max requests active in any second."""
    if not ok:
        return 0.0, 0.0
    t0 = min(r.start_time for r in ok)
    t1 = max(r.start_time + r.latency for r in ok)
    n = math.ceil(t1 - t0) + 1
    tokens = [0] * n
    active = [0] * n
    for r in ok:
        t = r.start_time + r.ttft
        times = [t]
        for gap in r.itl:
            t += gap
            times.append(t)
        for tt in times:
            b = int(tt - t0)
            if 0 <= b < n:
                tokens[b] += 1
        for s in range(int(r.start_time - t0), min(int(r.start_time + r.latency - t0) + 1, n)):
            active[s] += 1
    return float(max(tokens)), float(max(active))


def exact_peak_concurrency(records: Sequence[RequestRecord]) -> int:
    events: list[tuple[float, int]] = []
    for r in records:
        if r.start_time <= 0:
            continue
        end = r.end_time if r.end_time >= r.start_time else r.start_time + max(r.latency, 0.0)
        events.append((r.start_time, 1))
        events.append((end, -1))
    events.sort(key=lambda e: (e[0], -e[1]))  # starts first: a zero-length request counts
    cur = best = 0
    for _, delta in events:
        cur += delta
        best = max(best, cur)
    return best


def compute_metrics(
    records: Sequence[RequestRecord],
    duration_s: float,
    *,
    percentiles: Sequence[float] = (99,),
    goodput_slos_ms: dict[str, float] | None = None,
    max_concurrency: int | None = None,
    request_rate: float | None = None,
) -> BenchMetrics:
    """Metrics over the measured (non-warmup) records; warmups are ignored here."""
    measured = [r for r in records if not r.warmup]
    ok = [r for r in measured if r.success]
    ttfts: list[float] = []
    tpots: list[float] = []
    all_tpots: list[float] = []
    itls: list[float] = []
    e2els: list[float] = []
    total_in = total_out = 0
    for r in ok:
        # The server's count of the prompt when it gave one (chat templates add tokens, and
        # --tokenizer-mode approx plans only roughly), as vLLM's client does.
        total_in += r.prompt_len if r.prompt_tokens is None else r.prompt_tokens
        total_out += r.output_tokens
        tpot = 0.0
        if r.output_tokens > 1:
            tpot = (r.latency - r.ttft) / (r.output_tokens - 1)
            tpots.append(tpot)
        all_tpots.append(tpot)
        itls.extend(r.itl)
        ttfts.append(r.ttft)
        e2els.append(r.latency)

    def rate(x: float) -> float:
        return x / duration_s if duration_s > 0 else 0.0

    goodput: float | None = None
    if goodput_slos_ms:
        series = {"ttft": ttfts, "tpot": all_tpots, "e2el": e2els}
        chosen = [(series[k], v / 1000.0) for k, v in goodput_slos_ms.items() if k in series]
        good = sum(1 for i in range(len(ok)) if all(slo >= values[i] for values, slo in chosen))
        goodput = rate(good)

    peak_tok, peak_req = _peaks(ok)
    queue = [r.queue_time for r in measured if r.start_time > 0]
    stats = {
        "ttft": describe(ttfts, percentiles),
        "tpot": describe(tpots, percentiles),
        "itl": describe(itls, percentiles),
        "e2el": describe(e2els, percentiles),
        "queue": describe(queue, percentiles),
    }
    return BenchMetrics(
        completed=len(ok),
        failed=len(measured) - len(ok),
        duration_s=duration_s,
        max_concurrency=max_concurrency,
        request_rate=request_rate,
        total_input_tokens=total_in,
        total_output_tokens=total_out,
        request_throughput=rate(len(ok)),
        request_goodput=goodput,
        output_throughput=rate(total_out),
        total_token_throughput=rate(total_in + total_out),
        max_output_tokens_per_s=peak_tok,
        max_concurrent_requests=peak_req,
        peak_concurrency=exact_peak_concurrency(measured),
        stats_ms=stats,
        failures_by_reason=dict(Counter(r.reason or "unknown" for r in measured if not r.success)),
    )

"""Metric definitions against hand-computed request timelines."""

from __future__ import annotations

import pytest

from proctor.workloads.loadgen.metrics import compute_metrics, percentile
from proctor.workloads.loadgen.records import RequestRecord


def rec(**kw: object) -> RequestRecord:
    base: dict[str, object] = {"index": 0, "prompt_len": 0, "expected_output_len": 0}
    base.update(kw)
    r = RequestRecord(**base)  # type: ignore[arg-type]
    if r.success and not r.end_time:
        r.end_time = r.start_time + r.latency
    return r


def timeline() -> list[RequestRecord]:
    return [
        # A: 4 tokens, TTFT 0.5, chunks at +0.1 +0.2 +0.3 -> latency 1.1
        rec(
            index=0,
            prompt_len=10,
            queued_at=99.0,
            start_time=100.0,
            ttft=0.5,
            itl=[0.1, 0.2, 0.3],
            latency=1.1,
            output_tokens=4,
            success=True,
        ),
        # B: 2 tokens
        rec(
            index=1,
            prompt_len=20,
            queued_at=99.0,
            start_time=100.2,
            ttft=0.3,
            itl=[0.2],
            latency=0.5,
            output_tokens=2,
            success=True,
        ),
        # C: failed after 0.2 s
        rec(
            index=2,
            prompt_len=30,
            queued_at=100.1,
            start_time=100.1,
            end_time=100.3,
            success=False,
            reason="http_error",
            status=500,
        ),
        # D: a single token (no TPOT)
        rec(
            index=3,
            prompt_len=5,
            queued_at=99.0,
            start_time=101.5,
            ttft=0.4,
            latency=0.4,
            output_tokens=1,
            success=True,
        ),
        # warmup: ignored entirely
        rec(
            index=4,
            prompt_len=999,
            warmup=True,
            start_time=50.0,
            ttft=9.0,
            latency=9.0,
            output_tokens=9,
            success=True,
        ),
    ]


def test_counts_and_throughputs() -> None:
    m = compute_metrics(timeline(), 2.0, max_concurrency=8)
    assert (m.completed, m.failed) == (3, 1)
    assert m.total_input_tokens == 35  # failed request's prompt not counted, as vLLM
    assert m.total_output_tokens == 7
    assert m.request_throughput == pytest.approx(1.5)
    assert m.output_throughput == pytest.approx(3.5)
    assert m.total_token_throughput == pytest.approx(21.0)
    assert m.failures_by_reason == {"http_error": 1}


def test_latency_definitions() -> None:
    s = compute_metrics(timeline(), 2.0, percentiles=[50, 99]).stats_ms
    assert s["ttft"].mean == pytest.approx(400.0)
    assert s["ttft"].median == pytest.approx(400.0)
    assert s["ttft"].std == pytest.approx(81.6496581, rel=1e-6)  # population std
    assert s["ttft"].percentiles["99"] == pytest.approx(498.0)  # linear interpolation
    # TPOT per request: A (1.1-0.5)/3, B (0.5-0.3)/1; D has one token and is excluded
    assert s["tpot"].mean == pytest.approx(200.0)
    # ITL pooled over chunks: [0.1, 0.2, 0.3, 0.2]
    assert s["itl"].mean == pytest.approx(200.0)
    assert s["itl"].median == pytest.approx(200.0)
    assert s["itl"].percentiles["99"] == pytest.approx(297.0)
    assert s["e2el"].mean == pytest.approx(2000.0 / 3)
    # queue time over every measured request: 1.0, 1.2, 0.0, 2.5
    assert s["queue"].mean == pytest.approx(1175.0)


def test_goodput_uses_every_slo() -> None:
    m = compute_metrics(timeline(), 2.0, goodput_slos_ms={"ttft": 450, "tpot": 250})
    # A misses TTFT; B and D meet both (D's TPOT counts as 0, as in vLLM)
    assert m.request_goodput == pytest.approx(1.0)
    m2 = compute_metrics(timeline(), 2.0, goodput_slos_ms={"e2el": 450})
    assert m2.request_goodput == pytest.approx(0.5)  # only D


def test_peaks() -> None:
    m = compute_metrics(timeline(), 2.0)
    # vLLM's one-second buckets from t0=100.0: chunks [5, 2, 0], active [2, 2, 0]
    assert m.max_output_tokens_per_s == 5.0
    assert m.max_concurrent_requests == 2.0
    # exact overlap: A [100, 101.1], C [100.1, 100.3], B [100.2, 100.7] -> 3 at 100.2
    assert m.peak_concurrency == 3


def test_empty_and_all_failed_read_zero() -> None:
    m = compute_metrics([rec(success=False, reason="timeout", start_time=1.0)], 1.0)
    assert m.completed == 0 and m.failed == 1
    assert m.stats_ms["ttft"].mean == 0.0 and m.stats_ms["ttft"].percentiles["99"] == 0.0
    assert compute_metrics([], 0.0).request_throughput == 0.0


def test_percentile_matches_numpy_linear() -> None:
    assert percentile([1, 2, 3, 4], 50) == 2.5
    assert percentile([10], 99) == 10
    assert percentile([1, 2, 3, 4, 5], 90) == pytest.approx(4.6)


def test_flat_names_follow_vllm_json() -> None:
    flat = compute_metrics(timeline(), 2.0).flat()
    for key in (
        "completed",
        "failed",
        "total_input_tokens",
        "total_output_tokens",
        "request_throughput",
        "output_throughput",
        "total_token_throughput",
        "duration",
        "mean_ttft_ms",
        "median_tpot_ms",
        "std_itl_ms",
        "p99_e2el_ms",
    ):
        assert key in flat

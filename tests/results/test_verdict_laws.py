"""The verdict's laws, stated for any records hypothesis can draw: each one goes through the
real pipeline (compute_metrics -> result_document -> judge_validity), as a bench would.

- No success means no measurement: never VALID, never a passing error verdict.
- A client that sent every request on time is never INVALID for rate.
- A longer window never turns VALID into INVALID; neither does a longer shortest repeat.
- --max-error-rate R passes exactly when failed / total <= R as the user wrote R.
- More failures never turn a failed error verdict into a passing one.
- The schedule offers the rate asked: the last arrival is at N / rate, arrivals in order.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proctor.results.validity import delay_limit_ms, judge_validity
from proctor.workloads.loadgen.config import BenchConfig
from proctor.workloads.loadgen.metrics import compute_metrics
from proctor.workloads.loadgen.records import RequestRecord
from proctor.workloads.loadgen.runner import BenchResult, result_document
from proctor.workloads.loadgen.scheduler import arrival_offsets
from proctor.workloads.loadgen.verdict import judge

LAWS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def records(
    draw: st.DrawFn,
    *,
    rate: float | None = None,
    on_time: bool = False,
    min_size: int = 1,
    max_size: int = 60,
) -> list[RequestRecord]:
    n = draw(st.integers(min_size, max_size))
    due = sorted(draw(st.lists(st.floats(0, 30), min_size=n, max_size=n)))
    limit = delay_limit_ms(rate) / 1000 if rate else 5.0
    out = []
    for i, at in enumerate(due):
        ok = draw(st.booleans())
        delay = draw(st.floats(0, limit * (1 - 1e-9) if on_time else 5.0))  # rounding of + and -
        ttft = draw(st.floats(1e-4, 2.0))
        itl = draw(st.lists(st.floats(1e-5, 0.5), max_size=6)) if ok else []
        start = 100.0 + at + delay
        rec = RequestRecord(
            index=i,
            prompt_len=draw(st.integers(1, 64)),
            expected_output_len=8,
            queued_at=100.0 + at,
            start_time=start,
            success=ok,
            reason="" if ok else "http_error",
        )
        if ok:
            rec.ttft, rec.itl = ttft, itl
            rec.latency = ttft + sum(itl)
            rec.output_tokens = len(itl) + 1
        rec.end_time = start + (rec.latency if ok else ttft)
        out.append(rec)
    return out


def document(recs: list[RequestRecord], **cfg: Any) -> dict[str, Any]:
    config = BenchConfig(**{"min_requests": 0, "min_window_s": 0.0, "num_warmups": 2, **cfg})
    span = max(r.end_time for r in recs) - min(r.queued_at for r in recs)
    warm = [
        RequestRecord(index=-1 - i, prompt_len=1, expected_output_len=1, warmup=True, success=True)
        for i in range(2)
    ]
    metrics = compute_metrics(
        recs, span, max_concurrency=config.concurrency, request_rate=config.rate_or_none
    )
    res = BenchResult(config, "m", metrics, warm + recs, "test", "", "")
    return result_document(res)


@LAWS
@given(recs=records(), limit=st.floats(0, 1))
def test_no_success_is_never_valid(recs: list[RequestRecord], limit: float) -> None:
    for r in recs:
        r.success, r.reason = False, "http_error"
    doc = document(recs, max_error_rate=limit)
    assert doc["verdict"]["ok"] is False
    assert doc["validity"]["verdict"] == "INVALID"
    assert doc["validity"]["checks"]["errors"]["ok"] is False


@LAWS
@given(data=st.data(), rate=st.floats(0.1, 20000))
def test_a_client_on_time_is_never_invalid_for_rate(data: st.DataObject, rate: float) -> None:
    recs = data.draw(records(rate=rate, on_time=True))
    doc = document(recs, request_rate=rate, max_error_rate=1.0)
    assert doc["validity"]["checks"]["rate"]["ok"] is True, doc["validity"]["checks"]["rate"]


@LAWS
@given(recs=records(), rate=st.floats(0.1, 1000), late_s=st.floats(0.06, 30))
def test_a_client_late_for_most_requests_is_invalid_for_rate(
    recs: list[RequestRecord], rate: float, late_s: float
) -> None:
    for r in recs:
        r.start_time = r.queued_at + late_s  # every request left late_s behind its time
    doc = document(recs, request_rate=rate, max_error_rate=1.0)
    assert doc["validity"]["checks"]["rate"]["ok"] is False


def _base(duration: float, per_repeat: list[float] | None) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "verdict": {"ok": True},
        "warmup": {"count": 1, "failed": 0},
        "metrics": {"completed": 200, "failed": 0, "duration": duration},
        "config": {"request_rate": "inf"},
    }
    if per_repeat is not None:
        doc["repeats"] = {"per_repeat": [{"duration": d} for d in per_repeat]}
    return doc


@LAWS
@given(
    window=st.floats(0, 100),
    more=st.floats(0, 100),
    need=st.floats(0, 50),
    repeats=st.none() | st.lists(st.floats(0, 50), min_size=2, max_size=5),
)
def test_a_longer_window_never_turns_valid_into_invalid(
    window: float, more: float, need: float, repeats: list[float] | None
) -> None:
    def verdict(d: float, per: list[float] | None) -> str:
        return judge_validity(_base(d, per), None, min_requests=0, min_window_s=need).verdict

    longer = None if repeats is None else [d + more for d in repeats]
    if verdict(window, repeats) == "VALID":
        assert verdict(window + more, longer) == "VALID"
    if repeats is not None:  # the repeats' sum never stands in for each repeat's window
        total = math.fsum(repeats)
        assert (verdict(total, repeats) == "VALID") == (min(repeats) >= need)


@LAWS
@given(total=st.integers(2, 400), data=st.data())
def test_the_error_limit_is_the_decimal_written(total: int, data: st.DataObject) -> None:
    failed = data.draw(st.integers(0, total - 1))
    places = data.draw(st.integers(1, 4))
    limit = float(f"{failed / total:.{places}f}")
    recs = [
        RequestRecord(
            index=i,
            prompt_len=1,
            expected_output_len=1,
            success=i >= failed,
            reason="" if i >= failed else "http_error",
        )
        for i in range(total)
    ]
    exact = failed * 10**places <= round(limit * 10**places) * total
    assert judge(recs, limit).ok is exact
    if failed:  # more failures never pass what fewer failed
        worse = [
            RequestRecord(index=i, prompt_len=1, expected_output_len=1, success=i >= failed + 1)
            for i in range(total)
        ]
        if not judge(recs, limit).ok:
            assert not judge(worse, limit).ok


@LAWS
@given(
    n=st.integers(1, 500),
    rate=st.floats(0.01, 1e5),
    seed=st.integers(0, 2**32),
    burstiness=st.floats(0.05, 50) | st.just(math.inf),
)
def test_the_schedule_offers_the_rate_asked(
    n: int, rate: float, seed: int, burstiness: float
) -> None:
    offs = arrival_offsets(n, rate, burstiness, seed)
    assert len(offs) == n and offs[-1] == pytest.approx(n / rate, rel=1e-9)
    assert all(b >= a for a, b in itertools.pairwise(offs)) and offs[0] >= 0

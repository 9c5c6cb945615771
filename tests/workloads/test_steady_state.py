"""The steady-state window (issue 23 point 3) against schedules whose plateau is known exactly,
and against a server whose timings bound what any window can measure."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proctor.workloads.loadgen.metrics import compute_metrics
from proctor.workloads.loadgen.records import RequestRecord
from proctor.workloads.loadgen.steady import NEAR_PEAK, plateau, steady_state, window_report
from tests.fixtures.fake_openai_server import FakeServer
from tests.helpers import proctor

pytestmark = pytest.mark.timeout(180)


def closed_loop(streams: int, per_stream: int, dur: float, osl: int) -> list[RequestRecord]:
    """`streams` clients, each sending `per_stream` requests back to back, stream s starting at
    s * dur / streams; each request lasts `dur` with its `osl` chunks evenly spaced."""
    gap = dur / osl
    out: list[RequestRecord] = []
    for s in range(streams):
        t0 = 1.0 + s * dur / streams
        for _ in range(per_stream):
            out.append(
                RequestRecord(
                    index=len(out),
                    prompt_len=8,
                    expected_output_len=osl,
                    start_time=t0,
                    ttft=gap,
                    itl=[gap] * (osl - 1),
                    latency=dur,
                    end_time=t0 + dur,
                    output_tokens=osl,
                    success=True,
                )
            )
            t0 = out[-1].end_time  # back to back: the next starts as this one ends
    return out


@given(st.integers(1, 16), st.integers(3, 12), st.floats(0.05, 5.0), st.integers(2, 64))
def test_the_window_of_a_closed_loop_is_its_plateau(
    streams: int, per_stream: int, dur: float, osl: int
) -> None:
    recs = closed_loop(streams, per_stream, dur, osl)
    found = plateau(recs)
    assert found is not None
    peak, threshold, opens, closes = found
    assert peak == streams and threshold == max(1, math.ceil(NEAR_PEAK * streams))
    # Opens when the threshold-th stream starts; closes when the one after the first
    # (streams - threshold) finished streams ends: both known from the schedule.
    step = dur / streams
    assert opens == pytest.approx(1.0 + (threshold - 1) * step)
    assert closes == pytest.approx(1.0 + (streams - threshold) * step + per_stream * dur)
    w = window_report(recs, [99])
    rate = osl / dur  # tokens per second of one stream
    span = w["duration_s"]
    slack = streams * 2 / span  # a chunk or request at each edge of each stream
    assert threshold * rate - slack <= w["output_throughput"] <= streams * rate + slack
    assert threshold / dur - slack <= w["request_throughput"] <= streams / dur + slack
    whole = compute_metrics(recs, max(r.end_time for r in recs) - min(r.start_time for r in recs))
    assert w["output_throughput"] >= whole.output_throughput * (1 - 1e-9) - slack
    if w["requests_inside"] >= 2:
        assert w["mean_e2el_ms"] == pytest.approx(dur * 1000)
        assert w["mean_itl_ms"] == pytest.approx(dur / osl * 1000)


def test_no_plateau_without_requests_and_one_window_per_repeat() -> None:
    assert window_report([], [99]) == {"found": False, "reason": "no request was sent"}
    a = closed_loop(4, 5, 0.5, 10)
    b = [
        RequestRecord(
            **{
                **r.to_dict(),
                "repeat": 1,
                "start_time": r.start_time + 100,
                "end_time": r.end_time + 100,
            }
        )
        for r in a
    ]
    both = steady_state(a + b, [99], repeats=2)
    assert both["found"] is True and len(both["per_repeat"]) == 2
    one = window_report(a, [99])
    # The gap between repeats is not part of any window: each equals the repeat alone.
    assert both["per_repeat"][0]["duration_s"] == pytest.approx(one["duration_s"])
    assert both["per_repeat"][1]["duration_s"] == pytest.approx(one["duration_s"])


def test_a_bench_reports_the_window_within_the_servers_known_speed(isolated_runs: Path) -> None:
    ttft, itl, osl, conc = 0.05, 0.01, 10, 4
    with FakeServer(ttft=ttft, itl=itl) as srv:
        r = proctor(
            "bench",
            "--base-url",
            srv.base_url,
            "--isl",
            "8",
            "--osl",
            str(osl),
            "--range-ratio",
            "0",
            "--num-prompts",
            "24",
            "--concurrency",
            str(conc),
            "--num-warmups",
            "0",
            "--min-requests",
            "1",
            "--min-window",
            "0",
            "--tokenizer-mode",
            "approx",
        )
    assert r.returncode == 0, r.stderr
    run = next(p for p in isolated_runs.iterdir() if p.is_dir() and not p.name.startswith("."))
    doc = json.loads((run / "metrics.json").read_text())
    w = doc["steady_state"]
    assert w["found"] is True and w["peak_in_flight"] == conc
    # No window can be faster than the server's own timings allow (whatever the load here),
    # and the plateau is never slower than the whole run that includes ramp-up and drain-out.
    fastest = conc * osl / (ttft + (osl - 1) * itl)
    assert w["output_throughput"] <= fastest * 1.02
    assert w["output_throughput"] >= doc["metrics"]["output_throughput"] * 0.95
    assert 0 < w["fraction_of_run"] <= 1
    assert "Steady state:" in r.stdout + r.stderr
    # The report's timeline marks where ramp-up ends and drain-out begins.
    page = isolated_runs / "page.html"
    rep = proctor("report", str(run), "-o", str(page))
    assert rep.returncode == 0, rep.stderr
    html = page.read_text(encoding="utf-8")
    assert '"text": "plateau"' in html or '"text":"plateau"' in html
    assert "drain-out" in html


@given(st.lists(st.tuples(st.floats(0.0, 50.0), st.floats(0.0, 5.0), st.booleans()), max_size=30))
def test_any_records_give_a_window_or_a_reason_never_a_crash(
    spans: list[tuple[float, float, bool]],
) -> None:
    """Zero-length requests (a refused connection ends the instant it starts) included: CI
    found a bench of only such requests crashing the window (its end sorted before its start)."""
    recs = [
        RequestRecord(
            index=i,
            prompt_len=1,
            expected_output_len=8,
            start_time=start,
            latency=length,
            end_time=start + length,
            success=ok,
            output_tokens=8 if ok else 0,
            ttft=length / 2,
            itl=[],
        )
        for i, (start, length, ok) in enumerate(spans)
    ]
    found = plateau(recs)
    if not any(r.start_time > 0 for r in recs):
        assert found is None
        return
    assert found is not None
    peak, threshold, opens, closes = found
    in_flight = [r for r in recs if r.start_time > 0 and r.end_time > r.start_time]
    assert 0 <= peak <= len(in_flight) and threshold >= 1 and opens <= closes
    w = window_report(recs, [99])
    assert w["found"] == (w["duration_s"] > 0)
    if not w["found"]:
        assert w["reason"]

"""The one sweep engine (workloads/sweep_engine.py): the SLO search's bisection as laws over
every monotone oracle (hypothesis), and the home run's lifecycle (finished once, the summary
written first, stopped on Ctrl-C, unknown when the controller fails) on real run directories."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proctor.spec.config import ProjectConfig
from proctor.workloads.sweep_engine import Bisection, SweepHome, bisect, drive, each


def _search(
    lo: float, hi: float, step: float, integer: bool, max_probes: int, threshold: float
) -> tuple[list[float], Bisection]:
    """Bisect against a server that meets the SLO at every value <= threshold."""
    plan = bisect(
        lo, hi, step=step, integer=integer, max_probes=max_probes, meets=lambda v: v <= threshold
    )
    return drive(plan, lambda value: value)


@settings(max_examples=300, deadline=None)
@given(
    lo=st.integers(1, 500),
    span=st.integers(1, 5000),
    threshold=st.floats(0, 6000, allow_nan=False),
    max_probes=st.integers(2, 30),
)
def test_an_integer_search_finds_the_highest_meeting_value_within_its_probes(
    lo: int, span: int, threshold: float, max_probes: int
) -> None:
    hi = lo + span
    probes, end = _search(lo, hi, 1.0, True, max_probes, threshold)
    assert len(probes) <= max(2, max_probes)
    assert probes[:2] == [lo, hi][: len(probes)]
    assert len(set(probes)) == len(probes)  # no value probed twice
    assert all(lo <= p <= hi and p == int(p) for p in probes)
    if threshold < lo:
        assert end == Bisection(None, "lo-misses") and probes == [lo]
        return
    assert end.answer is not None
    assert end.answer <= threshold  # the answer itself met the SLO
    assert end.answer in probes
    best = min(hi, math.floor(threshold))
    if end.why in ("resolution", "no-room", "hi-meets"):
        assert end.answer == best  # exact: integer steps of 1 leave no gap
    else:
        assert end.why == "max-probes" and len(probes) == max_probes


@settings(max_examples=200, deadline=None)
@given(
    lo=st.floats(0.1, 100),
    span=st.floats(1, 1000),
    threshold=st.floats(0, 1200, allow_nan=False),
    step_share=st.floats(0.001, 0.5),
)
def test_a_rate_search_ends_within_its_resolution_of_the_threshold(
    lo: float, span: float, threshold: float, step_share: float
) -> None:
    hi = lo + span
    step = hi * step_share
    _, end = _search(lo, hi, step, False, 60, threshold)
    if threshold < lo:
        assert end.answer is None
        return
    assert end.answer is not None and end.answer <= threshold
    if threshold >= hi:
        assert end == Bisection(hi, "hi-meets")
    else:
        assert end.why == "resolution"
        assert threshold - end.answer <= step + 1e-6  # the gap left is at most the resolution


def test_a_probe_that_says_nothing_stops_the_search_with_what_is_known() -> None:
    answers = iter([True, False, None])  # lo meets, hi misses, the middle's server is gone
    plan = bisect(10, 100, step=1, integer=True, max_probes=12, meets=lambda _: next(answers))
    probes, end = drive(plan, lambda value: value)
    assert probes == [10, 100, 55]
    assert end == Bisection(10, "broken")


def _home(tmp_path: Path, summaries: list[int], points: list[int]) -> SweepHome:
    return SweepHome(
        tmp_path / "runs",
        ProjectConfig(),
        kind="sweep",
        name="engine-test",
        fields={"points": []},
        summarize=lambda: summaries.append(len(points)),
    )


def _record(home: SweepHome) -> dict[str, object]:
    data: dict[str, object] = json.loads((home.run.path / "record.json").read_text())
    return data


def test_a_home_ends_once_with_the_code_its_points_decide(tmp_path: Path) -> None:
    summaries: list[int] = []
    done: list[int] = []
    home = _home(tmp_path, summaries, done)
    with home:
        results, end = drive(each([1, 2, 3]), lambda p: p * 10, after=lambda r: done.append(r[-1]))
    assert results == [10, 20, 30] and end is None
    home.finish(3)
    record = _record(home)
    assert record["outcome"] == "failed" and record["exit_code"] == 3
    assert record["kind"] == "sweep" and record["name"] == "engine-test"
    assert summaries == [3]  # written before the end


def test_a_stop_mid_sweep_writes_the_points_so_far_and_ends_stopped(tmp_path: Path) -> None:
    summaries: list[int] = []
    done: list[int] = []
    home = _home(tmp_path, summaries, done)

    def run_point(p: int) -> int:
        if p == 3:
            raise KeyboardInterrupt  # Ctrl-C while the third point runs
        done.append(p)
        return p

    with pytest.raises(KeyboardInterrupt), home:
        drive(each([1, 2, 3, 4]), run_point)
    record = _record(home)
    assert record["outcome"] == "stopped" and record["exit_code"] == 130
    assert summaries == [2]  # the two finished points were summarized before the end


def test_a_controller_that_fails_leaves_an_unknown_sweep_not_a_running_one(tmp_path: Path) -> None:
    summaries: list[int] = []
    home = _home(tmp_path, summaries, [])
    with pytest.raises(RuntimeError), home:
        drive(each([1]), lambda p: (_ for _ in ()).throw(RuntimeError("disk gone")))
    record = _record(home)
    assert record["outcome"] == "unknown" and record.get("exit_code") is None
    assert "disk gone" in json.dumps(record)

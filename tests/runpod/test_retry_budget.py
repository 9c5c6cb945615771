"""Bounded retry, poll and budget arithmetic, driven by a scripted clock (no real sleeping)."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest

from proctor.errors import TargetUnavailable, TimeLimitReached, UsageError
from proctor.targets.runpod.budget import Budget, cost_of, watchdog_argv, watchdog_source
from proctor.targets.runpod.retry import Backoff, poll, retry


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def failing(messages: list[str]) -> tuple[list[int], Callable[[], str]]:
    calls = [0]

    def attempt() -> str:
        calls[0] += 1
        if calls[0] <= len(messages):
            raise TargetUnavailable(messages[calls[0] - 1])
        return "ok"

    return calls, attempt


def test_same_error_twice_without_new_evidence_stops() -> None:
    clock = FakeClock()
    calls, attempt = failing(["sold out", "sold out", "sold out"])
    with pytest.raises(TargetUnavailable) as e:
        retry(attempt, deadline=clock() + 1000, clock=clock, sleep=clock.sleep)
    assert calls[0] == 2 and "same error twice" in e.value.message


def test_new_evidence_keeps_retrying_with_backoff() -> None:
    clock = FakeClock()
    calls, attempt = failing(["a", "a", "a"])
    evidence = iter(range(10))
    result = retry(
        attempt,
        deadline=clock() + 1000,
        evidence=lambda: next(evidence),
        backoff=Backoff(initial=1, factor=2, maximum=3),
        clock=clock,
        sleep=clock.sleep,
    )
    assert result == "ok" and calls[0] == 4 and clock.sleeps == [1, 2, 3]


def test_different_errors_retry_until_the_deadline() -> None:
    clock = FakeClock()
    calls, attempt = failing([f"e{i}" for i in range(100)])
    with pytest.raises(TargetUnavailable) as e:
        retry(
            attempt, deadline=clock() + 10, backoff=Backoff(2, 1, 2), clock=clock, sleep=clock.sleep
        )
    assert "budget spent" in e.value.message
    assert clock.now <= 1010 and calls[0] == 6


def test_other_errors_are_not_retried() -> None:
    clock = FakeClock()

    def attempt() -> None:
        raise UsageError("bad flag")

    with pytest.raises(UsageError):
        retry(attempt, deadline=clock() + 100, clock=clock, sleep=clock.sleep)
    assert clock.sleeps == []


def test_poll_gives_none_at_deadline_without_overshooting() -> None:
    clock = FakeClock()
    assert (
        poll(
            lambda: None,
            deadline=clock() + 5,
            backoff=Backoff(2, 2, 10),
            clock=clock,
            sleep=clock.sleep,
        )
        is None
    )
    assert clock.now == 1005


def test_budget_deadline_is_the_first_limit() -> None:
    b = Budget(started_at=0, max_time_s=7200, max_cost=10)
    assert b.deadline(cost_per_hr=10) == 3600  # cost runs out first
    assert b.deadline(cost_per_hr=1) == 7200
    assert Budget(started_at=0).deadline(5) == math.inf
    assert cost_of(3.6, 1800) == pytest.approx(1.8)


def test_budget_check_raises_time_limit() -> None:
    b = Budget(started_at=0, max_cost=1.0)
    b.check(now=1799, cost_per_hr=2.0)
    with pytest.raises(TimeLimitReached) as e:
        b.check(now=1800, cost_per_hr=2.0)
    assert "cost budget" in e.value.message and e.value.exit_code == 4


@pytest.mark.parametrize("bad", [0, -1, math.nan])
def test_budget_rejects_nonsense(bad: float) -> None:
    with pytest.raises(UsageError):
        Budget(started_at=0, max_time_s=bad)


def test_watchdog_argv_carries_no_key_and_both_limits() -> None:
    argv = watchdog_argv(Budget(started_at=100, max_time_s=60, max_cost=2), 4.0, script="/w.py")
    assert argv[:2] == ["python3", "/w.py"]
    assert argv[argv.index("--deadline") + 1] == "160.000"
    assert argv[argv.index("--cost-per-hr") + 1] == "4.0"
    assert "RUNPOD_API_KEY" not in " ".join(argv)
    assert "def main" in watchdog_source()
    with pytest.raises(UsageError):
        watchdog_argv(Budget(started_at=0), 1.0, script="/w.py")

"""Time and cost budget of a Runpod run, from the pods' costPerHr.

The controller checks it between steps; the same numbers go to the on-pod watchdog
(`watchdog.py`), which stops the pod itself when the budget is spent.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import resources

from proctor.errors import TimeLimitReached, UsageError
from proctor.targets.runpod.models import Pod


def total_cost_per_hr(pods: Iterable[Pod]) -> float:
    """Sum of costPerHr over the pods; a pod without a price is an error (cost unknowable)."""
    total = 0.0
    for pod in pods:
        if pod.costPerHr is None:
            raise UsageError(
                f"pod {pod.id} reports no costPerHr, so a cost budget cannot be enforced",
                hint="drop --max-cost or use --max-time",
            )
        total += pod.costPerHr
    return total


def cost_of(cost_per_hr: float, seconds: float) -> float:
    return cost_per_hr * max(0.0, seconds) / 3600.0


@dataclass(frozen=True)
class Budget:
    """`max_time_s` and `max_cost` (Runpod credits, i.e. USD); either may be None (unlimited)."""

    started_at: float
    max_time_s: float | None = None
    max_cost: float | None = None

    def __post_init__(self) -> None:
        for name, value in (("--max-time", self.max_time_s), ("--max-cost", self.max_cost)):
            if value is not None and (not math.isfinite(value) or value <= 0):
                raise UsageError(f"{name} must be a positive number, got {value}")

    @classmethod
    def starting_now(cls, max_time_s: float | None = None, max_cost: float | None = None) -> Budget:
        return cls(started_at=time.time(), max_time_s=max_time_s, max_cost=max_cost)

    def deadline(self, cost_per_hr: float | None = None) -> float:
        """Epoch seconds when the first of the two limits is spent (inf when neither is set)."""
        ends = [math.inf]
        if self.max_time_s is not None:
            ends.append(self.started_at + self.max_time_s)
        if self.max_cost is not None and cost_per_hr:
            ends.append(self.started_at + self.max_cost / cost_per_hr * 3600.0)
        return min(ends)

    def spent(self, now: float, cost_per_hr: float | None = None) -> float:
        return cost_of(cost_per_hr or 0.0, now - self.started_at)

    def check(self, now: float | None = None, cost_per_hr: float | None = None) -> None:
        """Raise TimeLimitReached (exit 4) once either limit is spent."""
        now = time.time() if now is None else now
        if now < self.deadline(cost_per_hr):
            return
        elapsed = now - self.started_at
        if self.max_time_s is not None and elapsed >= self.max_time_s:
            raise TimeLimitReached(
                f"time budget spent: {elapsed:.0f}s of --max-time {self.max_time_s:.0f}s",
                hint="raise --max-time to allow a longer run",
            )
        raise TimeLimitReached(
            f"cost budget spent: about {self.spent(now, cost_per_hr):.2f} of --max-cost "
            f"{self.max_cost:.2f} at {cost_per_hr:.2f}/hr",
            hint="raise --max-cost to allow a costlier run",
        )


def watchdog_source() -> str:
    """The on-pod watchdog script, to upload to the pod's volume (stdlib only)."""
    return (resources.files("proctor.targets.runpod") / "watchdog.py").read_text("utf-8")


def watchdog_argv(
    budget: Budget,
    cost_per_hr: float | None,
    *,
    script: str,
    python: str = "python3",
    state_file: str | None = None,
) -> list[str]:
    """The command that starts the watchdog on the pod. No key in it: the pod has its own in env.

    The remote side runs it detached (setsid/nohup) so it outlives the SSH session.
    """
    argv = [python, script, "--started-at", f"{budget.started_at:.3f}"]
    if budget.max_time_s is not None:
        argv += ["--deadline", f"{budget.started_at + budget.max_time_s:.3f}"]
    if budget.max_cost is not None:
        if not cost_per_hr:
            raise UsageError(
                "--max-cost needs the pod's costPerHr, which the API did not report",
                hint="use --max-time instead",
            )
        argv += ["--max-cost", f"{budget.max_cost}", "--cost-per-hr", f"{cost_per_hr}"]
    if budget.max_time_s is None and budget.max_cost is None:
        raise UsageError("the watchdog needs --max-time or --max-cost")
    if state_file:
        argv += ["--state-file", state_file]
    return argv

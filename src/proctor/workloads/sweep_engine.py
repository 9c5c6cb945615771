"""The one sweep engine: a concurrency sweep, an SLO search and a server grid are each a plan of
points run under one home run directory.

- `SweepHome` is that directory (kind "sweep", "slo-search" or "server-sweep"): its record is
  started with the sweep's own fields, the run is held (`controlling`: SIGTERM is a stop) while
  points run, and it is finished exactly once: by `finish` with the code the points decide, as
  stopped (130) on Ctrl-C or `runs stop`, or as unknown (no exit status) when the controller
  itself failed. The summary so far is written first in every case, so points already
  measured are kept whatever happens to a later one.
- A plan is a generator: it yields the next point, is sent that point's result, and returns
  how the sweep ended. A sweep's plan yields its concurrencies, a grid's its server points
  (stopping after an interrupted one), an SLO search's bisects (`bisect`).
- `drive` runs a plan: each point through the sweep's own runner (a bench run, or a flow), the
  summary rewritten after each (workloads/summary.py is the one writer of what it holds).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

from proctor.errors import ExitCode
from proctor.record.recorder import Recorder
from proctor.record.rundir import RunDir
from proctor.spec.config import ProjectConfig
from proctor.spec.plan import resolve_runs_dir, resolve_store_path
from proctor.supervise.controller import controller_fields, controlling
from proctor.supervise.sigterm import SigtermStop
from proctor.version import __version__

P = TypeVar("P")  # a point of the plan
R = TypeVar("R")  # what running a point gave
T = TypeVar("T")  # how the plan ended

Plan = Generator[P, R, T]


class SweepHome:
    """The run directory a sweep of any kind lives in; a context manager around its points."""

    def __init__(
        self,
        runs_dir: str | Path | None,
        config: ProjectConfig,
        *,
        kind: str,
        name: str,
        fields: dict[str, Any],
        summarize: Callable[[], object] = lambda: None,
    ) -> None:
        self.kind = kind
        self.runs_root = Path(resolve_runs_dir(str(runs_dir) if runs_dir else None, config).value)
        self.recorder = Recorder.create(self.runs_root)
        self.store_path = str(resolve_store_path(config, self.runs_root).value)
        self.record: dict[str, Any] = self.recorder.start(
            {
                "name": name,
                "kind": kind,
                **controller_fields(Path.cwd(), self.runs_root, Path(self.store_path)),
                **fields,
                "proctor_version": __version__,
                "outcome": "running",
            }
        )
        self.summarize = summarize  # writes the summary of the points so far
        self._held: Any = None

    @property
    def run(self) -> RunDir:
        return self.recorder.run

    def __enter__(self) -> SweepHome:
        self._held = controlling(self.recorder)
        self._term: SigtermStop = self._held.__enter__()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            if error is None:
                return
            self._term.disarm()  # a second SIGTERM must not cut the ending short
            self.summarize()
            if isinstance(error, KeyboardInterrupt):  # Ctrl-C, or `runs stop` (Stopped)
                self._end(int(ExitCode.INTERRUPTED), "stopped", reason="stopped")
            else:  # no status can be established for a sweep whose controller failed
                self._end(None, "unknown", error=repr(error))
        finally:
            self._held.__exit__(None, None, None)

    def finish(self, code: int, *, stopped: bool = False, **fields: Any) -> None:
        """The summary, then the record's end: ok (0), stopped (a point was interrupted) or
        failed; `fields` are recorded first."""
        self._term.disarm()  # a SIGTERM now is too late to stop anything: the end runs out
        if fields:
            self.recorder.update(**fields)
        self.summarize()
        outcome = "ok" if code == 0 else "stopped" if stopped else "failed"
        self._end(code, outcome, reason="stopped" if stopped else None)

    def _end(self, code: int | None, outcome: str, **how: Any) -> None:
        self.recorder.finish(
            code=code, outcome=outcome, store_path=self.store_path, who=self.kind, **how
        )


def drive(
    plan: Plan[P, R, T],
    run_point: Callable[[P], R],
    *,
    after: Callable[[list[R]], None] = lambda _: None,
) -> tuple[list[R], T]:
    """Run `plan` to its end: each point it yields through `run_point`, `after` given every
    result so far; (the results, what the plan returned)."""
    results: list[R] = []
    try:
        point = next(plan)
        while True:
            result = run_point(point)
            results.append(result)
            after(results)
            point = plan.send(result)
    except StopIteration as end:
        return results, end.value


def each(points: list[P]) -> Plan[P, Any, None]:
    """The plan of a fixed list of points, every one run whatever the others gave."""
    # Not `yield from`: that delegates send() to the list's iterator, which has none.
    for point in points:  # noqa: UP028
        yield point


@dataclass(frozen=True)
class Bisection:
    """How a bisection ended: the highest value known to meet (None: even `lo` missed), and
    why it stopped ("lo-misses", "hi-meets", "resolution", "max-probes", "broken", "no-room")."""

    answer: float | None
    why: str


def bisect(
    lo: float,
    hi: float,
    *,
    step: float,
    integer: bool,
    max_probes: int,
    meets: Callable[[Any], bool | None],
) -> Plan[float, Any, Bisection]:
    """The plan of an SLO search: probe `lo`, then `hi`, then middles, for the highest value in
    [lo, hi] that meets; `meets(result)` says whether a probe met (None: the probe says
    nothing, e.g. the server was unreachable, and the search stops there)."""
    probes = 1
    low = meets((yield lo))
    if low is None:
        return Bisection(None, "broken")
    if not low:
        return Bisection(None, "lo-misses")
    probes += 1
    high = meets((yield hi))
    if high is None:
        return Bisection(lo, "broken")
    if high:
        return Bisection(hi, "hi-meets")
    good, bad = lo, hi
    while bad - good > step:
        if probes >= max_probes:
            return Bisection(good, "max-probes")
        middle = (good + bad) / 2
        middle = float(math.floor(middle)) if integer else round(middle, 6)
        if middle <= good:
            return Bisection(good, "no-room")
        probes += 1
        met = meets((yield middle))
        if met is None:
            return Bisection(good, "broken")
        good, bad = (middle, bad) if met else (good, middle)
    return Bisection(good, "resolution")


__all__ = ["Bisection", "Plan", "SweepHome", "bisect", "drive", "each"]

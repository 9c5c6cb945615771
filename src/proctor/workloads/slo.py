"""SLO search: the highest request rate (or concurrency) at which a bench meets a goodput SLO.

Bisection against one running server; each probe is a supervised bench run grouped under the
search's own run directory (kind "slo-search"), whose result.json holds every probe and the
answer. A probe meets the SLO when the bench exited 0 and every condition holds on its
metrics.json (`p99_ttft_ms<=500`: the bench's p99 TTFT at most 500 ms).

    lo meets? no  -> no answer (exit 3)       hi meets? yes -> hi (the range's top)
    else keep lo meeting, hi failing; probe the middle until hi - lo <= resolution
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from proctor.errors import ExitCode, UsageError
from proctor.jobs.argv import job_argv
from proctor.jobs.bench import BenchJob
from proctor.jobs.documents import (
    SLO_SCHEMA,
    SLO_VERSION,
    BenchDocument,
    SloProbe,
    SloSearchResult,
    bench_document,
)
from proctor.jobs.sweep import AXIS_FIELDS, SweepJob
from proctor.record.rundir import RunDir
from proctor.spec.config import ProjectConfig
from proctor.workloads.summary import write_summary
from proctor.workloads.sweep import run_bench_point
from proctor.workloads.sweep_engine import SweepHome, bisect, drive

AXES = AXIS_FIELDS  # search axis -> the bench field it sets
_OPS: dict[str, Callable[[float, float], bool]] = {
    "<=": operator.le,
    ">=": operator.ge,
    "<": operator.lt,
    ">": operator.gt,
}
_CONDITION = re.compile(r"^\s*([A-Za-z0-9_.]+)\s*(<=|>=|<|>)\s*([0-9.eE+-]+)\s*$")


@dataclass(frozen=True)
class Condition:
    metric: str
    op: str
    limit: float

    def holds(self, value: float | None) -> bool:
        return value is not None and _OPS[self.op](value, self.limit)

    def __str__(self) -> str:
        return f"{self.metric}{self.op}{self.limit:g}"


def parse_slo(text: str) -> list[Condition]:
    """`p99_ttft_ms<=500,p99_tpot_ms<=30` -> conditions on metrics.json's metric names."""
    conditions = []
    for part in (p for p in text.split(",") if p.strip()):
        match = _CONDITION.match(part)
        if not match:
            hint = 'write e.g. --slo "p99_ttft_ms<=500,p99_tpot_ms<=30"'
            raise UsageError(f"invalid SLO condition {part!r}", hint=hint)
        try:
            limit = float(match.group(3))
        except ValueError:
            raise UsageError(f"invalid SLO limit in {part!r}") from None
        conditions.append(Condition(match.group(1), match.group(2), limit))
    if not conditions:
        raise UsageError("--slo needs at least one condition, e.g. p99_ttft_ms<=500")
    return conditions


def percentiles_needed(conditions: list[Condition]) -> list[str]:
    """The bench must report the percentiles the SLO names (p90_ttft_ms needs --percentiles 90)."""
    found = {m.group(1) for c in conditions if (m := re.match(r"^p(\d+(?:\.\d+)?)_", c.metric))}
    return sorted(found, key=float)


@dataclass
class Probe:
    value: float
    run_id: str
    exit_code: int | None
    metrics: dict[str, float]
    met: bool
    why: list[str] = field(default_factory=list)

    def row(self) -> dict[str, Any]:
        return {
            "value": self.value,
            "run_id": self.run_id,
            "exit_code": self.exit_code,
            "met": self.met,
            "why": self.why,
            "metrics": self.metrics,
        }


@dataclass
class SloResult:
    dir: RunDir
    axis: str
    answer: float | None
    probes: list[Probe]
    exit_code: int
    error: str | None = None  # why the search could not judge (exit 64), for the caller to say


#: A probe at a request rate counts only if the client sent at least this share of it.
MIN_ACHIEVED = 0.95


def delivery(doc: BenchDocument) -> tuple[bool, list[str]]:
    """Whether the bench put the load it names on the server (metrics.json "schedule": a rate
    the client did not reach is not that rate), and notes on the client's headroom."""
    why: list[str] = []
    schedule = doc.schedule
    target = schedule.target_rate if schedule else None
    achieved = schedule.achieved_rate if schedule else None
    ok = True
    if target is not None and achieved is not None and achieved < MIN_ACHIEVED * target:
        ok = False
        why.append(
            f"achieved {achieved:.2f} req/s of {target:g} (below "
            f"{MIN_ACHIEVED:.0%}: the client fell behind, so not this rate)"
        )
    client = doc.client
    if client is not None and client.client_bound:
        why.append("note: client-bound (" + "; ".join(client.reasons) + ")")
    return ok, why


def judge(
    conditions: list[Condition],
    metrics: dict[str, float],
    exit_code: int | None,
    doc: BenchDocument | dict[str, Any] | None = None,
) -> tuple[bool, list[str]]:
    delivered, why = delivery(bench_document(doc or {}))
    if exit_code != 0:
        why.append(f"bench exited {exit_code}")
    for c in conditions:
        value = metrics.get(c.metric)
        shown = "missing" if value is None else f"{value:.2f}"
        why.append(f"{c.metric} {shown} {'ok' if c.holds(value) else 'FAILS'} {c.op} {c.limit:g}")
    met = exit_code == 0 and delivered and all(c.holds(metrics.get(c.metric)) for c in conditions)
    return met, why


def slo_search(
    base: BenchJob,
    axis: str,
    lo: float,
    hi: float,
    conditions: list[Condition],
    config: ProjectConfig,
    *,
    runs_dir: str | None,
    name: str = "slo-search",
    resolution: float | None = None,
    max_probes: int = 12,
    say: Callable[[str], None] = print,
) -> SloResult:
    """Bisect `axis` (request-rate or concurrency) over [lo, hi] for the highest value meeting
    every condition; `resolution` is when to stop (default 1 for concurrency, 5% of hi for
    request rates)."""
    if axis not in AXES:
        raise UsageError(f"--search {axis!r}: use request-rate or concurrency")
    integer = axis == "concurrency"
    if not (0 < lo < hi) or not math.isfinite(hi) or (integer and (lo != int(lo) or hi != int(hi))):
        raise UsageError(
            f"--lo {lo:g} and --hi {hi:g}: need 0 < lo < hi, both finite"
            + (", integers for concurrency" if integer else "")
        )
    if resolution is not None and not (math.isfinite(resolution) and resolution >= 0):
        raise UsageError(f"--resolution {resolution:g}: need a finite step >= 0 (0: default)")
    step = resolution or (1.0 if integer else max(hi * 0.05, 1e-3))
    probes: list[Probe] = []
    home = SweepHome(
        runs_dir,
        config,
        kind="slo-search",
        name=name,
        fields={
            "bench_argv": job_argv(base),
            "axis": axis,
            "lo": lo,
            "hi": hi,
            "slo": [str(c) for c in conditions],
            "probes": [],
        },
    )
    record = home.record

    def probe(value: float) -> Probe:
        p = _probe(base, axis, value, conditions, config, home.runs_root, name, home.run)
        probes.append(p)
        verdict = "meets" if p.met else "misses"
        say(
            f"[slo] probe {len(probes)}: {axis} {value:g}: {verdict} the SLO "
            f"({'; '.join(p.why)}) run {p.run_id}"
        )
        record["probes"] = [q.row() for q in probes]
        home.recorder.save()
        return p

    def meets(p: Probe) -> bool | None:
        # A typo in --slo fails every probe: that is no "even lo misses it" (judged on lo).
        if _broken(p) or (len(probes) == 1 and _unwritten(p, conditions)):
            return None
        return p.met

    plan = bisect(lo, hi, step=step, integer=integer, max_probes=max_probes, meets=meets)
    with home:
        _, end = drive(plan, probe)
        answer, code, error = end.answer, 0, None
        if end.why == "broken" and (absent := _unwritten(probes[0], conditions)):
            error = (
                f"the bench wrote no {', '.join(absent)} (run {probes[0].run_id}, "
                "metrics.json): the SLO names a metric that does not exist, so it "
                "cannot be judged"
            )
            code = int(ExitCode.USAGE)
        elif end.why == "broken":
            code = int(probes[-1].exit_code or ExitCode.UNKNOWN)
        elif end.why == "lo-misses":
            say(f"[slo] no {axis} in [{lo:g}, {hi:g}] meets the SLO: even {lo:g} misses it")
            code = int(ExitCode.WORKLOAD_FAILED)
        elif end.why == "hi-meets":
            say("[slo] the top of the range meets the SLO: raise --hi to look further")
        record["answer"] = answer
        if error:
            record["error"] = error
        result = SloSearchResult.model_validate(
            {"schema": SLO_SCHEMA, "schema_version": SLO_VERSION, "axis": axis}
            | {"slo": record["slo"], "answer": answer}
            | {"probes": [SloProbe.model_validate(p) for p in record["probes"]]}
            | ({"error": error} if error else {})
        )
        home.summarize = lambda: write_summary(home.run, result)  # result.json: the one writer
        home.finish(code)
    if answer is not None and code == 0:
        say(
            f"[slo] highest {axis} meeting {', '.join(map(str, conditions))}: {answer:g} "
            f"({len(probes)} probes)"
        )
    return SloResult(home.run, axis, answer, probes, code, error)


def _unwritten(p: Probe, conditions: list[Condition]) -> list[str]:
    """Metrics the SLO names that a bench which ran to the end did not write."""
    return [] if p.exit_code != 0 else [c.metric for c in conditions if c.metric not in p.metrics]


def _broken(p: Probe) -> bool:
    """A probe that says nothing about the SLO: the server unreachable, bad flags, unknown."""
    return p.exit_code in (
        None,
        int(ExitCode.UNAVAILABLE),
        int(ExitCode.USAGE),
        int(ExitCode.INTERRUPTED),
    )


def _probe(
    base: BenchJob,
    axis: str,
    value: float,
    conditions: list[Condition],
    config: ProjectConfig,
    runs_root: Path,
    name: str,
    home: RunDir,
) -> Probe:
    shown = str(int(value)) if axis == "concurrency" else f"{value:g}"
    point = base.updated(**{AXES[axis]: int(value) if axis == "concurrency" else value})
    ran = run_bench_point(
        point,
        config,
        runs_root,
        name=f"{name}-{axis}-{shown}",
        home=home,
        extra={"slo_search": home.run_id, axis: value},
    )
    met, why = judge(conditions, ran.metrics, ran.exit_code, ran.document)
    kept = {c.metric: ran.metrics[c.metric] for c in conditions if c.metric in ran.metrics}
    return Probe(value, ran.run_id, ran.exit_code, kept, met, why)


def run_slo_job(
    job: SweepJob, config: ProjectConfig, *, say: Callable[[str], None] = print
) -> SloResult:
    """The SLO search a sweep job describes (`job.slo`, `search`, `lo`, `hi`): the bench job
    capped at the largest concurrency point (a rate search) or at its one request rate (a
    concurrency search), its percentiles those the conditions name."""
    conditions = parse_slo(job.slo or "")
    if job.lo is None or job.hi is None:
        raise UsageError("--slo needs the range to search", hint="pass --lo A --hi B")
    base = job.bench
    if job.search == "request-rate":  # the cap on requests in flight: the largest given
        base = base.updated(concurrency=max(job.concurrency))
    elif job.request_rate:
        base = base.updated(request_rate=job.request_rate[0])
    wanted = {f"{p:g}" for p in base.percentiles} | {"99", *percentiles_needed(conditions)}
    base = base.updated(percentiles=sorted(float(p) for p in wanted))
    return slo_search(
        base,
        job.search,
        job.lo,
        job.hi,
        conditions,
        config,
        runs_dir=job.runs_dir,
        name=job.name if job.name != "sweep" else "slo",
        resolution=job.resolution,
        max_probes=job.max_probes,
        say=say,
    )


__all__ = [
    "AXES",
    "Condition",
    "Probe",
    "SloResult",
    "judge",
    "parse_slo",
    "percentiles_needed",
    "run_slo_job",
    "slo_search",
]

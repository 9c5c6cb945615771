"""The numbers behind the plots: GPU samples from gpu.csv, the server's series from
server_metrics.csv, per-request latencies from requests.jsonl, and CDFs thinned to a size a
browser draws at once.

Everything here reads tolerantly: a missing file is an empty series, a bad row is skipped
and counted, never an exception (a report of a broken run matters most).
"""

from __future__ import annotations

import contextlib
import csv
import json
import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

# A CDF of more points than this is thinned (evenly in rank, the tail kept exactly):
# the shape is unchanged on screen and a 5,000-request run stays a small file.
MAX_CDF_POINTS = 1500
TAIL_POINTS = 50


def parse_time(text: object) -> datetime | None:
    """An ISO-8601 time with its offset (what every proctor file writes), else None."""
    if not isinstance(text, str) or not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


@dataclass
class GpuTrace:
    index: int
    name: str
    uuid: str
    times: list[str] = field(default_factory=list)
    used_mib: list[float] = field(default_factory=list)
    total_mib: float = 0.0
    power_w: list[float | None] = field(default_factory=list)  # parallel to times
    util_pct: list[float | None] = field(default_factory=list)

    @property
    def first_mib(self) -> float | None:
        return self.used_mib[0] if self.used_mib else None

    @property
    def last_mib(self) -> float | None:
        return self.used_mib[-1] if self.used_mib else None

    @property
    def peak_mib(self) -> float | None:
        return max(self.used_mib) if self.used_mib else None


@dataclass
class GpuSeries:
    traces: list[GpuTrace] = field(default_factory=list)
    bad_rows: int = 0
    present: bool = False  # gpu.csv exists (even if empty)


def _csv_rows(path: Path, series: GpuSeries | ServerSeries) -> Iterator[dict[str, str]]:
    """The rows of the CSV file at `path`, none when it cannot be opened; sets `series.present`."""
    try:
        handle = path.open(newline="", encoding="utf-8", errors="replace")
    except OSError:
        return
    series.present = True
    with handle:
        yield from csv.DictReader(handle)


def read_gpu_csv(path: Path) -> GpuSeries:
    series = GpuSeries()
    by_index: dict[int, GpuTrace] = {}
    for row in _csv_rows(path, series):
        try:
            index = int(row["index"])
            used = float(row["memory_used_mib"])
            when = row["time"]
        except (KeyError, TypeError, ValueError):
            series.bad_rows += 1
            continue
        if parse_time(when) is None or not math.isfinite(used):
            series.bad_rows += 1
            continue
        trace = by_index.get(index)
        if trace is None:
            trace = GpuTrace(index, row.get("name") or f"GPU {index}", row.get("uuid") or "")
            by_index[index] = trace
        trace.times.append(when)
        trace.used_mib.append(used)
        trace.power_w.append(_cell(row.get("power_w")))
        trace.util_pct.append(_cell(row.get("utilization_pct")))
        with contextlib.suppress(ValueError):
            trace.total_mib = max(trace.total_mib, float(row.get("memory_total_mib") or 0))
    series.traces = [by_index[i] for i in sorted(by_index)]
    return series


def _cell(text: str | None) -> float | None:
    try:
        value = float(text or "nan")
    except ValueError:
        return None
    return value if math.isfinite(value) else None


# server_metrics.csv series the report draws (the engine's queue and KV cache).
SERVER_PLOTTED = (
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:kv_cache_usage_perc",
    "vllm:gpu_cache_usage_perc",
    "sglang:num_running_reqs",
    "sglang:num_queue_reqs",
    "sglang:token_usage",
)
MAX_SERVER_POINTS = 20000  # per series; rows are written on change, so this is hours of run


@dataclass
class ServerTrace:
    name: str
    labels: str
    times: list[float] = field(default_factory=list)  # unix seconds
    values: list[float] = field(default_factory=list)


@dataclass
class ServerSeries:
    traces: list[ServerTrace] = field(default_factory=list)
    bad_rows: int = 0
    present: bool = False


def read_server_csv(path: Path) -> ServerSeries:
    """The plotted series of server_metrics.csv (t, name, labels, value)."""
    series = ServerSeries()
    by_key: dict[tuple[str, str], ServerTrace] = {}
    for row in _csv_rows(path, series):
        name = row.get("name") or ""
        if name not in SERVER_PLOTTED:
            continue
        t, value = _cell(row.get("t")), _cell(row.get("value"))
        if t is None or value is None:
            series.bad_rows += 1
            continue
        key = (name, row.get("labels") or "")
        trace = by_key.setdefault(key, ServerTrace(*key))
        if len(trace.times) < MAX_SERVER_POINTS:
            trace.times.append(t)
            trace.values.append(value)
    series.traces = [by_key[k] for k in sorted(by_key)]
    return series


LATENCY_KINDS = ("ttft", "tpot", "itl", "e2el")


@dataclass
class Latencies:
    """Per-request latencies in ms (measured requests only, successes only)."""

    ttft: list[float] = field(default_factory=list)
    tpot: list[float] = field(default_factory=list)
    itl: list[float] = field(default_factory=list)
    e2el: list[float] = field(default_factory=list)
    requests: int = 0
    failed: int = 0
    bad_lines: int = 0

    def of(self, kind: str) -> list[float]:
        values: list[float] = getattr(self, kind)
        return values


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def latencies_from_records(records: Iterable[dict[str, Any]]) -> Latencies:
    """vLLM's definitions (as proctor.workloads.loadgen.metrics): TPOT per request over
    tokens after the first, ITL pooled over all gaps, warm-up requests left out."""
    out = Latencies()
    for rec in records:
        if rec.get("warmup"):
            continue
        out.requests += 1
        if not rec.get("success"):
            out.failed += 1
            continue
        ttft, latency = _num(rec.get("ttft")), _num(rec.get("latency"))
        if ttft is None or latency is None:
            out.bad_lines += 1
            continue
        out.ttft.append(ttft * 1000.0)
        out.e2el.append(latency * 1000.0)
        tokens = rec.get("output_tokens")
        if isinstance(tokens, int) and tokens > 1:
            out.tpot.append((latency - ttft) / (tokens - 1) * 1000.0)
        gaps = rec.get("itl")
        if isinstance(gaps, list):
            out.itl.extend(g * 1000.0 for g in gaps if _num(g) is not None)
    return out


def read_requests_jsonl(path: Path) -> Latencies | None:
    """Latencies from loadgen's requests.jsonl, or None when there is no such file."""
    try:
        handle = path.open(encoding="utf-8", errors="replace")
    except OSError:
        return None
    bad = 0

    def records() -> Iterable[dict[str, Any]]:
        nonlocal bad
        with handle:
            for line in handle:
                if not line.strip():
                    continue
                try:
                    rec = json.loads(line)
                except ValueError:
                    bad += 1
                    continue
                if isinstance(rec, dict):
                    yield rec
                else:
                    bad += 1

    out = latencies_from_records(records())
    out.bad_lines += bad
    return out


def cdf_points(values: Sequence[float]) -> tuple[list[float], list[float]]:
    """(x, p) of the empirical CDF, thinned to about MAX_CDF_POINTS: evenly spaced ranks,
    plus the last TAIL_POINTS ranks exactly, so p99 and the maximum are drawn as measured."""
    ordered = sorted(values)
    n = len(ordered)
    if n == 0:
        return [], []
    if n <= MAX_CDF_POINTS:
        ranks: Iterable[int] = range(n)
    else:
        step = (n - 1) / (MAX_CDF_POINTS - TAIL_POINTS - 1)
        picked = {round(i * step) for i in range(MAX_CDF_POINTS - TAIL_POINTS)}
        picked.update(range(max(0, n - TAIL_POINTS), n))
        ranks = sorted(picked)
    xs: list[float] = []
    ps: list[float] = []
    for r in ranks:
        xs.append(round(ordered[r], 4))
        ps.append(round((r + 1) / n, 6))
    return xs, ps


def percentile(values: Sequence[float], p: float) -> float:
    """Linear interpolation between closest ranks (numpy's default, which vLLM uses)."""
    ordered = sorted(values)
    if not ordered:
        return 0.0
    k = (len(ordered) - 1) * p / 100.0
    lo, hi = math.floor(k), math.ceil(k)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)

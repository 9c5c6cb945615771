"""A run's metrics.json as results' Metric objects (normalized names, unit, direction, stderr),
whatever wrote it: the load generator, the GSM8K workload, or any flat {"metrics": {...}}."""

from __future__ import annotations

import math
from typing import Any, TypeGuard

from proctor.errors import ProctorError
from proctor.jobs.documents import BENCH_SCHEMA, BenchDocument, EvalDocument, parse_document
from proctor.results.model import Metric
from proctor.results.parsers import bench_result

MetricSet = dict[str, Metric]

# GSM8K metrics.json keys -> results' normalized names (what accuracy baselines check).
GSM8K_NAMES = {
    "exact_match_flexible_extract": "gsm8k_exact_match_flexible",
    "exact_match_strict_match": "gsm8k_exact_match_strict",
}
# Latency means whose noise band is the standard error over the measured requests.
_MEAN_OVER_REQUESTS = ("ttft", "tpot", "e2el")


def _finite(value: Any) -> TypeGuard[float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _gsm8k(doc: EvalDocument) -> MetricSet:
    raw = doc.metrics
    out: MetricSet = {}
    for key, name in GSM8K_NAMES.items():
        value = raw.get(key)
        if value is not None:
            out[name] = Metric.of(name, value, raw.get(f"{key}_stderr"))
    samples = raw.get("n_samples")
    if samples is not None:
        out["gsm8k_n_samples"] = Metric.of("gsm8k_n_samples", samples)
    return out


def _bench(doc: BenchDocument) -> MetricSet:
    out = dict(bench_result(doc).metrics)
    completed = out.get("completed")
    n = completed.value if completed else 0.0
    if n > 1:
        for kind in _MEAN_OVER_REQUESTS:
            mean, std = out.get(f"mean_{kind}_ms"), out.get(f"std_{kind}_ms")
            if mean is not None and std is not None and mean.stderr is None:
                out[mean.name] = mean.model_copy(update={"stderr": std.value / math.sqrt(n)})
    return out


def _flat(doc: dict[str, Any]) -> MetricSet:
    raw = doc.get("metrics")
    units = doc.get("units") if isinstance(doc.get("units"), dict) else {}
    assert isinstance(units, dict)
    out: MetricSet = {}
    for name, value in raw.items() if isinstance(raw, dict) else []:
        unit = units.get(name)
        stderr = None
        if isinstance(value, dict):
            unit, stderr, value = value.get("unit", unit), value.get("stderr"), value.get("value")
        if not _finite(value):
            continue
        metric = Metric.of(str(name), value, float(stderr) if _finite(stderr) else None)
        if isinstance(unit, str) and unit:
            metric.unit = unit
        out[str(name)] = metric
    return out


def metrics_of_doc(doc: dict[str, Any] | None) -> MetricSet:
    """The metrics of a metrics.json: a bench's or a GSM8K eval's read through its model (none
    when it is damaged), any other flat {"metrics": {...}} as it is."""
    if not doc:
        return {}
    if doc.get("kind") == "gsm8k" or doc.get("schema") == BENCH_SCHEMA:
        try:
            typed = parse_document(doc, "metrics.json")
        except ProctorError:
            return {}
        if isinstance(typed, EvalDocument):
            return _gsm8k(typed)
        if isinstance(typed, BenchDocument):
            return _bench(typed)
    return _flat(doc)

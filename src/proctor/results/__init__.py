"""proctor.results: parse results from anywhere, check them against baselines.

parse_path(path) -> ParsedResult           auto-detects the format
load_baseline(path) -> Baseline            ATOM models_accuracy.json or a perf baseline
check(metrics, baseline, model) -> [Verdict]
compare(a, b) -> [CompareRow]

The names load on first use (PEP 562): a light module of this package (cost, names) must not
pull in pydantic and the parsers, since the run wrapper, a store writer, reads the cost.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from proctor.results.baselines import (
        AccuracyEntry,
        CompareRow,
        PerfBaseline,
        Verdict,
        check,
        compare,
        load_baseline,
        worst_status,
    )
    from proctor.results.model import Metric, ParsedResult
    from proctor.results.names import metric_info
    from proctor.results.parsers import parse_path, parse_string, parse_summary_blocks

_WHERE = {
    "AccuracyEntry": "baselines",
    "CompareRow": "baselines",
    "PerfBaseline": "baselines",
    "Verdict": "baselines",
    "check": "baselines",
    "compare": "baselines",
    "load_baseline": "baselines",
    "worst_status": "baselines",
    "Metric": "model",
    "ParsedResult": "model",
    "metric_info": "names",
    "parse_path": "parsers",
    "parse_string": "parsers",
    "parse_summary_blocks": "parsers",
}


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'proctor.results' has no attribute {name!r}")
    return getattr(importlib.import_module(f"proctor.results.{_WHERE[name]}"), name)


__all__ = [
    "AccuracyEntry",
    "CompareRow",
    "Metric",
    "ParsedResult",
    "PerfBaseline",
    "Verdict",
    "check",
    "compare",
    "load_baseline",
    "metric_info",
    "parse_path",
    "parse_string",
    "parse_summary_blocks",
    "worst_status",
]

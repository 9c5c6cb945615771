"""proctor.results: parse results from anywhere, check them against baselines.

parse_path(path) -> ParsedResult           auto-detects the format
load_baseline(path) -> Baseline            ATOM models_accuracy.json or a perf baseline
check(metrics, baseline, model) -> [Verdict]
compare(a, b) -> [CompareRow]
"""

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

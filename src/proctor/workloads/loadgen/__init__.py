"""proctor.workloads.loadgen: the serving load generator.

    run_benchmark(BenchConfig) -> BenchResult      one benchmark (raises TargetUnavailable)
    write_outputs(result, dir) -> [Path]           metrics.json (+ requests.jsonl)
    check_outcome(result)                          raises WorkloadFailed if every request failed
    compute_metrics(records, duration, ...)        vLLM's metric definitions, pure
    format_summary(metrics) -> str                 vLLM's `Serving Benchmark Result` block

Run as a program: `python -m proctor.workloads.loadgen --help`.
"""

from proctor.workloads.loadgen.config import BenchConfig
from proctor.workloads.loadgen.metrics import BenchMetrics, Stat, compute_metrics
from proctor.workloads.loadgen.records import RequestRecord
from proctor.workloads.loadgen.runner import (
    BenchResult,
    check_outcome,
    result_document,
    run_benchmark,
    write_outputs,
)
from proctor.workloads.loadgen.summary import format_summary

__all__ = [
    "BenchConfig",
    "BenchMetrics",
    "BenchResult",
    "RequestRecord",
    "Stat",
    "check_outcome",
    "compute_metrics",
    "format_summary",
    "result_document",
    "run_benchmark",
    "write_outputs",
]

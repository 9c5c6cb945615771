"""proctor.workloads.loadgen: the serving load generator.

    run_benchmark(BenchConfig) -> BenchResult      one benchmark (raises TargetUnavailable)
    write_outputs(result, dir) -> [Path]           metrics.json (+ requests.jsonl)
    check_outcome(result)                          raises WorkloadFailed beyond --max-error-rate
    compute_metrics(records, duration, ...)        vLLM's metric definitions, pure
    format_summary(metrics) -> str                 vLLM's `Serving Benchmark Result` block
    result.verdict() -> Verdict                    failed requests against --max-error-rate

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
from proctor.workloads.loadgen.verdict import Verdict, format_verdict, judge

__all__ = [
    "BenchConfig",
    "BenchMetrics",
    "BenchResult",
    "RequestRecord",
    "Stat",
    "Verdict",
    "check_outcome",
    "compute_metrics",
    "format_summary",
    "format_verdict",
    "judge",
    "result_document",
    "run_benchmark",
    "write_outputs",
]

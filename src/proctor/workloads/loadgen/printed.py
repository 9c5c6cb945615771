"""What a finished benchmark prints, in order: vLLM's summary block, the dataset and repeat
lines, the `Result:` verdict, the client's headroom, then server metrics, energy and validity.
The load generator's entry point and `proctor bench --output-dir` print the same lines."""

from __future__ import annotations

from proctor.workloads.loadgen.extra_lines import extra_lines
from proctor.workloads.loadgen.headroom import format_headroom
from proctor.workloads.loadgen.runner import BenchResult, result_document
from proctor.workloads.loadgen.summary import format_summary
from proctor.workloads.loadgen.telemetry import summary_lines
from proctor.workloads.loadgen.verdict import format_verdict


def result_lines(result: BenchResult) -> list[str]:
    return [
        format_summary(result.metrics),
        *extra_lines(result),
        format_verdict(result.verdict()),
        format_headroom(result.client),
        *summary_lines(result_document(result)),
    ]


__all__ = ["result_lines"]

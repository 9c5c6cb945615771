"""What an importer reads out of another tool's result file, before it becomes a run."""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel, Field

from proctor.results.names import metric_info

#: What every imported result lacks, whatever the tool: proctor did not run or watch it.
ALWAYS_LACKS = (
    "a full validity verdict (proctor did not watch the run: only errors, request count and"
    " window are judged)",
    "source identity of the engine",
    "run record of the server (engine args, GPU, logs)",
)


class ImportedResult(BaseModel):
    """One measurement read from another tool's file, in proctor's metric names and units
    (results/names.py: latencies in ms, throughputs in tok/s and req/s)."""

    tool: str  # vllm | guidellm | aiperf | the tool a Benchmark Report names | proctor
    format: str  # vllm | guidellm | aiperf | br-0.2 | proctor (FORMATS in detect.py)
    tool_version: str | None = None
    name: str  # the run's name in listings
    model: str | None = None
    started_at: str | None = None
    ended_at: str | None = None
    metrics: dict[str, float] = Field(default_factory=dict)
    # Settings the file states (concurrency, rate, dataset, lengths asked): what was measured.
    settings: dict[str, Any] = Field(default_factory=dict)
    lacks: list[str] = Field(default_factory=list)
    # Values the file gives that are no number (NaN, text): left out, named here.
    not_numbers: dict[str, str] = Field(default_factory=dict)
    validity: dict[str, Any] | None = None  # only a proctor export carries one
    # Standard errors and repeats behind a metric (a proctor export of bench --repeat)
    stderr: dict[str, float] = Field(default_factory=dict)
    repeats: dict[str, int] = Field(default_factory=dict)

    def put(self, name: str, value: Any) -> None:
        """A metric, if `value` is a finite number (never a bool); else named in not_numbers."""
        if value is None:
            return
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            self.not_numbers[name] = repr(value)[:40]
            return
        try:
            number = float(value)
        except OverflowError:
            self.not_numbers[name] = "a number beyond float's range"
            return
        if not math.isfinite(number):
            self.not_numbers[name] = str(number)
            return
        self.metrics[name] = number

    def units(self) -> dict[str, str]:
        return {name: metric_info(name).unit for name in self.metrics}

    def metrics_doc(self) -> dict[str, Any]:
        """metrics.json's `metrics`: a number, or {value, stderr, n} where noise is known."""
        out: dict[str, Any] = {}
        for name, value in self.metrics.items():
            if name in self.stderr:
                out[name] = {"value": value, "stderr": self.stderr[name]}
                if name in self.repeats:
                    out[name]["n"] = self.repeats[name]
            else:
                out[name] = value
        return out


def number(value: Any) -> float | None:
    """A finite float, or None (bools, text, NaN and overflowing ints are no number)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        out = float(value)
    except OverflowError:
        return None
    return out if math.isfinite(out) else None


def text(value: Any, limit: int = 200) -> str | None:
    return value[:limit] if isinstance(value, str) and value else None

"""The parsed-result types shared by parsers, baselines and reports."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from proctor.results.names import Direction, metric_info


class Metric(BaseModel):
    """One measured value with its unit and, when known, its standard error."""

    name: str
    value: float
    unit: str = ""
    direction: Direction = "none"
    stderr: float | None = None
    n: int | None = None  # repeats behind value and stderr (bench --repeat); None: one run

    @classmethod
    def of(cls, name: str, value: float, stderr: float | None = None) -> Metric:
        info = metric_info(name)
        return cls(
            name=name, value=float(value), unit=info.unit, direction=info.direction, stderr=stderr
        )


class ParsedResult(BaseModel):
    """The metrics read from one results file, with what kind of file it was."""

    kind: str  # serving-summary | vllm-json | sglang-json | proctor-metrics | lm-eval
    path: str | None = None
    metrics: dict[str, Metric] = Field(default_factory=dict)
    meta: dict[str, Any] = Field(default_factory=dict)

    def values(self) -> dict[str, float]:
        return {k: m.value for k, m in self.metrics.items()}

    def add(self, name: str, value: float, stderr: float | None = None) -> None:
        self.metrics[name] = Metric.of(name, value, stderr)

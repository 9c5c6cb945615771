"""proctor's own result export (`proctor results export RUN --format proctor`).

One JSON document per run: what ran (the run's identity and how it ended), what it measured
(each metric with its unit, which way is better, its standard error and repeats), the four
identity fields comparisons are refused on, the validity verdict, and, for an imported run,
where it came from and what it lacks. The models below are the schema: `export.schema.json`
beside this module is generated from them (`python -m proctor.results.exchange.native >
src/proctor/results/exchange/export.schema.json`), committed, and a test fails when the two
differ. A change to the document's shape raises EXPORT_VERSION.

Versions:
    1  the first export (proctor.results.export).
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

EXPORT_SCHEMA = "proctor.results.export"
EXPORT_VERSION = 1


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class ExportMetric(_Strict):
    """One measured value, in proctor's names (docs/bench.md: vLLM's result-JSON keys)."""

    name: str
    value: float
    unit: str = Field(description="ms, tok/s, req/s, requests, tokens, s, fraction...")
    direction: Literal["higher", "lower", "none"] = Field(description="which way is better")
    stderr: float | None = Field(None, description="standard error (bench --repeat, lm-eval)")
    n: int | None = Field(None, description="repeats behind value and stderr; null: one run")


class ExportRun(_Strict):
    """The run the result belongs to, as its record states it."""

    id: str
    kind: str = Field(description="bench, eval, offline, command, imported, ...")
    name: str | None = None
    created_at: str | None = None
    started_at: str | None = None
    ended_at: str | None = None
    duration_s: float | None = None
    outcome: str = Field(description="ok, failed, timeout, stopped, unknown, running")
    exit_code: int | None = None
    proctor_version: str | None = None
    host: str | None = None
    target: str | None = None


class ExportIdentity(_Strict):
    """What the result measured; two results differing in a known field are not comparable
    (`runs compare` refuses them, exit 77). null: not known."""

    source: str | None = None
    engine_args: str | None = None
    dataset: str | None = None
    gpu: str | None = None


class ExportValidity(_Strict):
    verdict: Literal["VALID", "INVALID"]
    reasons: list[str] = Field(default_factory=list)


class ExportImported(_Strict):
    """Where an imported run's result came from (proctor results import)."""

    tool: str
    format: str
    tool_version: str | None = None
    file: str | None = None
    sha256: str | None = None
    lacks: list[str] = Field(default_factory=list)


class ProctorExport(_Strict):
    """A proctor result, exported (`proctor results export RUN --format proctor`)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, populate_by_name=True)

    schema_id: Literal["proctor.results.export"] = Field("proctor.results.export", alias="schema")
    schema_version: Literal[1] = 1
    exported_at: str
    result_kind: str = Field(description="what proctor parsed: proctor-metrics, vllm-json, ...")
    model: str | None = None
    run: ExportRun
    identity: ExportIdentity
    metrics: list[ExportMetric]
    validity: ExportValidity | None = None
    imported: ExportImported | None = None
    settings: dict[str, Any] = Field(
        default_factory=dict, description="the bench's resolved config, without credentials"
    )

    def to_json(self) -> str:
        return self.model_dump_json(by_alias=True, indent=2)


def json_schema() -> dict[str, Any]:
    schema = ProctorExport.model_json_schema(by_alias=True)
    schema["title"] = "proctor result export"
    schema["description"] = f"{EXPORT_SCHEMA} version {EXPORT_VERSION}"
    return schema


def schema_text() -> str:
    return json.dumps(json_schema(), indent=2) + "\n"


__all__ = [
    "EXPORT_SCHEMA",
    "EXPORT_VERSION",
    "ExportIdentity",
    "ExportImported",
    "ExportMetric",
    "ExportRun",
    "ExportValidity",
    "ProctorExport",
    "json_schema",
    "schema_text",
]


if __name__ == "__main__":
    print(schema_text(), end="")

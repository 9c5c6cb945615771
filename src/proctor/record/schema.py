"""The run record (record.json): what ran, where, from which source, and how it ended.

Schema-versioned; `record.schema.json` beside this module is generated from these models
(`python -m proctor.record.schema > src/proctor/record/record.schema.json`) and tests validate
written records against it.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

SCHEMA_ID = "proctor.run"
SCHEMA_VERSION = 1

Outcome = Literal["starting", "running", "ok", "failed", "timeout", "stopped", "unknown"]
FINAL_OUTCOMES: frozenset[str] = frozenset({"ok", "failed", "timeout", "stopped", "unknown"})


class Resolved(BaseModel):
    """One resolved option and where its value came from (flag, env:NAME, config:FILE, default)."""

    value: Any
    origin: str


class ProcessRef(BaseModel):
    pid: int
    create_time: float
    pgid: int | None = None


class ExitStatus(BaseModel):
    code: int
    signal: str | None = None
    # "command": the command's own status; "proctor": proctor ended it (time limit, stop).
    decided_by: Literal["command", "proctor"] = "command"


class HostInfo(BaseModel):
    model_config = ConfigDict(extra="allow")

    hostname: str
    os: str
    kernel: str
    cpu_model: str
    cpu_count: int
    memory_total_bytes: int
    python: str
    timezone: str


class Event(BaseModel):
    time: str
    event: str
    detail: str | None = None


class RunRecord(BaseModel):
    model_config = ConfigDict(extra="allow")

    schema_id: str = Field(default=SCHEMA_ID, alias="schema")
    schema_version: int = SCHEMA_VERSION
    run_id: str
    name: str
    kind: str = "command"
    key: str | None = None
    group: str | None = None
    argv: list[str]
    cwd: str
    log: str
    proctor_version: str
    target: dict[str, Any] = Field(default_factory=lambda: {"kind": "local"})
    source: dict[str, Any] = Field(default_factory=dict)
    host: HostInfo | None = None
    gpu: dict[str, Any] = Field(default_factory=dict)
    gpu_peaks: list[dict[str, Any]] = Field(default_factory=list)
    env_overrides: dict[str, str] = Field(default_factory=dict)
    options: dict[str, Resolved] = Field(default_factory=dict)
    created_at: str
    started_at: str | None = None
    ended_at: str | None = None
    duration_s: float | None = None
    wrapper: ProcessRef | None = None
    process: ProcessRef | None = None
    outcome: Outcome = "starting"
    exit: ExitStatus | None = None
    leftovers_killed: int = 0
    events: list[Event] = Field(default_factory=list)
    error: str | None = None

    def to_json(self) -> str:
        return self.model_dump_json(by_alias=True, indent=2)


def json_schema() -> dict[str, Any]:
    return RunRecord.model_json_schema(by_alias=True)


if __name__ == "__main__":
    print(json.dumps(json_schema(), indent=2))

"""The run record (record.json): what ran, where, from which source, and how it ended.

One pydantic model per run kind, all sharing `RecordCore` (identity, argv, source, target,
host, times, outcome, exit, events) and the schema version (record/version.py):

    command                      CommandRecord    `proctor run`
    server                       ServerRecord     `proctor serve start` (+ `server`)
    bench, eval, offline,        WorkloadRecord   a workload run (+ `server_run`, `sweep`, ...)
      workload
    slurm                        SlurmRecord      a Slurm group run (+ `slurm`, `nodes`)
    slurm-node                   SlurmNodeRecord  one node of it (+ `multinode`)
    flow                         FlowRecord       `proctor flow` (+ `options`, `steps`)
    sweep                        SweepRecord      `proctor sweep` (+ `concurrencies`, `points`)
    remote                       RemoteRecord     a run on a far target, before its record is
                                                  fetched (+ `remote_dir`)

Records are open (extra fields allowed): a kind may carry facts its model does not name.
`parse_record` reads any version this proctor knows (older ones are upgraded first) into the
model of its kind. `record.schema.json` beside this module is generated from these models
(`python -m proctor.record.schema > src/proctor/record/record.schema.json`) and tests check
it is current and validate written records against it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from proctor.record.version import KNOWN_VERSIONS, SCHEMA_ID, SCHEMA_VERSION

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


class RecordCore(BaseModel):
    """What every run record holds, whatever its kind."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    schema_id: str = Field(default=SCHEMA_ID, alias="schema")
    schema_version: int = SCHEMA_VERSION
    run_id: str
    kind: str
    name: str | None = None
    group: str | None = None
    argv: list[str] = Field(default_factory=list)
    argv_display: list[str] | None = None
    proctor_version: str | None = None
    target: dict[str, Any] = Field(default_factory=lambda: {"kind": "local"})
    source: dict[str, Any] | None = Field(default_factory=dict)
    host: HostInfo | None = None
    created_at: str | None = None
    started_at: str | None = None
    ended_at: str | None = None
    duration_s: float | None = None
    outcome: Outcome = "starting"
    exit: ExitStatus | None = None
    events: list[Event] = Field(default_factory=list)
    error: str | None = None

    def to_json(self) -> str:
        return self.model_dump_json(by_alias=True, indent=2)

    def to_record(self) -> dict[str, Any]:
        """The JSON-ready dict a Recorder writes (aliases, extras kept)."""
        return dict(json.loads(self.to_json()))

    @property
    def command(self) -> list[str]:
        """The argv to show (secrets masked)."""
        return list(self.argv_display or self.argv)

    @property
    def display_name(self) -> str:
        return self.name or self.run_id


class LaunchedRecord(RecordCore):
    """A run of one command under the wrapper (prepare_run writes it)."""

    name: str
    cwd: str
    log: str
    proctor_version: str
    created_at: str
    key: str | None = None
    gpu: dict[str, Any] = Field(default_factory=dict)
    gpu_peaks: list[dict[str, Any]] = Field(default_factory=list)
    env_overrides: dict[str, str] = Field(default_factory=dict)
    options: dict[str, Resolved] = Field(default_factory=dict)
    wrapper: ProcessRef | None = None
    process: ProcessRef | None = None
    leftovers_killed: int = 0


class CommandRecord(LaunchedRecord):
    kind: Literal["command"] = "command"


class ServerRecord(LaunchedRecord):
    kind: Literal["server"] = "server"
    # The applied server spec: engine, host, port, model, ready/drain settings, ...
    server: dict[str, Any] = Field(default_factory=dict)


class WorkloadRecord(LaunchedRecord):
    kind: Literal["bench", "eval", "offline", "workload"] = "workload"
    server_run: str | None = None  # the server run it measured (a flow's workload)
    sweep: str | None = None  # the sweep it is a point of
    concurrency: int | None = None


class SlurmRecord(LaunchedRecord):
    kind: Literal["slurm"] = "slurm"
    slurm: dict[str, Any] = Field(default_factory=dict)
    nodes: dict[str, Any] = Field(default_factory=dict)
    reason: str | None = None


class SlurmNodeRecord(RecordCore):
    """One node's run of a Slurm group (its log, exit_code and record under nodes/<node>/)."""

    kind: Literal["slurm-node"] = "slurm-node"
    cwd: str | None = None
    log: str | None = None
    gpu: dict[str, Any] = Field(default_factory=dict)
    multinode: dict[str, Any] | None = None


class FlowStep(BaseModel):
    model_config = ConfigDict(extra="allow")

    step: str
    started_at: str
    ended_at: str | None = None
    exit_code: int | None = None
    run_id: str | None = None


class FlowRecord(RecordCore):
    kind: Literal["flow"] = "flow"
    cwd: str | None = None
    log: str | None = "flow.log"
    options: dict[str, Any] = Field(default_factory=dict)
    steps: list[FlowStep] = Field(default_factory=list)
    server_run: str | None = None
    workload_run: str | None = None
    exit_code: int | None = None

    def step_done(self, name: str) -> FlowStep | None:
        """The first step `name` that ended with a status, if any."""
        return next((s for s in self.steps if s.step == name and s.exit_code is not None), None)


class SweepRecord(RecordCore):
    kind: Literal["sweep"] = "sweep"
    concurrencies: list[int] = Field(default_factory=list)
    points: list[dict[str, Any]] = Field(default_factory=list)
    plot: str | None = None
    plot_skipped: str | None = None
    exit_code: int | None = None


class RemoteRecord(RecordCore):
    """The local placeholder of a far run, until its own record is fetched."""

    kind: Literal["remote"] = "remote"
    remote_dir: str | None = None


AnyRecord = Annotated[
    CommandRecord | ServerRecord | WorkloadRecord | SlurmRecord | SlurmNodeRecord | FlowRecord
    | SweepRecord | RemoteRecord,
    Field(discriminator="kind"),
]
_ADAPTER: TypeAdapter[Any] = TypeAdapter(AnyRecord)
MODELS: dict[str, type[RecordCore]] = {
    "command": CommandRecord,
    "server": ServerRecord,
    "bench": WorkloadRecord,
    "eval": WorkloadRecord,
    "offline": WorkloadRecord,
    "workload": WorkloadRecord,
    "slurm": SlurmRecord,
    "slurm-node": SlurmNodeRecord,
    "flow": FlowRecord,
    "sweep": SweepRecord,
    "remote": RemoteRecord,
}
#: Back-compatible name: the record of a launched (wrapper-run) command.
RunRecord = LaunchedRecord
R = TypeVar("R", bound=RecordCore)


class RecordError(ValueError):
    """A record.json this proctor cannot read (unknown version, wrong shape)."""


def upgrade(data: dict[str, Any]) -> dict[str, Any]:
    """A record of any known version, in the current version's shape (a new dict)."""
    data = dict(data)
    version = data.get("schema_version", 1)
    if isinstance(version, bool) or version not in KNOWN_VERSIONS:
        known = ", ".join(str(v) for v in sorted(KNOWN_VERSIONS))
        raise RecordError(f"unknown record schema version {version!r} (this proctor knows {known})")
    if version == 1:
        # v1: flows and sweeps had their own schema ids; remote placeholders had no version.
        data["schema"] = SCHEMA_ID
        data.setdefault("kind", "command")
        data["schema_version"] = 2
    return data


def parse_record(data: dict[str, Any]) -> RecordCore:
    """The typed record: the model of its kind (RecordCore for a kind this proctor does not
    know). Raises RecordError for an unknown version or a record its model rejects."""
    data = upgrade(data)
    model = MODELS.get(str(data.get("kind")), RecordCore)
    try:
        return model.model_validate(data)
    except ValidationError as error:
        raise RecordError(f"record {data.get('run_id')!r}: {error}") from None


def parse_as(model: type[R], data: dict[str, Any]) -> R:
    """The record as `model` (FlowRecord, SweepRecord...), or RecordError."""
    record = parse_record(data)
    if not isinstance(record, model):
        wanted = model.model_fields["kind"].default
        raise RecordError(f"record {record.run_id!r} is a {record.kind} record, not a {wanted}")
    return record


def view_record(data: dict[str, Any], run_id: str) -> RecordCore:
    """A typed view of any record, for readers that must never fail (reports, listings):
    the kind's model, else the shared core, else an empty core with `run_id`."""
    try:
        return parse_record(data)
    except RecordError:
        pass
    try:
        return RecordCore.model_validate({"kind": "command", **upgrade(data)})
    except (RecordError, ValidationError):
        return RecordCore(run_id=run_id, kind=str(data.get("kind") or "command"))


def load_record(run_dir: Path) -> RecordCore | None:
    """record.json of a run directory, typed; None where it is missing or unreadable."""
    try:
        data = json.loads((run_dir / "record.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    if not isinstance(data, dict):
        return None
    try:
        return parse_record(data)
    except RecordError:
        return None


def json_schema() -> dict[str, Any]:
    schema: dict[str, Any] = _ADAPTER.json_schema(by_alias=True)
    schema["title"] = "proctor run record"
    schema["description"] = f"record.json, schema {SCHEMA_ID} version {SCHEMA_VERSION}"
    return schema


__all__ = [
    "FINAL_OUTCOMES",
    "MODELS",
    "SCHEMA_ID",
    "SCHEMA_VERSION",
    "AnyRecord",
    "CommandRecord",
    "Event",
    "ExitStatus",
    "FlowRecord",
    "FlowStep",
    "HostInfo",
    "LaunchedRecord",
    "Outcome",
    "ProcessRef",
    "RecordCore",
    "RecordError",
    "RemoteRecord",
    "Resolved",
    "RunRecord",
    "ServerRecord",
    "SlurmNodeRecord",
    "SlurmRecord",
    "SweepRecord",
    "WorkloadRecord",
    "json_schema",
    "load_record",
    "parse_as",
    "parse_record",
    "upgrade",
    "view_record",
]


if __name__ == "__main__":
    print(json.dumps(json_schema(), indent=2))

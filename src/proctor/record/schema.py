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
    imported                     ImportedRecord   a result another tool measured, read by
                                                  `proctor results import` (+ `imported`)

Records are open (extra fields allowed): a kind may carry facts its model does not name.
`parse_record` reads any version this proctor knows (older ones are upgraded first) into the
model of its kind.

Reading a record from Python (docs/architecture.md, "Reading a record"):

    load_record(run_dir)               the typed record, or None (none yet, or unreadable)
    load_record(run_dir, strict=True)  the typed record, or RecordError (exit 64) saying why
    read_view(run_dir)                 never fails: what can be read, for listings and reports

A record written by a newer proctor (a schema version this one does not know) is refused,
never half-read: RecordError "unknown record schema version N ... upgrade proctor".

`record.schema.json` beside this module is generated from these models
(`python -m proctor.record.schema > src/proctor/record/record.schema.json`) and tests check
it is current and validate written records against it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar, overload

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from proctor.errors import RecordError, validation_problem
from proctor.record.version import KNOWN_VERSIONS, SCHEMA_ID, SCHEMA_VERSION

Outcome = Literal["starting", "running", "ok", "failed", "timeout", "stopped", "unknown"]
FINAL_OUTCOMES: frozenset[str] = frozenset({"ok", "failed", "timeout", "stopped", "unknown"})


class _Model(BaseModel):
    # Validators are built on first use, not at import: every command that reads a record
    # imports this module, and most read one or two kinds (runs list: 0.1-0.2 s saved).
    model_config = ConfigDict(defer_build=True)


class Resolved(_Model):
    """One resolved option and where its value came from (flag, env:NAME, config:FILE, default)."""

    value: Any
    origin: str


class ProcessRef(_Model):
    pid: int
    create_time: float
    pgid: int | None = None
    # Clock ticks since boot (/proc/PID/stat): the exact pid-reuse guard where recorded.
    start_ticks: int | None = None


class CommandStatus(BaseModel):
    """The command's own status, kept when proctor decided the run's (a time limit, a stop)."""

    code: int
    signal: str | None = None


class ExitStatus(_Model):
    code: int
    signal: str | None = None
    # "command": the command's own status; "proctor": proctor ended it (time limit, stop).
    decided_by: Literal["command", "proctor"] = "command"
    # Why proctor decided ("timeout", "stopped"); then `code` is proctor's (4, 130) and
    # `command` the status the command itself ended with, if it had one.
    reason: str | None = None
    command: CommandStatus | None = None


class HostInfo(_Model):
    model_config = ConfigDict(extra="allow")

    hostname: str
    os: str
    kernel: str
    cpu_model: str
    cpu_count: int
    memory_total_bytes: int
    python: str
    timezone: str


class Event(_Model):
    time: str
    event: str
    detail: str | None = None


class RecordCore(_Model):
    """What every run record holds, whatever its kind."""

    # allow_inf_nan: proctor writes strict JSON, so a NaN or Infinity (which Python's json
    # reads) is damage: rejected like any bad field (a view drops it, a strict read is 64).
    model_config = ConfigDict(extra="allow", populate_by_name=True, allow_inf_nan=False)

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

    # The target and source are open tables (each kind of target and source has its own
    # facts); these are the facts every reader uses, None where the record does not say.
    @property
    def target_kind(self) -> str | None:
        return _text(self.target.get("kind")) if "target" in self.model_fields_set else None

    @property
    def target_host(self) -> str | None:
        return _text(self.target.get("host"))

    @property
    def source_commit(self) -> str | None:
        return _text((self.source or {}).get("commit"))

    @property
    def source_dirty(self) -> bool | None:
        dirty = (self.source or {}).get("dirty")
        return None if dirty is None else bool(dirty)

    @property
    def hostname(self) -> str | None:
        return self.host.hostname if self.host is not None else None

    @property
    def recorded_outcome(self) -> str:
        """The outcome the record states; "unknown" where it states none (a default is not
        a fact)."""
        return self.outcome if "outcome" in self.model_fields_set else "unknown"

    def fact(self, name: str) -> Any:
        """A field some kinds have (gpu, key, server...): the model's, or one the record
        carries beyond its model; None where it has neither."""
        return getattr(self, name, None)

    def section(self, name: str) -> dict[str, Any] | None:
        """A table the record states (slurm, server, ...), the model's or one it carries
        beyond its model, as a new dict for a writer to merge facts into and write back
        through the Recorder; None where the record states no such table (a default is not
        a fact)."""
        value = self.fact(name) if name in self.model_fields_set else None
        return dict(value) if isinstance(value, dict) else None


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


class GpuProcess(_Model):
    pid: int
    memory_mib: float
    name: str | None = None


class GpuDeviceHealth(_Model):
    """One GPU as the preflight read it (monitors/gpu_health.py): each counter None where the
    driver does not expose it (`not_exposed` names those)."""

    model_config = ConfigDict(extra="allow")

    index: int | None = None
    uuid: str | None = None
    name: str | None = None
    ok: bool = True
    problems: list[str] = Field(default_factory=list)
    processes: list[GpuProcess] = Field(default_factory=list)
    ecc_enabled: bool | None = None
    ecc: dict[str, int | None] = Field(default_factory=dict)
    retired_pages: dict[str, int | bool | None] = Field(default_factory=dict)
    remapped_rows: dict[str, int | bool] | None = None
    clock_event_reasons: list[str] | None = None
    throttle_ns: dict[str, int | None] = Field(default_factory=dict)
    power_limit_w: float | None = None
    enforced_power_limit_w: float | None = None
    default_power_limit_w: float | None = None
    xids: list[dict[str, Any]] | None = None
    probe: dict[str, Any] | None = None
    not_exposed: list[str] = Field(default_factory=list)


class GpuHealth(_Model):
    """A GPU health reading: the preflight (`gpu_health`) or the same counters after the run
    (`gpu_health_after`). `status` "no GPU" passes; "failed" refused the run (exit 69) unless
    --allow-unhealthy-gpu."""

    model_config = ConfigDict(extra="allow")

    checked_at: str | None = None
    mode: Literal["full", "counters"] = "full"
    ok: bool = True
    status: Literal["ok", "failed", "no GPU"] = "ok"
    reason: str | None = None
    problems: list[str] = Field(default_factory=list)
    selection: str | None = None
    xid_source: str | None = None
    xid_note: str | None = None
    devices: list[GpuDeviceHealth] = Field(default_factory=list)
    allowed: bool | None = None  # failed, and run anyway with --allow-unhealthy-gpu


class GpuHealthChange(_Model):
    """What changed on the run's GPUs between the preflight and the end of the run."""

    model_config = ConfigDict(extra="allow")

    window_s: float | None = None
    ok: bool = True
    problems: list[str] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
    devices: list[dict[str, Any]] = Field(default_factory=list)


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
    # What the command left running when it exited, stopped by the wrapper: pid, name,
    # cmdline (masked), gpu_memory_mib (None: not known), signal, survived.
    leftovers: list[dict[str, Any]] = Field(default_factory=list)
    # GPU health (docs/gpu-health.md): the preflight, the same counters after, the change.
    gpu_health: GpuHealth | None = None
    gpu_health_after: GpuHealth | None = None
    gpu_health_change: GpuHealthChange | None = None


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


class FlowStep(_Model):
    model_config = ConfigDict(extra="allow")

    step: str
    started_at: str
    ended_at: str | None = None
    exit_code: int | None = None
    run_id: str | None = None


class FlowWorkloadRun(_Model):
    """One workload of a flow, in the order it ran: what it was, its run, its exit code."""

    model_config = ConfigDict(extra="allow")

    index: int
    name: str | None = None
    kind: str | None = None
    run_id: str | None = None
    exit_code: int | None = None
    # What a reader looks for first (record/headline.py): verdict, figures; None: no metrics.
    headline: dict[str, Any] | None = None


class FlowRecord(RecordCore):
    kind: Literal["flow"] = "flow"
    cwd: str | None = None
    log: str | None = "flow.log"
    # The flow's typed job (proctor.jobs.flow.FlowJob as JSON), which `flow --resume` reads.
    job: dict[str, Any] = Field(default_factory=dict)
    options: dict[str, Any] = Field(default_factory=dict)  # flows before the typed job
    steps: list[FlowStep] = Field(default_factory=list)
    workload_runs: list[FlowWorkloadRun] = Field(default_factory=list)
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
    plot: str | None = None  # sweeps before plotly-only reports drew a PNG; kept to read them
    plot_skipped: str | None = None
    exit_code: int | None = None


class RemoteRecord(RecordCore):
    """The local placeholder of a far run, until its own record is fetched."""

    kind: Literal["remote"] = "remote"
    remote_dir: str | None = None


class ImportedRecord(RecordCore):
    """A result another tool measured (vLLM, GuideLLM, AIPerf, a Benchmark Report), read into
    a run of its own by `proctor results import` (results/exchange/): no process of it ran
    under proctor. `imported`: the tool, its version where the file says it, the file's name
    and sha256, the format, and what the result lacks that a proctor bench records."""

    kind: Literal["imported"] = "imported"
    imported: dict[str, Any] = Field(default_factory=dict)


AnyRecord = Annotated[
    CommandRecord
    | ServerRecord
    | WorkloadRecord
    | SlurmRecord
    | SlurmNodeRecord
    | FlowRecord
    | SweepRecord
    | RemoteRecord
    | ImportedRecord,
    Field(discriminator="kind"),
]
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
    "imported": ImportedRecord,
}
#: Back-compatible name: the record of a launched (wrapper-run) command.
RunRecord = LaunchedRecord
R = TypeVar("R", bound=RecordCore)


def upgrade(data: dict[str, Any]) -> dict[str, Any]:
    """A record of any known version, in the current version's shape (a new dict)."""
    data = dict(data)
    version = data.get("schema_version", 1)
    if isinstance(version, bool) or not isinstance(version, int):
        # "2" or 2.0 is damage, not a version: naming it "unknown version 2" would send the
        # user to upgrade a proctor that knows version 2.
        raise RecordError(
            f"schema_version {json.dumps(version)} is not a whole number"
            f" (proctor writes {SCHEMA_VERSION})",
            hint="the record was edited or damaged; restore schema_version to a number",
        )
    if version not in KNOWN_VERSIONS:
        known = ", ".join(str(v) for v in sorted(KNOWN_VERSIONS))
        newer = isinstance(version, int) and version > max(KNOWN_VERSIONS)
        raise RecordError(
            f"unknown record schema version {version!r} (this proctor knows {known})",
            hint="a newer proctor wrote it: upgrade proctor to read it" if newer else None,
        )
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
        raise RecordError(f"record {data.get('run_id')!r}: {_one_line(error)}") from None


def _one_line(error: ValidationError) -> str:
    """What the model rejected, in one line: each field's path and why."""
    return validation_problem(error, what=f"rejected as a {error.title}")


def parse_as(model: type[R], data: dict[str, Any]) -> R:
    """The record as `model` (FlowRecord, SweepRecord...), or RecordError."""
    record = parse_record(data)
    if not isinstance(record, model):
        wanted = model.model_fields["kind"].default
        raise RecordError(f"record {record.run_id!r} is a {record.kind} record, not a {wanted}")
    return record


def view_record(data: dict[str, Any], run_id: str) -> RecordCore:
    """A typed view of any record, for readers that must never fail (reports, listings):
    the kind's model; else that model, or the shared core, without the fields it rejects
    (a half-written or hand-edited record keeps every fact that reads); else an empty core
    with `run_id`."""
    try:
        return parse_record(data)
    except RecordError:
        pass
    try:
        data = {"kind": "command", **upgrade(data)}
    except RecordError:
        return RecordCore(run_id=run_id, kind=str(data.get("kind") or "command"))
    if not isinstance(data.get("run_id"), str):
        data["run_id"] = run_id
    model = MODELS.get(str(data.get("kind")), RecordCore)
    for candidate in (model, RecordCore):
        record = _without_rejected(candidate, data)
        if record is not None:
            return record
    return RecordCore(run_id=run_id, kind=str(data.get("kind") or "command"))


def _without_rejected(model: type[RecordCore], data: dict[str, Any]) -> RecordCore | None:
    """`data` as `model`, dropping the top-level fields it rejects; None if a field it needs
    is missing or the identity itself is rejected."""
    data = dict(data)
    while True:
        try:
            return model.model_validate(data)
        except ValidationError as error:
            bad = {str(e["loc"][0]) for e in error.errors() if e["loc"]}
            if not bad or not bad <= data.keys() or bad & {"run_id", "kind"}:
                return None
            for name in bad:
                del data[name]


def read_view(run_dir: Path) -> RecordCore:
    """The record of a run directory as far as it reads (view_record); an empty core named
    after the directory where there is none."""
    return view_record(_read_json(run_dir) or {}, run_dir.name)


def health_of(run_dir: Path, name: str = "gpu_health") -> dict[str, Any] | None:
    """A GPU health fact of the run's record (GpuHealth, GpuHealthChange) as JSON, or None."""
    value = read_view(run_dir).fact(name)
    return value.model_dump(mode="json") if value is not None else None


def _read_json(run_dir: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((run_dir / "record.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None


@overload
def load_record(run_dir: Path) -> RecordCore | None: ...
@overload
def load_record(run_dir: Path, *, strict: Literal[False]) -> RecordCore | None: ...
@overload
def load_record(run_dir: Path, *, strict: Literal[True]) -> RecordCore: ...
def load_record(run_dir: Path, *, strict: bool = False) -> RecordCore | None:
    """record.json of a run directory as the model of its kind (version-1 records upgraded).

    Without `strict`: None where it is missing or cannot be read (displays that must not
    fail). With `strict`: RecordError (exit 64) naming the file and why: missing, not JSON,
    not an object, rejected by its kind's model, or of a schema version this proctor does not
    know (a newer proctor wrote it: refused, never half-read)."""
    path = run_dir / "record.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        if strict:
            raise RecordError(f"{path}: no record", hint="is this a run directory?") from None
        return None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        if strict:
            raise RecordError(f"{path}: not a readable JSON record ({error})") from None
        return None
    if not isinstance(data, dict):
        if strict:
            raise RecordError(f"{path}: not a JSON object")
        return None
    try:
        return parse_record(data)
    except RecordError as error:
        if strict:
            raise RecordError(f"{path}: {error.message}", hint=error.hint) from None
        return None


def json_schema() -> dict[str, Any]:
    # Built here, not at import: every reader of a record (the run wrapper's store row too)
    # imports this module, and only the schema's generation needs the union's adapter.
    adapter: TypeAdapter[Any] = TypeAdapter(AnyRecord)
    schema: dict[str, Any] = adapter.json_schema(by_alias=True)
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
    "FlowWorkloadRun",
    "GpuDeviceHealth",
    "GpuHealth",
    "GpuHealthChange",
    "HostInfo",
    "ImportedRecord",
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
    "health_of",
    "json_schema",
    "load_record",
    "parse_as",
    "parse_record",
    "read_view",
    "upgrade",
    "view_record",
]


if __name__ == "__main__":
    print(json.dumps(json_schema(), indent=2))

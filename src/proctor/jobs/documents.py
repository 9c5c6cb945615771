"""The documents a job's run leaves, as typed models: every writer checks its document against
its model before it is written, and the readers read the model, not string keys.

    model            file                                  schema, schema_version
    BenchDocument    a bench's metrics.json                "proctor.bench.metrics", 1
    EvalDocument     a GSM8K eval's metrics.json           "proctor.gsm8k-metrics/1"
    OfflineDocument  an offline job's metrics.json         "proctor.offline-metrics/1"
    SweepSummary     a concurrency sweep's summary.json    "proctor.sweep.summary", 1
    GridSummary      a server sweep's summary.json         "proctor.server-sweep.summary", 1
    SloSearchResult  an SLO search's result.json           "proctor.slo-search.result", 1

    load_document(path or dict) -> one of them, picked by its "schema" (a summary or result
        written before they carried one, or a GSM8K/offline document with only its "kind":
        by its shape)
    read_bench(path) -> BenchDocument | None     for readers that skip what they cannot read
    write_checked(data, Model, write)            how a writer puts its document on disk

Forms. Each model types every section a reader uses; a document may carry more (a newer
proctor's section, an open-ended one such as `steady_state`): those are kept as written
(`extra="allow"`), so an older or newer file still loads and dumps back unchanged. A figure
(a number in `metrics`, a rate in `schedule`, ...) that is not a number reads as no figure
(None): one unreadable value must not cost a run its other figures. Anything else that does
not fit (not a JSON object, an unknown schema, a section that is not an object, a verdict
that is not true/false) is a damaged document: `load_document` raises ConfigError saying
where. The JSON Schemas of these models are committed in docs/schemas/ (`python -m
proctor.jobs.documents --write`); a test fails when they drift from the models. A change of
form that an older reader would misread gets a new version.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Any, Final, Literal, TypeAlias

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ModelWrapValidatorHandler,
    PrivateAttr,
    RootModel,
    ValidationError,
    model_validator,
)

from proctor.errors import ConfigError, InternalError, invalid, validation_problem
from proctor.stats import finite

BENCH_SCHEMA: Final = "proctor.bench.metrics"
BENCH_VERSION = 1
EVAL_SCHEMA: Final = "proctor.gsm8k-metrics/1"
OFFLINE_SCHEMA: Final = "proctor.offline-metrics/1"
SWEEP_SCHEMA: Final = "proctor.sweep.summary"
SWEEP_VERSION = 1
GRID_SCHEMA: Final = "proctor.server-sweep.summary"
GRID_VERSION = 1
SLO_SCHEMA: Final = "proctor.slo-search.result"
SLO_VERSION = 1


def _figure(value: Any) -> Any:
    """A number as written (an int stays an int), anything else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return value


#: A figure: a number as written, or None (absent, null, or not a number in the file).
Figure: TypeAlias = Annotated[float | int | None, BeforeValidator(_figure)]


class Section(BaseModel):
    """A part of a document: the fields readers use are typed, any other is kept as written."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    def dump(self) -> dict[str, Any]:
        """As JSON data, every field as it was given (none added)."""
        return _dump(self)


class Figures(RootModel[dict[str, Figure]]):
    """A flat table of figures, {name: number | null}, in the order written."""

    root: dict[str, Figure] = Field(default_factory=dict)
    #: The values written that are no number (text, true, an object), kept for the readers
    #: that say so ("gives X as 'fast'"); they read as None in `root`.
    _unread: dict[str, Any] = PrivateAttr(default_factory=dict)

    @model_validator(mode="wrap")
    @classmethod
    def _keep_unread(cls, data: Any, handler: ModelWrapValidatorHandler[Figures]) -> Figures:
        model = handler(data)
        if isinstance(data, dict):
            model._unread = {
                str(k): v
                for k, v in data.items()
                if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)))
            }
        return model

    def raw(self, name: str) -> Any:
        """The value of `name` as written: a number, None, or what was no number."""
        return self._unread.get(name, self.root.get(name))

    def get(self, name: str) -> float | None:
        """The figure `name` as a finite float, or None."""
        return finite(self.root.get(name))

    def numbers(self) -> dict[str, float]:
        """Every finite figure, as floats, in the order written."""
        out: dict[str, float] = {}
        for name, value in self.root.items():
            number = finite(value)
            if number is not None:
                out[name] = number
        return out

    def __contains__(self, name: object) -> bool:
        return name in self.root

    def __iter__(self) -> Iterator[str]:  # type: ignore[override]
        return iter(self.root)

    def items(self) -> Iterator[tuple[str, Figure]]:
        return iter(self.root.items())


def _dump(model: BaseModel) -> dict[str, Any]:
    """The document as JSON data, every field as it was given (none added)."""
    return model.model_dump(mode="json", by_alias=True, exclude_unset=True)


class Document(Section):
    """A whole document (a file a job's run leaves)."""


# -- the bench's metrics.json ---------------------------------------------------------------------
class BenchConfigSection(Section):
    """The resolved bench config (BenchConfig.public_dict: no credentials, inf as "inf")."""

    base_url: str | None = None
    endpoint: str | None = None
    model: str | None = None
    concurrency: int | None = None
    request_rate: float | Literal["inf"] | None = None
    dataset: str | None = None
    repeat: int | None = None
    ignore_eos: bool | None = None
    max_error_rate: Figure = None
    min_requests: int | None = None
    min_window_s: Figure = None
    percentiles: list[float] | None = None


class BenchVerdict(Section):
    """Did the measured requests fail beyond --max-error-rate (workloads/loadgen/verdict.py)."""

    ok: bool | None = None
    failed: int | None = None
    total: int | None = None
    error_rate: Figure = None
    max_error_rate: Figure = None
    first_reasons: list[str] = Field(default_factory=list)
    message: str | None = None


class Stat(Section):
    mean: Figure = None
    median: Figure = None
    std: Figure = None
    percentiles: dict[str, Figure] = Field(default_factory=dict)


class Failures(Section):
    count: int = 0
    by_reason: dict[str, int] = Field(default_factory=dict)
    examples: list[dict[str, Any]] = Field(default_factory=list)


class Warmup(Section):
    count: Figure = None
    failed: Figure = None


class Distribution(Section):
    count: int = 0
    min: Figure = None
    max: Figure = None
    mean: Figure = None


class PromptLengths(Section):
    source: str | None = None
    target: Distribution | None = None
    actual: Distribution | None = None
    actual_by_request: list[Figure] = Field(default_factory=list)


class OutputLengths(Section):
    expected: Distribution | None = None
    actual: Distribution | None = None
    sources: list[str | None] = Field(default_factory=list)


class ProfileSection(Section):
    requested: bool = False
    started: bool = False
    stopped: bool = False
    error: str | None = None


class DatasetSection(Section):
    """What was sent (workloads/loadgen/workload.py): kind, id; a file's path and sha256."""

    kind: str | None = None
    id: str | None = None
    path: str | None = None
    sha256: str | None = None
    prefix_cache: dict[str, Any] | None = None
    per_turn: list[dict[str, Any]] | None = None


class RepeatStat(Section):
    n: int | None = None
    mean: Figure = None
    stdev: Figure = None
    stderr: Figure = None
    ci95_low: Figure = None
    ci95_high: Figure = None
    ci95_half: Figure = None


class RepeatsSection(Section):
    """--repeat N > 1: every repeat's figures and each figure's statistics over them."""

    n: int | None = None
    confidence: Figure = None
    method: str | None = None
    stats: dict[str, RepeatStat] = Field(default_factory=dict)
    per_repeat: list[Figures] = Field(default_factory=list)


class ClientSection(Section):
    """The load generator's headroom (workloads/loadgen/headroom.py)."""

    cpu_percent: Figure = None
    loop_lag_p99_ms: Figure = None
    client_bound: bool = False
    reasons: list[str] = Field(default_factory=list)
    fix: str | None = None  # what to run instead, when client-bound (headroom.more_workers)
    path: str | None = None
    # The raw client's read path: "C" (loadgen/_fastread.c, for a read's whole token chunks;
    # the rest of each read in Python) or "Python".
    reader: str | None = None
    loop: str | None = None


class ScheduleSection(Section):
    """Did the client send when it said it would (workloads/loadgen/scheduler.py)."""

    target_rate: Figure = None
    achieved_rate: Figure = None
    sent: Figure = None
    schedule_delay_p50_ms: Figure = None
    schedule_delay_p99_ms: Figure = None
    schedule_delay_max_ms: Figure = None
    per_repeat_achieved_rate: list[Figure] | None = None


class ConformanceCheck(Section):
    judged: bool = False
    reason: str | None = None
    checked: Figure = None
    short: Figure = None
    long: Figure = None
    off: Figure = None
    examples: list[Any] = Field(default_factory=list)


class ConformanceSection(Section):
    """Did the server run the workload asked for (workloads/loadgen/conformance.py)."""

    output: ConformanceCheck = Field(default_factory=ConformanceCheck)
    input: ConformanceCheck = Field(default_factory=ConformanceCheck)
    prompts_sha256: str | None = None


class ReconcileCheck(Section):
    """One figure counted by both sides (monitors/reconcile.py)."""

    server: float
    client: float
    diff: Figure = None
    allowed: float
    ok: bool
    unit: str | None = None


class Reconcile(Section):
    tokens: ReconcileCheck | None = None
    ttft_mean_ms: ReconcileCheck | None = None
    ok: bool | None = None
    disagreements: list[Any] = Field(default_factory=list)


class ServerWindow(Section):
    start: Figure = None
    end: Figure = None
    seconds: Figure = None


class ServerHistogram(Section):
    """A latency histogram's window: count, mean, percentiles interpolated in its buckets."""

    count: Figure = None
    mean: Figure = None
    p50: Figure = None
    p90: Figure = None
    p99: Figure = None
    note: str | None = None


class ServerPrefixCache(Section):
    hits: Figure = None
    queries: Figure = None
    hit_rate: Figure = None


class ServerSection(Section):
    """The server's /metrics over the measured window (monitors/server_metrics.py); gauges
    other than those named here (`*_max`, `*_mean`) are kept as written."""

    url: str | None = None
    scrapes: int | None = None
    available: bool | None = None
    engine: str | None = None
    note: str | None = None
    window: ServerWindow | None = None
    generation_tokens: Figure = None
    prompt_tokens: Figure = None
    prefix_cache: ServerPrefixCache | None = None
    running_max: Figure = None
    waiting_max: Figure = None
    kv_cache_usage_max: Figure = None
    ttft_ms: ServerHistogram | None = None
    e2el_ms: ServerHistogram | None = None
    reconcile: Reconcile | None = None


class EnergySection(Section):
    """Energy per token over the measured window (monitors/energy.py)."""

    available: bool | None = None
    reason: str | None = None
    gpus: Figure = None
    window_s: Figure = None
    mean_power_w: Figure = None
    idle_power_w: Figure = None
    idle_source: str | None = None
    j_per_output_token: Figure = None
    gross_j_per_output_token: Figure = None


class ValidityCheck(Section):
    ok: bool
    detail: str


class ValiditySection(Section):
    """Is the bench a measurement (results/validity.py)."""

    verdict: Literal["VALID", "INVALID"] | None = None
    reasons: list[str] = Field(default_factory=list)
    checks: dict[str, ValidityCheck] = Field(default_factory=dict)
    ttft_trend: dict[str, Figure] | None = None


class BenchDocument(Document):
    """A bench's metrics.json (workloads/loadgen/runner.py `result_document`; the run wrapper
    adds the `gpu` validity check). Every section is optional: documents of older versions of
    proctor, and the partial ones tests and importers write, read the same way."""

    schema_: Literal["proctor.bench.metrics"] = Field(BENCH_SCHEMA, alias="schema")
    schema_version: int = BENCH_VERSION
    proctor_version: str | None = None
    started_at: str | None = None
    finished_at: str | None = None
    model: str | None = None
    config: BenchConfigSection = Field(default_factory=BenchConfigSection)
    metrics: Figures = Field(default_factory=Figures)
    verdict: BenchVerdict | None = None
    stats_ms: dict[str, Stat] = Field(default_factory=dict)
    failures: Failures | None = None
    warmup: Warmup | None = None
    prompt_lengths: PromptLengths | None = None
    output_lengths: OutputLengths | None = None
    profile: ProfileSection | None = None
    workers: int | None = None
    dataset: DatasetSection | None = None
    repeats: RepeatsSection | None = None
    client: ClientSection | None = None
    schedule: ScheduleSection | None = None
    conformance: ConformanceSection | None = None
    steady_state: dict[str, Any] | None = None
    server: ServerSection | None = None
    energy: EnergySection | None = None
    gpu_sampling: dict[str, Any] | None = None
    telemetry_notes: list[Any] | None = None
    validity: ValiditySection | None = None


# -- the GSM8K eval's metrics.json ----------------------------------------------------------------
class EvalConfigSection(Section):
    base_url: str | None = None
    model: str | None = None
    num_fewshot: int | None = None
    limit: int | float | None = None
    chat: bool | None = None
    num_concurrent: int | None = None
    gen_kwargs: str | None = None
    data_dir: str | None = None


class EvalVerdict(Section):
    """Requests lm-eval got no answer for (workloads/gsm8k.py `check_answered`)."""

    ok: bool | None = None
    unanswered: int | None = None
    error_rate: Figure = None
    max_error_rate: Figure = None
    first_lines: list[str] = Field(default_factory=list)
    message: str | None = None


class EvalDocument(Document):
    """A GSM8K eval's metrics.json (workloads/gsm8k.py `run_gsm8k`), rewritten as it goes:
    status "running", then "ok" or "failed"."""

    schema_: Literal["proctor.gsm8k-metrics/1"] = Field(EVAL_SCHEMA, alias="schema")
    kind: Literal["gsm8k"] = "gsm8k"
    status: Literal["running", "ok", "failed"] | None = None
    command: list[str] = Field(default_factory=list)
    env_overrides: dict[str, str] = Field(default_factory=dict)
    config: EvalConfigSection = Field(default_factory=EvalConfigSection)
    data: dict[str, Any] | None = None
    metrics: Figures = Field(default_factory=Figures)
    verdict: EvalVerdict | None = None
    error: str | None = None
    lm_eval_exit_code: int | None = None
    wall_time_s: Figure = None
    results_file: str | None = None
    lm_eval_version: str | None = None
    task_version: str | int | float | None = None
    n_original: int | None = None


# -- the offline job's metrics.json ---------------------------------------------------------------
class DiskCheck(Section):
    what: str | None = None
    path: str | None = None
    free_gib: Figure = None
    need_gib: Figure = None
    ok: bool | None = None


class OfflineDocument(Document):
    """An offline job's metrics.json (workloads/offline.py `run_offline`): the figures its
    output printed, their units, the lines they came from."""

    schema_: Literal["proctor.offline-metrics/1"] = Field(OFFLINE_SCHEMA, alias="schema")
    kind: Literal["offline"] = "offline"
    engine: str | None = None
    model: str | None = None
    command: list[str] = Field(default_factory=list)
    min_free_disk_gib: Figure = None
    patterns: dict[str, str] = Field(default_factory=dict)
    status: str | None = None
    exit_code: int | None = None
    wall_time_s: Figure = None
    disk: list[DiskCheck] = Field(default_factory=list)
    error: str | None = None
    metrics: Figures = Field(default_factory=Figures)
    units: dict[str, str] = Field(default_factory=dict)
    lines: dict[str, str] = Field(default_factory=dict)
    faults: list[str] = Field(default_factory=list)


# -- sweeps --------------------------------------------------------------------------------------
class SweepPointRow(Section):
    """One point of a concurrency sweep: its bench run, exit status, why it failed, and the
    bench's figures beside them (as extra fields: output_throughput, valid, ...)."""

    concurrency: int | None = None
    run_id: str | None = None
    exit_code: int | None = None
    failure: str | None = None

    def figure(self, name: str) -> float | None:
        return finite((self.model_extra or {}).get(name))


class SweepSummary(Document):
    """A concurrency sweep's summary.json (workloads/sweep.py `write_summary`). Its plots are
    its report; a summary of an older proctor also says `plot` and `plot_skipped` (kept)."""

    schema_: Literal["proctor.sweep.summary"] = Field(SWEEP_SCHEMA, alias="schema")
    schema_version: int = SWEEP_VERSION
    sweep: str | None = None
    points: list[SweepPointRow] = Field(default_factory=list)


class GridRow(Section):
    """One bench of a server sweep: the server point, the bench's axes, its figures."""

    server: dict[str, Any] = Field(default_factory=dict)
    bench: dict[str, Any] = Field(default_factory=dict)
    flow_run: str | None = None
    bench_run: str | None = None
    exit_code: int | None = None
    metrics: Figures = Field(default_factory=Figures)
    tok_s_per_user: Figure = None
    tok_s_per_gpu: Figure = None


class GridSummary(Document):
    """A server sweep's summary.json (server_sweep.py `write_server_summary`): one row per
    bench and the indices of the Pareto front (an older one's `plots` are kept as written)."""

    schema_: Literal["proctor.server-sweep.summary"] = Field(GRID_SCHEMA, alias="schema")
    schema_version: int = GRID_VERSION
    group: str | None = None
    sweep: str | None = None
    rows: list[GridRow] = Field(default_factory=list)
    pareto: list[int] = Field(default_factory=list)


class SloProbe(Section):
    value: float
    run_id: str
    exit_code: int | None = None
    met: bool
    why: list[str] = Field(default_factory=list)
    metrics: Figures = Field(default_factory=Figures)


class SloSearchResult(Document):
    """An SLO search's result.json (workloads/slo.py `slo_search`): the highest value of the
    axis meeting every condition, and the probes that found it."""

    schema_: Literal["proctor.slo-search.result"] = Field(SLO_SCHEMA, alias="schema")
    schema_version: int = SLO_VERSION
    axis: str
    slo: list[str] = Field(default_factory=list)
    answer: Figure = None
    probes: list[SloProbe] = Field(default_factory=list)
    error: str | None = None


AnyDocument: TypeAlias = (
    BenchDocument | EvalDocument | OfflineDocument | SweepSummary | GridSummary | SloSearchResult
)

#: Each schema's model.
MODELS: dict[str, type[Document]] = {
    BENCH_SCHEMA: BenchDocument,
    EVAL_SCHEMA: EvalDocument,
    OFFLINE_SCHEMA: OfflineDocument,
    SWEEP_SCHEMA: SweepSummary,
    GRID_SCHEMA: GridSummary,
    SLO_SCHEMA: SloSearchResult,
}
#: The newest version of each versioned schema this proctor reads.
VERSIONS: dict[str, int] = {
    BENCH_SCHEMA: BENCH_VERSION,
    SWEEP_SCHEMA: SWEEP_VERSION,
    GRID_SCHEMA: GRID_VERSION,
    SLO_SCHEMA: SLO_VERSION,
}


def _untagged(data: dict[str, Any]) -> type[Document] | None:
    """The model of a document written before its kind carried a schema (sweep summaries,
    an SLO search's result), or without one (a GSM8K or offline document with its "kind"
    only), by its shape."""
    if "rows" in data and "pareto" in data:
        return GridSummary
    if "points" in data and isinstance(data.get("points"), list):
        return SweepSummary
    if "probes" in data and "axis" in data:
        return SloSearchResult
    if data.get("kind") == "gsm8k":
        return EvalDocument
    if data.get("kind") == "offline":
        return OfflineDocument
    return None


def model_for(data: dict[str, Any], what: str = "document") -> type[Document]:
    """The model of `data`, by its "schema" (or, untagged, its shape); ConfigError if none."""
    schema = data.get("schema")
    if schema is None:
        model = _untagged(data)
        if model is not None:
            return model
        raise ConfigError(
            f'{what}: no "schema" field: not a document proctor wrote',
            hint="give a proctor metrics.json or summary.json",
        )
    model = MODELS.get(schema) if isinstance(schema, str) else None
    if model is None:
        known = ", ".join(sorted(MODELS))
        raise ConfigError(f"{what}: unknown schema {schema!r}", hint=f"known: {known}")
    version = data.get("schema_version")
    newest = VERSIONS.get(schema)
    if newest is not None and isinstance(version, int) and version > newest:
        raise ConfigError(
            f"{what}: {schema} version {version} is newer than this proctor reads ({newest})",
            hint="upgrade proctor to read it",
        )
    return model


def parse_document(data: Any, what: str = "document") -> AnyDocument:
    """`data` (a parsed JSON object) as its model; ConfigError when it is damaged."""
    if not isinstance(data, dict):
        raise ConfigError(f"{what}: not a JSON object", hint="give a proctor metrics.json")
    model = model_for(data, what)
    try:
        return model.model_validate(data)  # type: ignore[return-value]
    except ValidationError as error:
        raise invalid(
            error,
            what=f"{what}: damaged {model.__name__}",
            hint="the file was edited or cut short; rerun the job to write it again",
            cls=ConfigError,
        ) from None


def load_document(source: str | Path | dict[str, Any]) -> AnyDocument:
    """A metrics.json, summary.json or result.json (a path, or its parsed content) as its
    model, picked by its "schema". ConfigError when it cannot be read or is damaged."""
    if isinstance(source, dict):
        return parse_document(source)
    path = Path(source)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(f"cannot read {path}: {error}") from None
    try:
        data = json.loads(text)
    except ValueError as error:
        raise ConfigError(f"{path}: not JSON ({error})", hint="the file is damaged") from None
    return parse_document(data, str(path))


def bench_document(data: Any) -> BenchDocument:
    """`data` as a bench document, whatever its schema field says (the checks on partial
    documents); ConfigError when it does not fit."""
    if isinstance(data, BenchDocument):
        return data
    try:
        return BenchDocument.model_validate(data)
    except ValidationError as error:
        raise invalid(error, what="metrics.json: damaged BenchDocument", cls=ConfigError) from None


def read_bench(path: Path) -> BenchDocument | None:
    """The bench document at `path`, or None when there is none, it is damaged, or it is
    another kind of document (for readers that show what they can and skip the rest)."""
    try:
        doc = load_document(path)
    except ConfigError:
        return None
    return doc if isinstance(doc, BenchDocument) else None


def read_or_none(path: Path) -> AnyDocument | None:
    """The document at `path`, or None when it is absent or damaged."""
    try:
        return load_document(path)
    except ConfigError:
        return None


def mismatch(data: dict[str, Any], model: type[Document]) -> str | None:
    """Why `model` does not read `data` (JSON data) and dump it back unchanged, or None."""
    try:
        back = _dump(model.model_validate(data))
    except ValidationError as error:
        return validation_problem(error)
    if _text(back) != _text(data):  # as JSON text: true is not 1, nor 1.0 the 1 written
        return "it does not dump back as written"
    return None


def _text(data: Any) -> str:
    return json.dumps(data, sort_keys=True, allow_nan=True)


def write_checked(data: dict[str, Any], model: type[Document], write: Callable[[str], Any]) -> None:
    """Write `data` (a writer's document, secrets masked) as JSON text through `write`, checked
    against `model`: the model must read it and dump it back unchanged. A document that does
    not fit is a bug of its writer: it is written all the same (the evidence is kept), then
    InternalError says what does not fit."""
    text = json.dumps(data, indent=2, default=str, allow_nan=False)
    problem = mismatch(json.loads(text), model)
    write(text + "\n")
    if problem is not None:
        raise InternalError(f"the {model.__name__} written does not fit its model: {problem}")


# -- JSON Schemas -------------------------------------------------------------------------------
SCHEMA_DIR = "docs/schemas"
SCHEMA_FILES: dict[str, type[Document]] = {
    "bench-metrics.schema.json": BenchDocument,
    "gsm8k-metrics.schema.json": EvalDocument,
    "offline-metrics.schema.json": OfflineDocument,
    "sweep-summary.schema.json": SweepSummary,
    "server-sweep-summary.schema.json": GridSummary,
    "slo-search-result.schema.json": SloSearchResult,
}


def schema_texts() -> dict[str, str]:
    """Each committed JSON Schema file's text, generated from its model."""
    return {
        name: json.dumps(model.model_json_schema(by_alias=True), indent=2) + "\n"
        for name, model in SCHEMA_FILES.items()
    }


def main(argv: list[str] | None = None) -> int:
    """`python -m proctor.jobs.documents --write [DIR]`: write the JSON Schemas (DIR:
    docs/schemas); without --write, print the bench document's."""
    import sys

    args = sys.argv[1:] if argv is None else argv
    texts = schema_texts()
    if args and args[0] == "--write":
        out = Path(args[1] if len(args) > 1 else SCHEMA_DIR)
        out.mkdir(parents=True, exist_ok=True)
        for name, text in texts.items():
            (out / name).write_text(text, encoding="utf-8")
        return 0
    print(texts["bench-metrics.schema.json"], end="")
    return 0


__all__ = [
    "BENCH_SCHEMA",
    "EVAL_SCHEMA",
    "GRID_SCHEMA",
    "OFFLINE_SCHEMA",
    "SLO_SCHEMA",
    "SWEEP_SCHEMA",
    "AnyDocument",
    "BenchDocument",
    "Document",
    "EvalDocument",
    "Figures",
    "GridSummary",
    "OfflineDocument",
    "SloSearchResult",
    "SweepSummary",
    "bench_document",
    "finite",
    "load_document",
    "mismatch",
    "parse_document",
    "read_bench",
    "read_or_none",
    "schema_texts",
    "write_checked",
]


if __name__ == "__main__":
    raise SystemExit(main())

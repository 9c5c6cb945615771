"""One run as a report sees it: the record, the state the evidence supports, the completion
checks, the phases, its metrics and its samples. Reading never fails on a missing file."""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

from proctor import redact
from proctor.errors import ConfigError
from proctor.jobs.documents import AnyDocument, BenchDocument, EvalDocument, parse_document
from proctor.record.manifest import ManifestCheck, verify_run_manifest
from proctor.record.rundir import RunDir
from proctor.record.schema import (
    Event,
    FlowRecord,
    LaunchedRecord,
    RecordCore,
    load_record,
    view_record,
)
from proctor.record.status import RunState, effective_outcome, is_alive, run_state
from proctor.report.metrics import MetricSet, metrics_of_doc
from proctor.report.series import (
    GpuSeries,
    Latencies,
    ServerSeries,
    read_gpu_csv,
    read_requests_jsonl,
    read_server_csv,
)

CheckStatus = Literal["ok", "fail", "unknown", "pending"]
# GPU memory back within this of where the run started counts as released.
GPU_RELEASE_TOLERANCE_MIB = 256.0


@dataclass(frozen=True)
class Check:
    name: str
    status: CheckStatus
    detail: str


@dataclass(frozen=True)
class Phase:
    """A moment of the workflow (start, ready, workload, drain, stop, end, ...)."""

    name: str
    time: str
    detail: str = ""
    run_id: str = ""


@dataclass
class RunView:
    run: RunDir
    record: dict[str, Any]
    state: RunState
    outcome: str
    manifest: ManifestCheck
    metrics_doc: dict[str, Any] | None
    metrics: MetricSet
    latencies: Latencies | None
    gpu: GpuSeries
    phases: list[Phase] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)
    server: ServerSeries = field(default_factory=ServerSeries)  # server_metrics.csv

    @cached_property
    def typed(self) -> RecordCore:
        """The record through its kind's model (never fails: see view_record)."""
        return view_record(self.record, self.run.run_id)

    @property
    def run_id(self) -> str:
        return self.typed.run_id or self.run.run_id

    @property
    def name(self) -> str:
        return self.typed.name or self.run_id

    @cached_property
    def document(self) -> AnyDocument | None:
        """metrics.json through its model (proctor.jobs.documents); None without one, for a
        result of another kind (an imported run's), or when it is damaged."""
        if not self.metrics_doc:
            return None
        try:
            return parse_document(self.metrics_doc, "metrics.json")
        except ConfigError:
            return None

    @property
    def bench(self) -> BenchDocument | None:
        """The bench's metrics.json, when the run is a bench."""
        return self.document if isinstance(self.document, BenchDocument) else None

    @property
    def configured_model(self) -> str | None:
        """The model a bench or an eval was configured with (its metrics.json `config`)."""
        doc = self.document
        return doc.config.model if isinstance(doc, (BenchDocument, EvalDocument)) else None

    @property
    def kind(self) -> str:
        """bench, gsm8k, or the record's kind (command, ...)."""
        if isinstance(self.document, EvalDocument):
            return "gsm8k"
        if isinstance(self.document, BenchDocument):
            return "bench"
        return self.typed.kind

    @property
    def label(self) -> str:
        return f"{self.name} ({self.run_id})"

    @property
    def command(self) -> str:
        return shlex.join(self.typed.command)

    @property
    def exit_text(self) -> str:
        if self.state.exit is None:
            return "unknown (no exit_code)" if self.state.state != "running" else "running"
        text = str(self.state.exit.code)
        if self.state.exit.signal:
            text += f" ({self.state.exit.signal})"
        recorded = self.typed.exit
        if recorded is not None and recorded.decided_by == "proctor":
            text += ", decided by proctor"
        return text


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def load_run(run: RunDir) -> RunView:
    # Masked again on the way in: a record written by an older proctor may hold a secret.
    record = redact.data(_read_json(run.record_path) or {"run_id": run.run_id})
    state = run_state(run)
    doc = redact.data(_read_json(run.path / "metrics.json"))
    view = RunView(
        run=run,
        record=record,
        state=state,
        outcome="",
        manifest=verify_run_manifest(run),
        metrics_doc=doc,
        metrics=metrics_of_doc(doc),
        latencies=read_requests_jsonl(run.path / "requests.jsonl"),
        gpu=read_gpu_csv(run.gpu_csv_path),
        server=read_server_csv(run.path / "server_metrics.csv"),
    )
    view.outcome = effective_outcome(view.typed, state)
    view.phases = phases_of(view)
    view.checks = completion_checks(view)
    return view


# -- phases -----------------------------------------------------------------------------------
# Record event names -> the workflow phase they mark. Anything else is shown as itself.
_PHASE_OF_EVENT = {
    "start": "start",
    "started": "start",
    "ready": "ready",
    "workload": "workload",
    "workload_start": "workload",
    "workload_end": "workload end",
    "drain": "drain",
    "drained": "drained",
    "stop": "stop",
    "teardown": "stop",
    "inspect": "inspect",
    "timeout": "stop (time limit)",
    "end": "end",
}


def _flow_events(view: RunView) -> list[Event]:
    """The steps of the flow this run belongs to (its `group`), as events on its timeline."""
    group = view.typed.group
    if not group or "/" in group:
        return []
    flow = load_record(view.run.path.parent / group)
    if not isinstance(flow, FlowRecord):
        return []
    events = []
    for s in flow.steps:
        if s.step == "stop":
            continue
        # The gate's moment is when it passed, not when it began to wait.
        when = s.ended_at if s.step == "ready" else s.started_at
        if when:
            events.append(Event(time=when, event=s.step, detail=f"flow step {s.step}"))
    return events


def phases_of(view: RunView) -> list[Phase]:
    phases: list[Phase] = []
    for event in [*view.typed.events, *_flow_events(view)]:
        name = event.event or "event"
        detail = event.detail or ""
        phases.append(Phase(_PHASE_OF_EVENT.get(name, name), event.time, detail, view.run_id))
    names = {p.name for p in phases}
    doc = view.bench
    # A benchmark says when its workload ran; a flow may already have recorded it as events.
    if doc is not None and "workload" not in names and doc.started_at is not None:
        phases.append(Phase("workload", doc.started_at, "benchmark started", view.run_id))
        if doc.finished_at is not None:
            phases.append(Phase("workload end", doc.finished_at, "benchmark finished", view.run_id))
    steady = (doc.steady_state if doc else None) or {}
    if steady.get("found") and isinstance(steady.get("opens_at"), str):
        # Ramp-up ends and drain-out begins (workloads/loadgen/steady.py).
        phases.append(
            Phase(
                "plateau",
                steady["opens_at"],
                "steady state: in flight near its peak from here",
                view.run_id,
            )
        )
        if isinstance(steady.get("closes_at"), str):
            phases.append(
                Phase(
                    "drain-out",
                    steady["closes_at"],
                    "steady state ends: the last requests finish",
                    view.run_id,
                )
            )
    typed = view.typed
    if "start" not in names and typed.started_at:
        phases.append(Phase("start", typed.started_at, "", view.run_id))
    if "end" not in names and typed.ended_at:
        phases.append(Phase("end", typed.ended_at, "", view.run_id))
    return sorted(phases, key=lambda p: p.time)


# -- completion checks ------------------------------------------------------------------------
def completion_checks(view: RunView) -> list[Check]:
    return [_result_known(view), _logs_verified(view), _machine_state(view)]


def _result_known(view: RunView) -> Check:
    name = "result known"
    if view.state.exit is not None:
        return Check(name, "ok", f"exit_code says {view.exit_text}")
    if view.state.state in ("running", "starting"):
        return Check(name, "pending", f"the run is {view.state.state}")
    return Check(name, "fail", "no exit_code and no live wrapper: the result is unknown")


def _names(items: list[str], limit: int = 4) -> str:
    shown = ", ".join(items[:limit])
    return shown + (f" and {len(items) - limit} more" if len(items) > limit else "")


def _logs_verified(view: RunView) -> Check:
    name = "logs verified"
    m = view.manifest
    if not m.present:
        if view.state.state in ("running", "starting"):
            return Check(name, "pending", "manifest.sha256 is written when the run ends")
        return Check(name, "unknown", "no manifest.sha256: the artifacts cannot be verified")
    if m.verified:
        return Check(name, "ok", f"{len(m.ok)} files match manifest.sha256")
    parts = []
    if m.changed:
        parts.append(f"changed: {_names(m.changed)}")
    if m.missing:
        parts.append(f"missing: {_names(m.missing)}")
    if m.extra:
        parts.append(f"not in the manifest: {_names(m.extra)}")
    if m.outside:
        parts.append(f"names outside the run directory: {_names(m.outside)}")
    return Check(name, "fail", "; ".join(parts))


def _machine_state(view: RunView) -> Check:
    name = "machine state verified"
    explicit = view.typed.fact("machine_state")  # a flow's own check
    if isinstance(explicit, dict) and isinstance(explicit.get("verified"), bool):
        # A flow that checked the machine itself (e.g. GPU memory back to baseline) says so.
        status: CheckStatus = "ok" if explicit["verified"] else "fail"
        return Check(name, status, str(explicit.get("detail") or ""))
    if view.state.state in ("running", "starting"):
        return Check(name, "pending", f"the run is {view.state.state}")
    problems: list[str] = []
    notes: list[str] = []
    typed = view.typed
    process = typed.process if isinstance(typed, LaunchedRecord) else None
    if is_alive(process):
        problems.append("the command's process is still alive")
    if view.state.wrapper_alive:
        problems.append("the run wrapper is still alive")
    leftovers = typed.leftovers_killed if isinstance(typed, LaunchedRecord) else None
    described = typed.leftovers if isinstance(typed, LaunchedRecord) else []
    if described:
        from proctor.supervise.leftovers import notice

        notes.append(notice(described) or "")
    elif leftovers:
        notes.append(f"{leftovers} leftover process(es) were stopped")
    else:
        notes.append("no leftover processes")
    for trace in view.gpu.traces:
        first, last = trace.first_mib, trace.last_mib
        if first is None or last is None:
            continue
        if last - first > GPU_RELEASE_TOLERANCE_MIB:
            problems.append(f"GPU {trace.index} holds {last - first:.0f} MiB more than at start")
        else:
            notes.append(f"GPU {trace.index} memory back to {last:.0f} MiB")
    if not view.gpu.traces:
        notes.append("no GPU samples")
    if problems:
        return Check(name, "fail", "; ".join(problems + notes))
    return Check(name, "ok", "; ".join(notes))

"""Reading a record from disk: the typed model of its kind for any record this proctor knows,
a one-line RecordError (exit 64) for one it cannot read, and a view that never fails for the
listings and reports, which keep every fact that reads."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from proctor import load_record
from proctor.errors import ExitCode, RecordError, exit_code_for
from proctor.record.schema import (
    MODELS,
    CommandRecord,
    FlowRecord,
    RecordCore,
    SlurmNodeRecord,
    read_view,
)
from proctor.record.version import SCHEMA_VERSION
from tests.helpers import proctor
from tests.record.test_records import V1_COMMAND, V1_FLOW, V1_REMOTE, V1_SWEEP
from tests.store.test_ingest import RECORDS


def _write(tmp_path: Path, content: Any, name: str = "20260101-000000-aaaaaa") -> Path:
    run = tmp_path / name
    run.mkdir(parents=True, exist_ok=True)
    text = content if isinstance(content, (str, bytes)) else json.dumps(content)
    if isinstance(text, bytes):
        (run / "record.json").write_bytes(text)
    else:
        (run / "record.json").write_text(text)
    return run


@pytest.mark.parametrize("kind", sorted(MODELS))
def test_every_kind_loads_as_its_model(tmp_path: Path, kind: str) -> None:
    run = _write(tmp_path, {"run_id": "20260101-000000-aaaaaa", **RECORDS[kind]})
    record = load_record(run, strict=True)
    assert type(record) is MODELS[kind] and record.schema_version == SCHEMA_VERSION
    assert type(load_record(run)) is MODELS[kind]


@pytest.mark.parametrize("data", [V1_COMMAND, V1_FLOW, V1_SWEEP, V1_REMOTE])
def test_version_1_records_load_upgraded(tmp_path: Path, data: dict[str, Any]) -> None:
    record = load_record(_write(tmp_path, data), strict=True)
    assert record.kind == data["kind"] and record.schema_version == SCHEMA_VERSION


NEWER = {**V1_COMMAND, "schema_version": SCHEMA_VERSION + 1}
UNREADABLE: dict[str, tuple[Any, str]] = {
    "not json": ('{"run_id": "x", ', "not a readable JSON record"),
    "not utf-8": (b"\xff\xfe{garbage", "not a readable JSON record"),
    "not an object": ([1, 2], "not a JSON object"),
    "newer proctor": (NEWER, f"unknown record schema version {SCHEMA_VERSION + 1}"),
    "version not a number": ({**V1_COMMAND, "schema_version": "two"}, "is not a whole number"),
    "version as text": ({**V1_COMMAND, "schema_version": "2"}, 'schema_version "2" is not a whole'),
    "a NaN duration": (
        {**V1_COMMAND, "duration_s": math.nan},
        "duration_s: Input should be a finite number",
    ),
    "rejected by its model": (
        {**V1_COMMAND, "exit": {"code": "zero"}},
        "rejected as a CommandRecord: exit.code",
    ),
}


@pytest.mark.parametrize("case", sorted(UNREADABLE))
def test_an_unreadable_record_is_a_one_line_error_with_exit_64(tmp_path: Path, case: str) -> None:
    content, says = UNREADABLE[case]
    run = _write(tmp_path, content)
    with pytest.raises(RecordError) as info:
        load_record(run, strict=True)
    error = info.value
    assert says in error.message and str(run / "record.json") in error.message
    assert "\n" not in error.one_line()
    assert exit_code_for(error) == ExitCode.USAGE == 64
    assert load_record(run) is None  # the lenient form, for displays that must not fail


def test_a_record_of_a_newer_proctor_is_refused_with_the_fix(tmp_path: Path) -> None:
    with pytest.raises(RecordError) as info:
        load_record(_write(tmp_path, NEWER), strict=True)
    assert info.value.hint is not None and "upgrade proctor" in info.value.hint


def test_no_record_is_none_or_an_error_when_strict(tmp_path: Path) -> None:
    assert load_record(tmp_path) is None
    with pytest.raises(RecordError, match="no record"):
        load_record(tmp_path, strict=True)


def test_the_view_keeps_every_fact_that_reads(tmp_path: Path) -> None:
    # Half-written (no end fields) and hand-edited (an outcome no proctor writes): the kind's
    # model without the rejected field, the rest as recorded.
    body = {
        **V1_COMMAND,
        "outcome": "exploded",
        "ended_at": None,
        "duration_s": None,
        "exit": None,
        "extra_fact": {"a": 1},
    }
    view = read_view(_write(tmp_path, body))
    assert type(view) is CommandRecord and view.name == "echo-hi"
    assert view.recorded_outcome == "unknown" and view.fact("extra_fact") == {"a": 1}
    assert view.exit is None and view.ended_at is None
    # A node record with a partial host still reads, as the core without it.
    node = read_view(
        _write(
            tmp_path,
            {"run_id": "g.n1", "kind": "slurm-node", "host": {"x": 1}, "outcome": "ok"},
            "node",
        )
    )
    assert type(node) is SlurmNodeRecord and node.host is None and node.outcome == "ok"
    # Nothing readable at all: an empty core named after the directory.
    empty = read_view(_write(tmp_path, "garbage", "20260101-000000-bbbbbb"))
    assert type(empty) is RecordCore and empty.run_id == "20260101-000000-bbbbbb"
    newer = read_view(_write(tmp_path, NEWER, "20260101-000000-cccccc"))
    assert newer.run_id == "20260101-000000-cccccc" and newer.name is None


def test_flow_resume_of_a_record_a_newer_proctor_wrote_says_so(isolated_runs: Path) -> None:
    run = _write(isolated_runs, {**V1_FLOW, "schema_version": SCHEMA_VERSION + 1})
    result = proctor("flow", "--resume", run.name)
    assert result.returncode == 64, result.stderr
    assert f"unknown record schema version {SCHEMA_VERSION + 1}" in result.stderr
    assert "upgrade proctor" in result.stderr and "Traceback" not in result.stderr
    # A record of another kind is still "not a flow".
    other = _write(isolated_runs, V1_COMMAND, str(V1_COMMAND["run_id"]))
    result = proctor("flow", "--resume", other.name)
    assert result.returncode == 64 and "is not a flow" in result.stderr


def test_a_flow_record_types_its_workloads(tmp_path: Path) -> None:
    flow = load_record(_write(tmp_path, {"run_id": "f", **RECORDS["flow"]}), strict=True)
    assert isinstance(flow, FlowRecord)
    (row,) = flow.workload_runs
    assert (row.index, row.kind, row.run_id, row.exit_code) == (0, "bench", "r", 0)


def test_a_section_is_a_table_the_record_states_as_a_copy(tmp_path: Path) -> None:
    # What a writer merges facts into: the model's table or one carried beyond the model; None
    # where the record states none (a model default is not a fact) or states no table.
    body = {
        **V1_COMMAND,
        "kind": "server",
        "schema_version": 2,
        "slurm": {"job_id": 7},
        "extra_fact": "text",
    }
    view = read_view(_write(tmp_path, body))
    slurm = view.section("slurm")
    assert slurm == {"job_id": 7}
    slurm["state"] = "RUNNING"
    assert view.section("slurm") == {"job_id": 7}  # a copy: the record is not changed
    assert view.section("server") is None and view.fact("server") == {}
    assert view.section("extra_fact") is None and view.section("missing") is None

"""The store row of a record without pydantic (row_from_plain) is the typed view's row
(row_from_record of view_record) wherever it gives one: over real records of real runs, and
over those records damaged field by field (hypothesis). The run wrapper indexes its run this
way, so a `proctor run` never loads pydantic after its command (bench/startup.py)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proctor.record.schema import view_record
from proctor.store.db import row_from_plain, row_from_record
from tests.helpers import proctor

ODD: list[Any] = [
    None,
    "",
    "x",
    "3",
    0,
    7,
    -1,
    True,
    False,
    1.5,
    3.0,
    math.nan,
    math.inf,
    [],
    ["a", "b"],
    [1],
    [{"name": "H200"}],
    {},
    {"code": 0},
    {"code": "0"},
    {"code": 1.0},
    {"code": True},
    {"code": 2, "signal": 9},
    {"code": 2, "decided_by": "someone"},
    {"code": 4, "decided_by": "proctor", "reason": "timeout", "command": {"code": 143}},
    {"code": 4, "command": {"code": "x"}},
    {"commit": "abc", "dirty": 1},
    {"commit": 5},
    {"kind": "ssh", "host": "h"},
    {"kind": None},
    {"gpus": [{"name": "A"}, {"name": "B"}]},
    {"gpus": []},
    {"hostname": "h"},
]
FIELDS = [
    "schema_version",
    "run_id",
    "kind",
    "name",
    "group",
    "key",
    "argv",
    "argv_display",
    "created_at",
    "started_at",
    "ended_at",
    "duration_s",
    "outcome",
    "exit",
    "source",
    "target",
    "host",
    "gpu",
    "cwd",
    "log",
    "events",
    "proctor_version",
]


@pytest.fixture(scope="module")
def records(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """Records of real runs: ok, failed, a time limit, a named one with a key."""
    root = tmp_path_factory.mktemp("plain-row")
    env = {"PROCTOR_RUNS_DIR": str(root / "runs"), "PROCTOR_STATE_DIR": str(root / "state")}
    for args in (
        ["run", "--", "true"],
        ["run", "--name", "n1", "--key", "k1", "--", "sh", "-c", "exit 3"],
        ["run", "--timeout", "1s", "--", "sleep", "30"],
    ):
        proctor(*args, env=env, cwd=root, timeout=120)
    found = [json.loads(p.read_text()) for p in sorted((root / "runs").glob("*/record.json"))]
    assert len(found) == 3
    return found


def _typed(data: dict[str, Any]) -> dict[str, Any]:
    return row_from_record(view_record(data, "20261206-000000-aaaaaa"), Path("/r"))


def test_real_records_take_the_plain_path(records: list[dict[str, Any]]) -> None:
    for data in records:
        plain = row_from_plain(data, Path("/r"))
        assert plain is not None, data
        assert plain == _typed(data)
    assert {r["outcome"] for r in records} == {"ok", "failed", "timeout"}


def test_every_single_damage_gets_the_typed_row_or_none(records: list[dict[str, Any]]) -> None:
    for record in records:
        for name in FIELDS:
            for value in ODD:
                damaged = {**record, name: value}
                plain = row_from_plain(damaged, Path("/r"))
                assert plain is None or plain == _typed(damaged), (name, value)
            dropped = {k: v for k, v in record.items() if k != name}
            plain = row_from_plain(dropped, Path("/r"))
            assert plain is None or plain == _typed(dropped), name


@settings(
    max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.data(),
    st.lists(st.tuples(st.sampled_from(FIELDS), st.sampled_from(range(len(ODD)))), max_size=4),
    st.lists(st.sampled_from(FIELDS), max_size=3),
)
def test_a_damaged_record_gets_the_typed_row_or_none(
    records: list[dict[str, Any]],
    data: st.DataObject,
    changes: list[tuple[str, int]],
    dropped: list[str],
) -> None:
    record = dict(data.draw(st.sampled_from(records)))
    for name, index in changes:
        record[name] = ODD[index]
    for name in dropped:
        record.pop(name, None)
    plain = row_from_plain(record, Path("/r"))
    if plain is not None:
        assert plain == _typed(record), record


def test_plain_row_declines_what_only_pydantic_can_judge(records: list[dict[str, Any]]) -> None:
    """Not plainly of its type (coercible, or rejected): the typed view decides."""
    base = records[0]
    for change in (
        {"schema_version": 1},
        {"duration_s": True},
        {"exit": {"code": "0"}},
        {"host": {**base["host"], "cpu_count": "2"}},
        {"outcome": "finished"},
        {"target": None},
    ):
        assert row_from_plain({**base, **change}, Path("/r")) is None, change

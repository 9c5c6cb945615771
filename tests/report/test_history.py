"""The history page's parts without a browser: the store's query (real SQLite), each run's
verdict, and one trace per verdict with its own marker (tests/report/test_layout.py opens
the page of real runs in Chromium)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from proctor.errors import UsageError
from proctor.report.history import history_figure, history_report, load_history
from proctor.store.db import Store


def _run(store: Store, run_id: str, **row: Any) -> None:
    base = {
        "id": run_id,
        "name": "bench-a",
        "kind": "bench",
        "run_key": None,
        "run_group": None,
        "dir": f"/runs/{run_id}",
        "created_at": f"2026-12-0{run_id[7]}T10:00:00+01:00",
        "started_at": None,
        "ended_at": None,
        "duration_s": 1.0,
        "outcome": "ok",
        "exit_code": 0,
        "exit_signal": None,
        "source_commit": "c" * 40,
        "source_dirty": 0,
        "target": "local",
        "host": "h",
        "gpu": None,
        "argv": "[]",
        "problem": None,
    }
    store.upsert_run({**base, **row})


@pytest.fixture
def store() -> Store:
    s = Store.in_memory()
    with s.transaction():
        _run(s, "20261201-100000-aaaaaa", source_commit="a" * 40)
        s.set_metrics("20261201-100000-aaaaaa", [("tput", 100.0, "tok/s"), ("valid", 1.0, "bool")])
        _run(s, "20261203-100000-cccccc", source_commit="b" * 40, source_dirty=1)
        s.set_metrics("20261203-100000-cccccc", [("tput", 80.0, "tok/s"), ("valid", 0.0, "bool")])
        _run(s, "20261202-100000-bbbbbb", outcome="failed", exit_code=3)
        s.set_metrics("20261202-100000-bbbbbb", [("tput", 5.0, "tok/s")])
        _run(s, "20261204-100000-dddddd", kind="eval", name="gsm8k")
        s.set_metrics("20261204-100000-dddddd", [("tput", 1.0, None), ("score", 0.8, None)])
        _run(s, "20261205-100000-eeeeee", name="other")
        s.set_metrics("20261205-100000-eeeeee", [("score", 0.5, None)])
    return s


def test_the_query_orders_and_filters(store: Store) -> None:
    ids = [p.run_id[-6:] for p in load_history(store, "tput")]
    assert ids == ["aaaaaa", "bbbbbb", "cccccc", "dddddd"]  # oldest first, only runs with it
    assert [p.run_id[-6:] for p in load_history(store, "tput", kind="bench")] == [
        "aaaaaa",
        "bbbbbb",
        "cccccc",
    ]
    assert [p.run_id[-6:] for p in load_history(store, "tput", name="gsm")] == ["dddddd"]
    since = load_history(store, "tput", since="2026-12-03T00:00:00+01:00")
    assert [p.run_id[-6:] for p in since] == ["cccccc", "dddddd"]
    verdicts = {p.run_id[-6:]: p.verdict for p in load_history(store, "tput")}
    assert verdicts == {"aaaaaa": "VALID", "bbbbbb": "failed", "cccccc": "INVALID", "dddddd": "ok"}


def test_no_run_with_the_metric_names_the_metrics_there_are(store: Store) -> None:
    with pytest.raises(UsageError) as caught:
        load_history(store, "nope", kind="bench")
    assert caught.value.exit_code == 64
    assert "no run has metric 'nope' (kind bench)" in caught.value.one_line()
    assert "metrics in the store: score, tput, valid" in caught.value.one_line()
    with pytest.raises(UsageError) as caught:
        load_history(store, "tputt")
    assert "did you mean tput?" in caught.value.one_line()


def test_each_verdict_is_its_own_trace_and_marker(store: Store) -> None:
    points = load_history(store, "tput")
    fig = history_figure(points, "tput")
    line, *marks = fig.data
    assert line["mode"] == "lines" and line["y"] == [100.0, 5.0, 80.0, 1.0]
    by_name = {t["name"]: t for t in marks}
    assert set(by_name) == {"VALID", "INVALID", "ok", "failed"}
    symbols = {name: t["marker"]["symbol"] for name, t in by_name.items()}
    assert symbols["INVALID"] == "x-open" and symbols["VALID"] == "circle"
    assert len(set(symbols.values()) | {by_name["ok"]["marker"]["color"]}) >= 3
    invalid = by_name["INVALID"]
    assert invalid["y"] == [80.0] and invalid["customdata"][0][:4] == [
        "20261203-100000-cccccc",
        "bench-a",
        "bbbbbbbbbb*",
        "INVALID",
    ]
    # Times on one axis, in the newest run's zone (the records' own offset).
    assert invalid["x"] == ["2026-12-03 10:00:00.000"] and fig.layout["xaxis"]["type"] == "date"
    assert "UTC+01:00" in fig.layout["xaxis"]["title"]["text"]


def test_by_commit_the_commits_keep_their_first_run_order(store: Store) -> None:
    fig = history_figure(load_history(store, "tput"), "tput", x="commit")
    assert fig.layout["xaxis"]["categoryarray"] == ["aaaaaaaaaa", "cccccccccc", "bbbbbbbbbb*"]
    assert fig.data[0]["x"] == ["aaaaaaaaaa", "cccccccccc", "bbbbbbbbbb*", "cccccccccc"]


def test_the_page_lists_every_run_newest_first(store: Store, tmp_path: Path) -> None:
    report = history_report(load_history(store, "tput"), "tput", filters="kind bench")
    assert report.kind == "history" and report.default_name == "history-tput"
    assert report.run_ids == [
        f"2026120{i}-100000-{c * 6}" for i, c in zip("1234", "abcd", strict=True)
    ]
    html = report.html
    order = [html.index(f"2026120{i}-100000-") for i in "4321"]
    assert order == sorted(order)
    assert '<span class="badge fail">INVALID</span>' in html

"""Issue 20, "At scale": `runs list` and `last` read the newest rows through the index
`runs_newest` (no sort of the table, no walk of the run directories while the store is
current), and stay right when run directories appear any other way. Timings are in
bench/store_scale.py, never asserted here."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from proctor.store.db import NEWEST_FIRST, Store
from proctor.store.sync import PENDING_DIR, catch_up, newest_run_dir, register_pending
from tests.helpers import proctor


def _plan(store: Store, sql: str, args: tuple[object, ...] = ()) -> str:
    return " | ".join(row[3] for row in store.conn.execute(f"EXPLAIN QUERY PLAN {sql}", args))


def test_the_listing_query_reads_the_index_without_sorting(tmp_path: Path) -> None:
    with Store(tmp_path / "s.sqlite") as store:
        for sql, args in (
            (f"SELECT * FROM runs {NEWEST_FIRST}", ()),
            (f"SELECT * FROM runs WHERE name LIKE ? {NEWEST_FIRST}", ("%x%",)),
        ):
            plan = _plan(store, sql, args)
            assert "USING INDEX runs_newest" in plan and "TEMP B-TREE" not in plan, plan


def test_a_current_store_is_not_scanned_and_a_change_is_never_missed(
    isolated_runs: Path,
) -> None:
    for name in ("a", "b", "c"):
        proctor("run", "--name", name, "--", "true", check=True)
    store_path = isolated_runs / "proctor.sqlite"
    # Runs started within one second sort by their random part: find 'a' by its name.
    named = {
        json.loads((p / "record.json").read_text())["name"]: p
        for p in isolated_runs.iterdir()
        if (p / "record.json").is_file()
    }
    runs = [named["a"], named["b"], named["c"]]
    with Store(store_path) as store:
        catch_up(store, isolated_runs)  # records the scan
        assert [row["name"] for row in store.runs(limit=2)] == ["c", "b"]
        # A row dropped behind the store's back is not looked for while nothing changed...
        store.conn.execute("DELETE FROM runs WHERE name = 'a'")
        assert catch_up(store, isolated_runs) == 0
        # ...and a directory copied in is found: the names in the runs directory changed.
        shutil.copytree(runs[0], isolated_runs / "20990101-000000-abcdef")
        record = isolated_runs / "20990101-000000-abcdef" / "record.json"
        record.write_text(record.read_text().replace(runs[0].name, "20990101-000000-abcdef"))
        assert catch_up(store, isolated_runs) == 2  # the copy, and 'a' again
        assert store.runs(limit=1)[0]["id"] == "20990101-000000-abcdef"
    listed = json.loads(proctor("runs", "list", "--json", check=True).stdout)
    assert [row["name"] for row in listed] == ["a", "c", "b", "a"]
    shown = json.loads(proctor("runs", "show", "last", "--json", check=True).stdout)
    assert shown["run_id"] == "20990101-000000-abcdef"
    assert newest_run_dir(store_path, isolated_runs) == isolated_runs / "20990101-000000-abcdef"


def test_a_pending_run_is_found_from_the_register_without_a_scan(isolated_runs: Path) -> None:
    proctor("run", "--name", "one", "--", "true", check=True)
    proctor("run", "--name", "two", "--", "true", check=True)
    store_path = isolated_runs / "proctor.sqlite"
    two = max(p for p in isolated_runs.iterdir() if p.is_dir() and p.name[0].isdigit())
    with Store(store_path) as store:
        catch_up(store, isolated_runs)
        store.conn.execute(
            "UPDATE runs SET outcome = 'running', exit_code = NULL WHERE dir = ?", (str(two),)
        )
    register_pending(two)  # as a wrapper that found the store locked
    listed = json.loads(proctor("runs", "list", "--json", check=True).stdout)
    assert [(r["name"], r["outcome"], r["exit_code"]) for r in listed] == [
        ("two", "ok", 0),
        ("one", "ok", 0),
    ]
    assert not (two / ".index-pending").exists()
    assert not list((isolated_runs / PENDING_DIR).iterdir())


def test_last_without_a_store_still_walks_the_run_directories(isolated_runs: Path) -> None:
    proctor("run", "--name", "only", "--", "true", check=True)
    for path in isolated_runs.glob("proctor.sqlite*"):
        path.unlink()
    assert newest_run_dir(isolated_runs / "proctor.sqlite", isolated_runs) is None
    shown = json.loads(proctor("runs", "show", "last", "--json", check=True).stdout)
    assert shown["name"] == "only"
    assert not list(isolated_runs.glob("proctor.sqlite*"))  # never created

"""Point 6 of issue 11: nothing on the path of a time limit, a kill or the exit status waits
for the SQLite store; the run is indexed afterwards and never lost."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

from tests.helpers import proctor

# Another process holding the store exclusively: no other connection can read or write it.
LOCKER = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("PRAGMA locking_mode=EXCLUSIVE")
conn.execute("BEGIN EXCLUSIVE")
conn.execute("CREATE TABLE IF NOT EXISTS held (x)")
print("locked", flush=True)
sys.stdin.read()
conn.execute("ROLLBACK")
"""


def _epoch(iso: str) -> float:
    return datetime.fromisoformat(iso).timestamp()


def test_a_locked_store_delays_neither_the_time_limit_nor_the_exit_status(
    isolated_runs: Path,
) -> None:
    proctor("runs", "reindex", check=True)  # creates the store
    store = isolated_runs / "proctor.sqlite"
    locker = subprocess.Popen(
        [sys.executable, "-c", LOCKER, str(store)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert locker.stdout is not None and locker.stdout.readline().strip() == "locked"
        limited = proctor("run", "--name", "limited", "--timeout", "3s", "--", "sleep", "60")
        returned = {"limited": time.time()}
        assert limited.returncode == 4, limited.stderr
        quick = proctor("run", "--name", "quick", "--", "true")
        returned["quick"] = time.time()
        assert quick.returncode == 0, quick.stderr
        for run in isolated_runs.iterdir():
            if not run.is_dir() or run.name.startswith("."):  # .index-pending.d: the register
                continue
            record = json.loads((run / "record.json").read_text())
            # From the command's start to the CLI's return: not the Pythons' start-up, which
            # takes seconds on a loaded machine. The store's waits (2 s at most, twice) fit.
            took = returned[record["name"]] - _epoch(record["started_at"])
            bound = 3 + 9 if record["name"] == "limited" else 9
            assert took < bound, f"{record['name']}: the CLI returned {took:.1f}s in"
            written = (run / "exit_code").stat().st_mtime - _epoch(record["started_at"])
            limit = 3 + 2.5 if record["name"] == "limited" else 2.5
            assert written < limit, f"{record['name']}: exit_code written {written:.1f}s in"
            assert record["outcome"] == ("timeout" if record["name"] == "limited" else "ok")
            assert (run / "manifest.sha256").exists()
    finally:
        if locker.stdin is not None:
            locker.stdin.close()
        locker.wait(timeout=30)
    # Lock released: nothing was lost, the store catches up on the next look.
    listed = proctor("runs", "list", "--json", check=True)
    outcomes = {row["name"]: row["outcome"] for row in json.loads(listed.stdout)}
    assert outcomes == {"limited": "timeout", "quick": "ok"}
    with sqlite3.connect(store) as conn:
        rows = dict(conn.execute("SELECT name, outcome FROM runs").fetchall())
    assert rows == {"limited": "timeout", "quick": "ok"}
    assert not list(isolated_runs.glob("*/.index-pending"))


# Another process in the middle of a write (as a proctor indexing its run): readers may read.
WRITER = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
print("writing", flush=True)
sys.stdin.read()
conn.execute("ROLLBACK")
"""


def test_runs_list_during_another_write_lists_the_runs_not_yet_indexed(
    isolated_runs: Path,
) -> None:
    proctor("run", "--name", "before", "--", "true", check=True)
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(isolated_runs / "proctor.sqlite")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert writer.stdout is not None and writer.stdout.readline().strip() == "writing"
        proctor("run", "--name", "during", "--", "true", check=True)
        assert (next(isolated_runs.glob("*/.index-pending"))).exists()
        listed = proctor("runs", "list", "--json")
        assert listed.returncode == 0, listed.stderr
        # The store alone would list only "before", and say nothing.
        assert sorted(row["name"] for row in json.loads(listed.stdout)) == ["before", "during"]
        assert "could not be updated" in listed.stderr and "run directories" in listed.stderr
    finally:
        if writer.stdin is not None:
            writer.stdin.close()
        writer.wait(timeout=30)
    listed = proctor("runs", "list", "--json", check=True)
    assert sorted(row["name"] for row in json.loads(listed.stdout)) == ["before", "during"]
    assert "warning" not in listed.stderr
    assert not list(isolated_runs.glob("*/.index-pending"))


def test_runs_of_one_second_are_listed_newest_first(isolated_runs: Path) -> None:
    # Run ids name their second, then a random part: two runs of one second must not be
    # ordered by that random part (`runs list` and `last` said the older was the newest).
    first = json.loads(proctor("run", "--name", "first", "--json", "--", "true").stdout)["run_id"]
    second = json.loads(proctor("run", "--name", "second", "--json", "--", "true").stdout)["run_id"]
    # The same second, the random parts in the wrong order: the older one sorts last by id.
    for old, new in ((first, "20260101-000000-ffffff"), (second, "20260101-000000-000000")):
        (isolated_runs / old).rename(isolated_runs / new)
        path = isolated_runs / new / "record.json"
        path.write_text(path.read_text().replace(old, new))
    proctor("runs", "reindex", check=True)
    listed = json.loads(proctor("runs", "list", "--json", check=True).stdout)
    assert [row["name"] for row in listed] == ["second", "first"]
    shown = proctor("runs", "show", "last", "--json", check=True)
    assert json.loads(shown.stdout)["name"] == "second"

"""Issue 20: a store written by a newer proctor (a schema migration this one does not know) is
refused by version in one line, never written into, and listed around."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from pathlib import Path

import pytest

from proctor.store.db import KNOWN_MIGRATIONS, Store, StoreFromNewerProctor
from tests.helpers import proctor

NEXT = max(KNOWN_MIGRATIONS) + 1


def _newer_schema(store: Path) -> None:
    """What a newer proctor might leave: its next migration applied, a column reshaped."""
    with sqlite3.connect(store) as conn:
        conn.execute("ALTER TABLE runs RENAME COLUMN argv TO argv_json")
        conn.execute("INSERT INTO schema_migrations VALUES (?, datetime('now'))", (NEXT,))


def _unknown_row(store: Path) -> None:
    """A migration id no proctor of this line ever had, the schema otherwise intact."""
    with sqlite3.connect(store) as conn:
        conn.execute("INSERT INTO schema_migrations VALUES (4242, datetime('now'))")


def _digest(store: Path) -> str:
    """The store's content (schema and rows), whatever SQLite's checkpoints did to its file."""
    with sqlite3.connect(store) as conn:
        return hashlib.sha256("\n".join(conn.iterdump()).encode()).hexdigest()


@pytest.mark.parametrize("change", [_newer_schema, _unknown_row], ids=["newer", "unknown-row"])
def test_a_store_of_a_newer_schema_is_refused_by_version_and_listed_around(
    isolated_runs: Path, change: object
) -> None:
    proctor("run", "--name", "job", "--", "true", check=True)
    store = isolated_runs / "proctor.sqlite"
    assert callable(change)
    change(store)
    before = _digest(store)

    result = proctor("runs", "reindex")
    assert result.returncode == 64, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert "which this proctor does not know" in lines[0] and "a newer proctor" in lines[0]
    assert "upgrade proctor" in lines[0] and "[store] path" in lines[0]
    assert "Traceback" not in result.stderr and "another proctor holds it" not in result.stderr

    listed = proctor("runs", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert [row["name"] for row in json.loads(listed.stdout)] == ["job"]
    assert "which this proctor does not know" in listed.stderr
    assert "listing from the run directories" in listed.stderr
    assert "another proctor holds it" not in listed.stderr
    assert _digest(store) == before  # never migrated, moved or written


def test_the_library_refuses_it_read_only_and_writable(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite"
    Store(path).close()
    _unknown_row(path)
    for read_only in (False, True):
        with pytest.raises(StoreFromNewerProctor) as caught:
            Store(path, read_only=read_only)
        assert caught.value.unknown == [4242] and not caught.value.corrupt

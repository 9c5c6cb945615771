"""Keeping the store current with its runs directory, without walking every run directory.

A run is indexed by the process that ends it (store/db.py `index_quietly`). What that misses:
- runs it could not index in time (the store was locked): each is marked pending, in its own
  directory (`.index-pending`) and in the runs directory's register (`.index-pending.d/.<run>`,
  made on the first failure), so finding them is one read of a small directory;
- run directories that appeared any other way (copied in, written by an older proctor, a
  controller killed before its wrapper started): found by a scan, which indexes the entries
  of the runs directory the store has no row for.

The scan is skipped when the names in the runs directory are the ones the last scan saw: one
listing of the directory (names only, no stat of each run directory) and its digest, against
the digest stored in `store_meta`. Not the directory's mtime: the store's -wal and -shm files,
beside the runs, change it at every connection.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sqlite3
from collections.abc import Sequence
from pathlib import Path

from proctor.store.db import INDEX_PENDING, INDEX_WAIT_S, Store, StoreUnreadable

#: The register of pending runs in a runs directory: one empty dot-file per run, named
#: `.<run dir name>` (a dot-file: never an artifact in a manifest, when the runs directory
#: is a run's `steps/`).
PENDING_DIR = ".index-pending.d"
_SCANNED = "scanned:"


def mark_pending(run_dir: Path) -> None:
    """Mark a run whose row may be missing or stale, before its indexer tries (a kill in the
    middle leaves the mark); `register_pending` once the try failed."""
    with contextlib.suppress(OSError):
        (run_dir / INDEX_PENDING).touch()


def register_pending(run_dir: Path) -> None:
    """Put a run its indexer could not index in the runs directory's register, where the
    next indexing finds it without a walk. Only on a failure: the register directory exists
    only where a run is or was pending."""
    mark_pending(run_dir)
    with contextlib.suppress(OSError):
        register = run_dir.parent / PENDING_DIR
        register.mkdir(exist_ok=True)
        (register / f".{run_dir.name}").touch()


def clear_pending(run_dir: Path) -> None:
    for path in (run_dir / INDEX_PENDING, run_dir.parent / PENDING_DIR / f".{run_dir.name}"):
        with contextlib.suppress(OSError):
            path.unlink()


def pending_names(runs_dir: Path) -> list[str]:
    try:
        names = os.listdir(runs_dir / PENDING_DIR)
    except OSError:
        return []
    return sorted(name[1:] for name in names if name.startswith(".") and len(name) > 1)


def index_pending(store: Store, runs_dir: Path) -> int:
    """Index the runs marked pending in `runs_dir`'s register. Returns how many."""
    count = 0
    for name in pending_names(runs_dir):
        child = runs_dir / name
        if child.is_dir() and store.index_run_dir(child):
            count += 1
        clear_pending(child)
    return count


def catch_up(store: Store, runs_dir: Path) -> int:
    """Index what the store is missing of `runs_dir`: the pending runs, and, when the names
    in the runs directory changed since the last scan, the run directories it has no row
    for. Returns how many were indexed."""
    try:
        listed = os.listdir(runs_dir)
    except OSError:
        return 0
    count = index_pending(store, runs_dir)
    # The store's own files (its -wal and -shm come and go with every connection) and
    # dot-entries (.keys, the register) are not runs.
    own = ("proctor.sqlite", store.path.name)  # spec/config.py STORE_NAME (it needs pydantic)
    names = [n for n in listed if not n.startswith((".", *own))]
    digest = hashlib.sha1("\0".join(names).encode("utf-8", "surrogateescape")).hexdigest()
    seen = f"{len(names)}:{digest}"
    key = _SCANNED + str(runs_dir.resolve())
    recorded = store.meta(key)
    if recorded == seen:
        return count
    # The first scan a store gets may meet the per-run markers of an older proctor.
    legacy = recorded is None
    known = store.known_names()
    for name in sorted(names):
        child = runs_dir / name
        marked = legacy and (child / INDEX_PENDING).exists()
        if (name in known and not marked) or not child.is_dir():
            continue
        if store.index_run_dir(child):
            count += 1
        if marked:
            clear_pending(child)
    store.set_meta(key, seen)
    return count


def newest_run_dir(
    store_path: Path,
    runs_dir: Path,
    kinds: Sequence[str] | None = None,
    *,
    name: str | None = None,
) -> Path | None:
    """The newest run of `runs_dir` (what 'last' names), of one of `kinds` where given, named
    `name` where given, from the store brought up to date: the first row of the index
    `runs_newest` that matches, whose directory is in `runs_dir` and exists. None where the
    store has none or cannot say (none, unreadable, locked): the caller walks the run
    directories instead. Never creates a store."""
    from proctor.record.runid import is_run_id

    if not store_path.is_file():
        return None
    try:
        with Store(store_path, timeout=INDEX_WAIT_S) as store:
            catch_up(store, runs_dir)
            root = runs_dir.resolve()
            for row in store.iter_runs(kinds=kinds, name_is=name):
                path = Path(row["dir"])
                if is_run_id(path.name) and path.parent.resolve() == root and path.is_dir():
                    return root / path.name
    except (StoreUnreadable, sqlite3.Error):
        return None
    return None

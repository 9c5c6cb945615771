"""The SQLite index of runs and their metrics.

The run directories are the source of truth; this is an index over them, rebuilt by
`reindex`. The schema grows through numbered migrations applied on open (ids are explicit
numbers, so renaming one never re-runs it). Rows come from the typed records
(record/schema.py), imported only when a run is indexed: the wrapper, which writes rows too,
must not pay for pydantic when it starts.

The index repairs itself: a store SQLite cannot read is `StoreUnreadable`; readers then list
from the run directories (`open_for_reading`), and `rebuild` moves the bad file aside (kept,
with a timestamp) and indexes the run directories into a new one. Readers never create a store.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import math
import os
import re
import sqlite3
import time
from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from proctor import redact
from proctor.version import KNOWN_RECORD_VERSIONS as KNOWN_VERSIONS
from proctor.version import RECORD_SCHEMA_VERSION as CURRENT_RECORD_VERSION

if TYPE_CHECKING:
    from proctor.record.schema import RecordCore

MIGRATIONS: list[tuple[int, str]] = [
    (
        1,
        """
        CREATE TABLE runs (
            id TEXT PRIMARY KEY,
            name TEXT NOT NULL,
            kind TEXT NOT NULL DEFAULT 'command',
            run_key TEXT,
            run_group TEXT,
            dir TEXT NOT NULL,
            created_at TEXT,
            started_at TEXT,
            ended_at TEXT,
            duration_s REAL,
            outcome TEXT NOT NULL,
            exit_code INTEGER,
            exit_signal TEXT,
            source_commit TEXT,
            source_dirty INTEGER,
            target TEXT,
            host TEXT,
            gpu TEXT,
            argv TEXT
        );
        CREATE INDEX runs_created ON runs (created_at);
        CREATE INDEX runs_key ON runs (run_key);
        CREATE TABLE metrics (
            run_id TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
            name TEXT NOT NULL,
            value REAL NOT NULL,
            unit TEXT,
            PRIMARY KEY (run_id, name)
        );
        """,
    ),
    (
        2,
        # `problem`: why a run's record could not be read (it is listed as unknown, by name).
        # `runs_newest`: the listing's order as an index, so `runs list` and `last` read the
        # newest rows without sorting the table. `store_meta`: what the last scan of a runs
        # directory saw (store/sync.py), so a current store is not checked by a walk.
        """
        ALTER TABLE runs ADD COLUMN problem TEXT;
        CREATE INDEX runs_newest ON runs (substr(id, 1, 15) DESC, created_at DESC, id DESC);
        CREATE TABLE store_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
        """,
    ),
]
KNOWN_MIGRATIONS = frozenset(number for number, _ in MIGRATIONS)

RUN_COLUMNS = (
    "id",
    "name",
    "kind",
    "run_key",
    "run_group",
    "dir",
    "created_at",
    "started_at",
    "ended_at",
    "duration_s",
    "outcome",
    "exit_code",
    "exit_signal",
    "source_commit",
    "source_dirty",
    "target",
    "host",
    "gpu",
    "argv",
    "problem",
)
#: Newest first: by the id's UTC second, then, among runs of one second (whose ids sort by
#: their random part), by creation time; the ids alone carry no UTC offset to get wrong.
#: The same expressions as the index `runs_newest`, which is what lets SQLite use it.
NEWEST_FIRST = "ORDER BY substr(id, 1, 15) DESC, created_at DESC, id DESC"


def row_from_record(record: RecordCore, run_dir: Path) -> dict[str, Any]:
    """The row of one run, from its typed record (record/schema.py)."""
    gpu = record.fact("gpu") or {}  # launched and node records; extra elsewhere
    gpus = gpu.get("gpus") if isinstance(gpu, dict) else None
    gpu_text = f"{len(gpus)}x {gpus[0].get('name')}" if gpus else None
    return {
        "id": record.run_id,
        "name": record.name or "",
        "kind": record.kind,
        "run_key": record.fact("key"),
        "run_group": record.group,
        "dir": str(run_dir),
        "created_at": record.created_at,
        "started_at": record.started_at,
        "ended_at": record.ended_at,
        "duration_s": record.duration_s,
        "outcome": record.recorded_outcome,
        "exit_code": record.exit.code if record.exit else None,
        "exit_signal": record.exit.signal if record.exit else None,
        "source_commit": record.source_commit,
        "source_dirty": None if record.source_dirty is None else int(record.source_dirty),
        "target": record.target_kind,
        "host": record.target_host or record.hostname,
        "gpu": gpu_text,
        "argv": json.dumps(record.command),
        "problem": None,
    }


_OUTCOMES = frozenset({"starting", "running", "ok", "failed", "timeout", "stopped", "unknown"})
_HOST_TEXT = ("hostname", "os", "kernel", "cpu_model", "python", "timezone")
_HOST_INT = ("cpu_count", "memory_total_bytes")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _text_or_none(data: dict[str, Any], *names: str) -> bool:
    return all(data.get(n) is None or isinstance(data[n], str) for n in names)


def _plain_exit(value: Any) -> bool:
    """An `exit` table ExitStatus takes as it is (record/schema.py)."""
    if value is None:
        return True
    if not (isinstance(value, dict) and _is_int(value.get("code"))):
        return False
    command = value.get("command")
    return (
        _text_or_none(value, "signal", "reason")
        and value.get("decided_by", "command") in ("command", "proctor")
        and (
            command is None
            or (
                isinstance(command, dict)
                and _is_int(command.get("code"))
                and _text_or_none(command, "signal")
            )
        )
    )


def _plain_host(value: Any) -> bool:
    """A `host` table HostInfo takes as it is: every field it requires, of its type."""
    if value is None:
        return True
    return (
        isinstance(value, dict)
        and all(isinstance(value.get(k), str) for k in _HOST_TEXT)
        and all(_is_int(value.get(k)) for k in _HOST_INT)
    )


def row_from_plain(data: dict[str, Any], run_dir: Path) -> dict[str, Any] | None:
    """The row of a record whose every field the row reads is plainly of its model's type (a
    record proctor wrote: the wrapper's own), without pydantic; None where any of them is
    not, or the record is of another schema version: then `row_from_record` of its typed view
    decides. Where it gives a row, it is the typed view's row (tests/store/test_plain_row.py
    holds the two side by side over damaged records): the run wrapper indexes its run
    without importing pydantic, which would cost a `proctor run` about 0.1 s."""
    version = data.get("schema_version")
    if not (_is_int(version) and version == CURRENT_RECORD_VERSION):
        return None
    if not (isinstance(data.get("run_id"), str) and isinstance(data.get("kind"), str)):
        return None
    if not _text_or_none(data, "name", "group", "created_at", "started_at", "ended_at", "key"):
        return None
    argv, shown = data.get("argv", []), data.get("argv_display")
    if not (isinstance(argv, list) and all(isinstance(a, str) for a in argv)):
        return None
    if not (shown is None or (isinstance(shown, list) and all(isinstance(a, str) for a in shown))):
        return None
    duration = data.get("duration_s")
    if not (
        duration is None
        or (
            isinstance(duration, (int, float))
            and not isinstance(duration, bool)
            and math.isfinite(duration)
        )
    ):
        return None
    outcome = data.get("outcome", "unknown")
    if not (isinstance(outcome, str) and outcome in _OUTCOMES):
        return None
    source, target, gpu = data.get("source"), data.get("target", {}), data.get("gpu")
    if not (source is None or isinstance(source, dict)) or not isinstance(target, dict):
        return None
    if not (gpu is None or isinstance(gpu, dict)):
        return None
    gpus = (gpu or {}).get("gpus")
    if gpus and not (isinstance(gpus, list) and isinstance(gpus[0], dict)):
        return None
    exit_, host = data.get("exit"), data.get("host")
    if not (_plain_exit(exit_) and _plain_host(host)):
        return None
    commit = (source or {}).get("commit")
    dirty = (source or {}).get("dirty")
    target_host = target.get("host")
    return {
        "id": data["run_id"],
        "name": data.get("name") or "",
        "kind": data["kind"],
        "run_key": data.get("key"),
        "run_group": data.get("group"),
        "dir": str(run_dir),
        "created_at": data.get("created_at"),
        "started_at": data.get("started_at"),
        "ended_at": data.get("ended_at"),
        "duration_s": None if duration is None else float(duration),
        "outcome": outcome,
        "exit_code": exit_["code"] if exit_ else None,
        "exit_signal": exit_.get("signal") if exit_ else None,
        "source_commit": None if commit is None else str(commit),
        "source_dirty": None if dirty is None else int(bool(dirty)),
        "target": (None if target.get("kind") is None else str(target["kind"]))
        if "target" in data
        else None,
        "host": (None if target_host is None else str(target_host))
        or (host["hostname"] if host else None),
        "gpu": f"{len(gpus)}x {gpus[0].get('name')}" if gpus else None,
        "argv": json.dumps(list(shown or argv)),
        "problem": None,
    }


#: Record schema versions this proctor can index (record.json `schema_version`).
KNOWN_RECORD_VERSIONS = KNOWN_VERSIONS
#: A run id is a plain name: it becomes a path component and a key, never a path.
_PLAIN_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")


def instant(text: str) -> datetime:
    """An ISO date or date-time as an aware instant (no offset: this machine's local time);
    ValueError when it is none."""
    when = datetime.fromisoformat(text)
    return when if when.tzinfo is not None else when.astimezone()


def _created_after(created: Any, after: datetime) -> bool:
    try:
        return isinstance(created, str) and instant(created) >= after
    except ValueError:
        return False  # a time that does not read is not shown as recent


class StoreUnreadable(Exception):
    """SQLite cannot use the store file. `corrupt`: the file itself is bad (garbage, not a
    database); otherwise it could not be opened or written (permissions, read-only).
    `hint`: how to fix it."""

    hint = "make the store writable, or set [store] path in proctor.toml"

    def __init__(self, path: Path, reason: str, *, corrupt: bool) -> None:
        what = "is corrupt" if corrupt else "cannot be used"
        super().__init__(f"store {path} {what} ({reason})")
        self.path = path
        self.reason = reason
        self.corrupt = corrupt


class StoreFromNewerProctor(StoreUnreadable):
    """The store holds migrations this proctor does not know: a newer proctor (or something
    else) wrote its schema. It is never written, migrated or moved aside; readers list from
    the run directories."""

    hint = (
        "upgrade proctor, or point it at another store: [store] path in proctor.toml,"
        " or another --runs-dir"
    )

    def __init__(self, path: Path, unknown: list[int]) -> None:
        known = ", ".join(str(n) for n in sorted(KNOWN_MIGRATIONS))
        ids = ", ".join(str(n) for n in unknown)
        Exception.__init__(
            self,
            f"store {path} has schema migration {ids}, which this proctor does not know"
            f" (it knows {known}): a newer proctor wrote it",
        )
        self.path = path
        self.reason = f"unknown migration {ids}"
        self.corrupt = False
        self.unknown = unknown


class Store:
    """The SQLite index of run records and metrics (bounded waits on a locked database)."""

    def __init__(self, path: Path, *, read_only: bool = False, timeout: float = 30.0) -> None:
        """Open (and, unless `read_only`, create and migrate) the store at `path`.
        SQLite's complaints about the file itself become `StoreUnreadable`; `timeout` is how long
        to wait for another process's lock before failing."""
        self.path = path
        self.read_only = read_only
        try:
            if read_only:
                uri = f"file:{path.resolve()}?mode=ro"
                self.conn = sqlite3.connect(uri, uri=True, timeout=timeout, isolation_level=None)
            else:
                if str(path) != ":memory:":
                    path.parent.mkdir(parents=True, exist_ok=True)
                self.conn = sqlite3.connect(str(path), timeout=timeout, isolation_level=None)
            self.conn.row_factory = sqlite3.Row
            if not read_only:
                self.conn.execute("PRAGMA journal_mode=WAL")
            self.conn.execute("PRAGMA foreign_keys=ON")
            if read_only:
                self.conn.execute("SELECT count(*) FROM runs").fetchone()
                self.check_version(self.applied_migrations())
            else:
                self.migrate()
        except StoreUnreadable:
            self.conn.close()
            raise
        except sqlite3.DatabaseError as error:  # OperationalError included
            with contextlib.suppress(Exception):
                self.conn.close()
            name = getattr(error, "sqlite_errorname", "")
            if name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")) or "locked" in str(error):
                raise  # a busy store is not a bad one: that is for the caller's bounded wait
            corrupt = name.startswith(("SQLITE_NOTADB", "SQLITE_CORRUPT")) or any(
                text in str(error) for text in ("not a database", "malformed")
            )
            raise StoreUnreadable(path, str(error), corrupt=corrupt) from error

    @classmethod
    def in_memory(cls) -> Store:
        return cls(Path(":memory:"))

    def __enter__(self) -> Store:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        self.conn.close()

    # -- schema -----------------------------------------------------------------------------
    def migrate(self) -> None:
        self.conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations (id INTEGER PRIMARY KEY, applied_at TEXT)"
        )
        done = {row[0] for row in self.conn.execute("SELECT id FROM schema_migrations")}
        self.check_version(sorted(done), migrating=True)
        for number, sql in MIGRATIONS:
            if number in done:
                continue
            self.conn.execute("BEGIN IMMEDIATE")
            try:
                # Another process may have applied it while we waited for the lock.
                if self.conn.execute(
                    "SELECT 1 FROM schema_migrations WHERE id = ?", (number,)
                ).fetchone():
                    self.conn.execute("COMMIT")
                    continue
                for statement in sql.split(";"):
                    if statement.strip():
                        self.conn.execute(statement)
                self.conn.execute(
                    "INSERT INTO schema_migrations VALUES (?, datetime('now'))", (number,)
                )
                self.conn.execute("COMMIT")
            except BaseException:
                self.conn.execute("ROLLBACK")
                raise

    def applied_migrations(self) -> list[int]:
        return [r[0] for r in self.conn.execute("SELECT id FROM schema_migrations ORDER BY id")]

    def check_version(self, applied: list[int], *, migrating: bool = False) -> None:
        """Refuse a store of a schema this proctor does not know (StoreFromNewerProctor), and,
        read-only, one that still needs a migration it cannot apply (StoreUnreadable): never
        a query against a schema it was not written for."""
        unknown = [n for n in applied if n not in KNOWN_MIGRATIONS]
        if unknown:
            raise StoreFromNewerProctor(self.path, unknown)
        missing = sorted(KNOWN_MIGRATIONS - set(applied))
        if missing and not migrating:
            reason = f"older schema: migration {missing[0]} not applied, and opened read-only"
            raise StoreUnreadable(self.path, reason, corrupt=False)

    # -- writing ----------------------------------------------------------------------------
    def upsert_run(self, row: dict[str, Any]) -> None:
        cols = ", ".join(RUN_COLUMNS)
        marks = ", ".join("?" for _ in RUN_COLUMNS)
        updates = ", ".join(f"{c}=excluded.{c}" for c in RUN_COLUMNS if c != "id")
        row = redact.data(row)  # every row goes through the one redaction layer
        self.conn.execute(
            f"INSERT INTO runs ({cols}) VALUES ({marks}) ON CONFLICT(id) DO UPDATE SET {updates}",
            [row.get(c) for c in RUN_COLUMNS],
        )

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        """One write transaction (BEGIN IMMEDIATE ... COMMIT, ROLLBACK on any error); inside
        another one, part of it. A reindex is one transaction: readers never see it half done,
        and its thousands of rows cost one commit, not one each."""
        if self.conn.in_transaction:
            yield
            return
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            yield
            self.conn.execute("COMMIT")
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise

    def set_metrics(self, run_id: str, metrics: Iterable[tuple[str, float, str | None]]) -> None:
        with self.transaction():
            self.conn.execute("DELETE FROM metrics WHERE run_id = ?", (run_id,))
            self.conn.executemany(
                "INSERT INTO metrics (run_id, name, value, unit) VALUES (?, ?, ?, ?)",
                [(run_id, n, float(v), u) for n, v, u in metrics],
            )

    def index_run_dir(self, run_dir: Path) -> bool:
        """Index one run directory (record and metrics.json); False if it holds no record
        (or `index_dir` skips it)."""
        return self.index_dir(run_dir)[0]

    def index_dir(self, run_dir: Path) -> tuple[bool, str | None]:
        """Index one run directory: (whether a row was written, the problem of its record).

        A record that reads becomes its row and metrics. One that does not (not UTF-8, not
        JSON, not an object, written twice, a version or run id `record_problem` rejects) is
        a row too, under the directory's name, with outcome "unknown", the exit status of
        its `exit_code` file and the problem: the run is listed, never dropped without a
        word. No record.json at all: not a run (yet), no row."""
        data, problem = read_record_checked(run_dir)
        if data is None and problem is None:
            return False, None
        if data is not None:
            problem = record_problem(data)
        if problem is not None:
            if not _PLAIN_NAME.match(run_dir.name):
                return False, f"{problem}, and the directory name is not a plain name"
            with self.transaction():
                self.upsert_run(unreadable_row(run_dir, problem))
                self.set_metrics(run_dir.name, [])
            return True, problem
        assert data is not None
        row = row_from_plain(data, run_dir)
        if row is None:
            # Imported here: the models need pydantic, which the wrapper never pays for a
            # record it wrote itself (row_from_plain; tests/record/test_recorder.py).
            from proctor.record.schema import view_record

            row = row_from_record(view_record(data, run_dir.name), run_dir)
        with self.transaction():
            self.upsert_run(row)
            self.set_metrics(row["id"], list(metrics_of_run_dir(run_dir)))
        return True, None

    def delete_all(self) -> None:
        self.conn.execute("DELETE FROM metrics")
        self.conn.execute("DELETE FROM runs")

    # -- reading ----------------------------------------------------------------------------
    def runs(
        self,
        *,
        name: str | None = None,
        outcome: str | None = None,
        commit: str | None = None,
        since: str | None = None,
        key: str | None = None,
        group: str | None = None,
        limit: int | None = None,
    ) -> list[dict[str, Any]]:
        rows = self.iter_runs(
            name=name, outcome=outcome, commit=commit, since=since, key=key, group=group
        )
        return list(itertools.islice(rows, limit or None))

    def iter_runs(
        self,
        *,
        name: str | None = None,
        outcome: str | None = None,
        commit: str | None = None,
        since: str | None = None,
        key: str | None = None,
        group: str | None = None,
        kinds: Sequence[str] | None = None,
        name_is: str | None = None,
    ) -> Iterator[dict[str, Any]]:
        """The rows, newest first, read as they are consumed: a reader that stops after N
        rows reads N rows of the index `runs_newest`, never the whole table. `name` matches
        a part of the name, `name_is` the whole; `kinds`: only runs of these kinds."""
        # Each filter given narrows the rows: (condition, its argument).
        given = [
            (condition, value)
            for condition, value in (
                ("name LIKE ?", name and f"%{name}%"),
                ("outcome = ?", outcome),
                ("source_commit LIKE ?", commit and f"{commit}%"),
                ("run_key = ?", key),
                ("run_group = ?", group),
                ("name = ?", name_is),
            )
            if value
        ]
        where = [condition for condition, _ in given]
        args: list[Any] = [value for _, value in given]
        if kinds:
            where.append(f"kind IN ({', '.join('?' for _ in kinds)})")
            args.extend(kinds)
        sql = "SELECT * FROM runs"
        if where:
            sql += " WHERE " + " AND ".join(where)
        after = instant(since) if since else None
        for row in self.conn.execute(f"{sql} {NEWEST_FIRST}", args):
            # instants, not text: records carry the UTC offset of the host that ran them
            if after is None or _created_after(row["created_at"], after):
                yield dict(row)

    def run(self, run_id: str) -> dict[str, Any] | None:
        row = self.conn.execute("SELECT * FROM runs WHERE id = ?", (run_id,)).fetchone()
        return dict(row) if row else None

    def metrics(self, run_id: str) -> list[dict[str, Any]]:
        return [
            dict(r)
            for r in self.conn.execute(
                "SELECT name, value, unit FROM metrics WHERE run_id = ? ORDER BY name", (run_id,)
            )
        ]

    def metric_history(
        self,
        metric: str,
        *,
        name: str | None = None,
        kind: str | None = None,
        since: str | None = None,
    ) -> list[dict[str, Any]]:
        """Every run with `metric`, oldest first: its row, `value`, `unit`, and `valid` (the
        run's `valid` metric: 1.0, 0.0, or None where it has none). Filters as `iter_runs`:
        name contains, kind is, created at or after `since` (an ISO instant)."""
        given = [
            (condition, value)
            for condition, value in (("r.name LIKE ?", name and f"%{name}%"), ("r.kind = ?", kind))
            if value
        ]
        sql = (
            "SELECT r.*, m.value AS value, m.unit AS unit, v.value AS valid FROM runs r"
            " JOIN metrics m ON m.run_id = r.id AND m.name = ?"
            " LEFT JOIN metrics v ON v.run_id = r.id AND v.name = 'valid'"
        )
        if given:
            sql += " WHERE " + " AND ".join(condition for condition, _ in given)
        args = [metric, *(value for _, value in given)]
        # Oldest first: the listing's order (NEWEST_FIRST) reversed.
        sql += " ORDER BY substr(r.id, 1, 15), r.created_at, r.id"
        after = instant(since) if since else None
        return [
            dict(row)
            for row in self.conn.execute(sql, args)
            if after is None or _created_after(row["created_at"], after)
        ]

    def metric_names(self, kind: str | None = None) -> list[str]:
        """The names of the metrics the store holds (of runs of `kind`), sorted."""
        sql = "SELECT DISTINCT m.name FROM metrics m"
        args: list[str] = []
        if kind:
            sql += " JOIN runs r ON r.id = m.run_id WHERE r.kind = ?"
            args.append(kind)
        return [str(row[0]) for row in self.conn.execute(sql + " ORDER BY m.name", args)]

    def known_names(self) -> set[str]:
        """Every run id in the store, and the name of every run directory it indexed."""
        names: set[str] = set()
        for run_id, run_dir in self.conn.execute("SELECT id, dir FROM runs"):
            names.add(run_id)
            names.add(os.path.basename(run_dir))
        return names

    def meta(self, key: str) -> str | None:
        row = self.conn.execute("SELECT value FROM store_meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def set_meta(self, key: str, value: str) -> None:
        self.conn.execute(
            "INSERT INTO store_meta VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = ?",
            (key, value, value),
        )

    def all_rows(self) -> Iterator[tuple[Any, ...]]:
        for row in self.conn.execute(f"SELECT {', '.join(RUN_COLUMNS)} FROM runs ORDER BY id"):
            yield tuple(row)
        for row in self.conn.execute("SELECT * FROM metrics ORDER BY run_id, name"):
            yield tuple(row)


def read_record(run_dir: Path) -> dict[str, Any] | None:
    """record.json as written, or None where there is none (or it is not a JSON object):
    what `record_problem` checks before the typed record is made."""
    return read_record_checked(run_dir)[0]


_JSON_TYPES = {
    list: "an array",
    str: "a string",
    int: "a number",
    float: "a number",
    bool: "a boolean",
    type(None): "null",
}


def read_record_checked(run_dir: Path) -> tuple[dict[str, Any] | None, str | None]:
    """(record.json as written, None); (None, why it cannot be read); (None, None) where
    there is none."""
    try:
        raw = (run_dir / "record.json").read_bytes()
    except FileNotFoundError:
        return None, None
    except OSError as error:
        return None, f"record.json cannot be read ({error.strerror})"
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        return None, "record.json is not UTF-8"
    except json.JSONDecodeError as error:
        if error.msg == "Extra data":
            return None, "record.json holds more than one JSON document (written twice?)"
        return None, f"record.json is not JSON ({error.msg}, line {error.lineno})"
    except RecursionError:
        return None, "record.json is nested too deeply to read"
    if not isinstance(data, dict):
        return None, f"record.json is {_JSON_TYPES.get(type(data), 'a value')}, not a JSON object"
    return data, None


def unreadable_row(run_dir: Path, problem: str) -> dict[str, Any]:
    """The row of a run whose record cannot be read: its outcome is unknown (the record is
    what says how a run ended); its exit status is what `exit_code` holds, if anything."""
    from proctor.record.exitfile import read_exit_file
    from proctor.record.runid import is_run_id

    status = read_exit_file(run_dir / "exit_code")
    name = run_dir.name
    # A run id names the UTC second its run was created: the listing's order and --since.
    created = None
    if is_run_id(name):
        created = f"{name[:4]}-{name[4:6]}-{name[6:8]}T{name[9:11]}:{name[11:13]}:{name[13:15]}"
        created += "+00:00"
    return {
        "id": name,
        "name": "",
        "kind": "unknown",
        "dir": str(run_dir),
        "created_at": created,
        "outcome": "unknown",
        "exit_code": status.code if status else None,
        "exit_signal": status.signal if status else None,
        "argv": "[]",
        "problem": problem,
    }


def record_problem(record: dict[str, Any]) -> str | None:
    """Why a record must not be indexed, or None. A record without a version is an older one."""
    if "run_id" not in record:
        return "no run_id"
    run_id = record["run_id"]
    if not isinstance(run_id, str) or not _PLAIN_NAME.match(run_id) or ".." in run_id:
        return f"run id {str(run_id)[:80]!r} is not a plain name"
    version = record.get("schema_version", 1)
    if isinstance(version, bool) or version not in KNOWN_RECORD_VERSIONS:
        known = ", ".join(str(v) for v in sorted(KNOWN_RECORD_VERSIONS))
        return f"unknown record schema version {str(version)[:40]} (this proctor knows {known})"
    return None


def _finite_float(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:  # an int past float's range
        return None
    return number if math.isfinite(number) else None


def metrics_of_run_dir(run_dir: Path) -> Iterator[tuple[str, float, str | None]]:
    """Flat numeric metrics from metrics.json: {"metrics": {name: value | {value, unit}}}."""
    yield from _document_metrics(run_dir)
    # GPU health before and after the run, from the record (docs/gpu-health.md): every run
    # with a GPU has them, a metrics.json or not.
    try:
        record = json.loads((run_dir / "record.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        record = None
    yield from gpu_health_metrics(record if isinstance(record, dict) else {})
    # The controller's cost beside the fetched evidence (Runpod): results/cost.py. Read only
    # where its file is: the run wrapper (a store writer) imports no more than a run needs
    # (tests/cli/test_command_imports.py). The name is results/cost.py's COST_FILE, held to it by
    # tests/results/test_cost.py (written there by that name, read here through the store).
    if not (run_dir / ".cost.json").exists():
        return
    from proctor.results.cost import COST_UNITS, cost_metrics

    for name, value in cost_metrics(run_dir).items():
        yield name, value, COST_UNITS[name]


#: The store's names for the GPU health change's totals (monitors/gpu_health.py compare()).
GPU_HEALTH_METRICS = {
    "ecc_new_uncorrected": ("gpu_ecc_new_uncorrected", None),
    "xids_new": ("gpu_xid_new", None),
    "throttled_power_s": ("gpu_throttle_power_s", "s"),
    "throttled_heat_s": ("gpu_throttle_heat_s", "s"),
}


def gpu_health_metrics(record: dict[str, Any]) -> Iterator[tuple[str, float, str | None]]:
    """gpu_healthy (1/0: the preflight, where a GPU was checked) and the change's totals."""
    before = record.get("gpu_health")
    if isinstance(before, dict) and before.get("status") in ("ok", "failed"):
        yield "gpu_healthy", 1.0 if before.get("ok") else 0.0, None
    change = record.get("gpu_health_change")
    if isinstance(change, dict):
        for key, (name, unit) in GPU_HEALTH_METRICS.items():
            number = _finite_float(change.get(key))
            if number is not None:
                yield name, number, unit


def _document_metrics(run_dir: Path) -> Iterator[tuple[str, float, str | None]]:
    try:
        data = json.loads((run_dir / "metrics.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return
    metrics = data.get("metrics", {}) if isinstance(data, dict) else {}
    units = data.get("units", {}) if isinstance(data, dict) else {}
    if not isinstance(metrics, dict):
        return
    for name, value in metrics.items():
        unit = units.get(name) if isinstance(units, dict) else None
        if isinstance(value, dict):
            unit = value.get("unit", unit)
            value = value.get("value")
        number = _finite_float(value)
        if number is None:  # NaN, Infinity, 1e999, text: no value the metrics table can hold
            continue
        yield str(name), number, None if unit is None else str(unit)


# A run directory whose row may be missing or stale in the store: its wrapper could not
# index it in time (the store was locked). Any later indexing picks it up; a dot-file, so
# it is not an artifact of the run (the manifest leaves it out).
INDEX_PENDING = ".index-pending"
INDEX_WAIT_S = 2.0


def index_quietly(
    store_path: str | Path | None, run_dir: Path, who: str, *, timeout: float = INDEX_WAIT_S
) -> bool:
    """Index one run for a process that must not fail or wait long on the store (the wrapper,
    a tracker): the run directory stays the source of truth. If the store cannot be updated
    within `timeout` the run is marked pending, and the next indexing of its runs directory
    (another run's end, `runs list`, `runs reindex`) indexes it. Returns True if indexed."""
    if not store_path:
        return False
    import sys

    from proctor.store.sync import clear_pending, index_pending, mark_pending, register_pending

    mark_pending(run_dir)
    try:
        with Store(Path(store_path), timeout=timeout) as store:
            store.index_run_dir(run_dir)
            clear_pending(run_dir)
            index_pending(store, run_dir.parent)
    except Exception as error:
        register_pending(run_dir)
        sys.stderr.write(f"proctor {who}: store update failed (the run stays pending): {error!r}\n")
        return False
    return True


def index_missing(store: Store, runs_dir: Path, *, only_pending: bool = False) -> int:
    """Index the run directories marked pending, and (unless `only_pending`) those the store
    has no row for (store/sync.py: without a walk when the runs directory has not changed).
    Returns how many were indexed."""
    from proctor.store.sync import catch_up, index_pending

    return index_pending(store, runs_dir) if only_pending else catch_up(store, runs_dir)


def reindex(
    store: Store,
    runs_dir: Path,
    skipped: list[tuple[Path, str]] | None = None,
    *,
    clear_pending: bool = True,
    unknown: list[tuple[Path, str]] | None = None,
) -> int:
    """Rebuild every row from the run directories, in one transaction. Returns how many
    runs were indexed. Runs whose record cannot be read are indexed as unknown and go to
    `unknown` with the reason; directories that cannot be a run id either go to `skipped`.
    `clear_pending`: the store is the real one, so runs marked pending are indexed now."""
    from proctor.store import sync

    with store.transaction():
        store.delete_all()
        count = 0
        if runs_dir.is_dir():
            for child in sorted(runs_dir.iterdir()):
                if not child.is_dir():
                    continue
                indexed, problem = store.index_dir(child)
                if problem is not None:
                    target = unknown if indexed else skipped
                    if target is not None:
                        target.append((child, problem))
                if indexed:
                    count += 1
                    if clear_pending:
                        sync.clear_pending(child)
    return count


def open_up_to_date(path: Path, runs_dir: Path) -> tuple[Store, str | None]:
    """The store for a listing, with the runs it is missing indexed first, and a warning when
    it could not be used as is.

    The runs a wrapper could not index (the store was locked) are indexed now. If the store
    is still busy, a listing from it would silently leave those runs out: the runs are then
    listed from their directories, and the warning says why."""
    if path.exists():
        try:
            with Store(path, timeout=INDEX_WAIT_S) as writable:
                index_missing(writable, runs_dir)
        except StoreUnreadable:
            pass  # open_for_reading says so
        except sqlite3.Error as error:
            memory = Store.in_memory()
            reindex(memory, runs_dir, clear_pending=False)
            return memory, (
                f"the store {path} could not be updated ({error}): another proctor holds it;"
                " listing from the run directories"
            )
    return open_for_reading(path, runs_dir)


def open_for_reading(path: Path, runs_dir: Path) -> tuple[Store, str | None]:
    """The store for a read-only command, and a warning when it could not be used.

    Never creates a store file: with none (or an unreadable one), the runs are indexed from
    their directories into memory, so the listing is right either way."""
    warning: str | None = None
    if path.exists():
        try:
            store = Store(path, read_only=True)
            if store.runs(limit=1) or not runs_dir.is_dir():
                return store, None
            store.close()  # an empty index beside run directories: list from them
        except StoreUnreadable as error:
            fix = "`proctor runs reindex` rebuilds the store" if error.corrupt else error.hint
            warning = f"{error}; listing from the run directories ({fix})"
    memory = Store.in_memory()
    reindex(memory, runs_dir, clear_pending=False)
    return memory, warning


def rebuild(
    path: Path,
    runs_dir: Path,
    skipped: list[tuple[Path, str]],
    unknown: list[tuple[Path, str]] | None = None,
) -> tuple[int, Path | None]:
    """Reindex into the store at `path`; an unreadable one is first moved aside, kept as
    `<name>.corrupt-<UTC time>` (its -wal/-shm with it). Returns (runs indexed, where the bad
    store went or None)."""
    moved: Path | None = None
    try:
        store = Store(path)
    except StoreUnreadable as error:
        if not error.corrupt:
            raise
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        moved = path.with_name(f"{path.name}.corrupt-{stamp}")
        for suffix in ("", "-wal", "-shm"):
            side = Path(f"{path}{suffix}")
            if side.exists():
                os.replace(side, f"{moved}{suffix}")
        store = Store(path)
    with store:
        return reindex(store, runs_dir, skipped, unknown=unknown), moved

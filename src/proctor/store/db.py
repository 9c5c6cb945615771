"""The SQLite index of runs and their metrics.

The run directories are the source of truth; this is an index over them, rebuilt by
`reindex`. The schema grows through numbered migrations applied on open (ids are explicit
numbers, so renaming one never re-runs it). No pydantic here: the wrapper writes rows too.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Iterator
from pathlib import Path
from types import TracebackType
from typing import Any

from proctor import redact

STORE_NAME = "proctor.sqlite"

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
]

RUN_COLUMNS = (
    "id", "name", "kind", "run_key", "run_group", "dir", "created_at", "started_at", "ended_at",
    "duration_s", "outcome", "exit_code", "exit_signal", "source_commit", "source_dirty",
    "target", "host", "gpu", "argv",
)  # fmt: skip


def row_from_record(record: dict[str, Any], run_dir: Path) -> dict[str, Any]:
    source = record.get("source") or {}
    exit_ = record.get("exit") or {}
    gpu = record.get("gpu") or {}
    gpus = gpu.get("gpus") or []
    gpu_text = f"{len(gpus)}x {gpus[0].get('name')}" if gpus else None
    target = record.get("target") or {}
    host = record.get("host") or {}
    return {
        "id": record["run_id"],
        "name": record.get("name", ""),
        "kind": record.get("kind", "command"),
        "run_key": record.get("key"),
        "run_group": record.get("group"),
        "dir": str(run_dir),
        "created_at": record.get("created_at"),
        "started_at": record.get("started_at"),
        "ended_at": record.get("ended_at"),
        "duration_s": record.get("duration_s"),
        "outcome": record.get("outcome", "unknown"),
        "exit_code": exit_.get("code"),
        "exit_signal": exit_.get("signal"),
        "source_commit": source.get("commit"),
        "source_dirty": None if source.get("dirty") is None else int(bool(source.get("dirty"))),
        "target": target.get("kind"),
        "host": target.get("host") or host.get("hostname"),
        "gpu": gpu_text,
        "argv": json.dumps(record.get("argv_display") or record.get("argv") or []),
    }


class Store:
    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self.conn = sqlite3.connect(str(path), timeout=30.0, isolation_level=None)
        self.conn.row_factory = sqlite3.Row
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA foreign_keys=ON")
        self.migrate()

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

    def set_metrics(self, run_id: str, metrics: Iterable[tuple[str, float, str | None]]) -> None:
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            self.conn.execute("DELETE FROM metrics WHERE run_id = ?", (run_id,))
            self.conn.executemany(
                "INSERT INTO metrics (run_id, name, value, unit) VALUES (?, ?, ?, ?)",
                [(run_id, n, float(v), u) for n, v, u in metrics],
            )
            self.conn.execute("COMMIT")
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise

    def index_run_dir(self, run_dir: Path) -> bool:
        """Index one run directory (record and metrics.json); False if it holds no record."""
        try:
            record = json.loads((run_dir / "record.json").read_text(encoding="utf-8"))
        except (FileNotFoundError, json.JSONDecodeError):
            return False
        if not isinstance(record, dict) or "run_id" not in record:
            return False
        self.upsert_run(row_from_record(record, run_dir))
        self.set_metrics(record["run_id"], list(metrics_of_run_dir(run_dir)))
        return True

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
        where: list[str] = []
        args: list[Any] = []
        if name:
            where.append("name LIKE ?")
            args.append(f"%{name}%")
        if outcome:
            where.append("outcome = ?")
            args.append(outcome)
        if commit:
            where.append("source_commit LIKE ?")
            args.append(f"{commit}%")
        if since:
            where.append("created_at >= ?")
            args.append(since)
        if key:
            where.append("run_key = ?")
            args.append(key)
        if group:
            where.append("run_group = ?")
            args.append(group)
        sql = "SELECT * FROM runs"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY id DESC"
        if limit:
            sql += f" LIMIT {int(limit)}"
        return [dict(row) for row in self.conn.execute(sql, args)]

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

    def all_rows(self) -> Iterator[tuple[Any, ...]]:
        for row in self.conn.execute(f"SELECT {', '.join(RUN_COLUMNS)} FROM runs ORDER BY id"):
            yield tuple(row)
        for row in self.conn.execute("SELECT * FROM metrics ORDER BY run_id, name"):
            yield tuple(row)


def metrics_of_run_dir(run_dir: Path) -> Iterator[tuple[str, float, str | None]]:
    """Flat numeric metrics from metrics.json: {"metrics": {name: value | {value, unit}}}."""
    try:
        data = json.loads((run_dir / "metrics.json").read_text(encoding="utf-8"))
    except (FileNotFoundError, json.JSONDecodeError):
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
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        yield str(name), float(value), unit


def index_quietly(store_path: str | Path | None, run_dir: Path, who: str) -> None:
    """Index one run for a process that must not fail on the store (the wrapper, a tracker):
    the run directory stays the source of truth, and `runs reindex` repairs the index."""
    if not store_path:
        return
    import sys

    try:
        with Store(Path(store_path)) as store:
            store.index_run_dir(run_dir)
    except Exception as error:
        sys.stderr.write(f"proctor {who}: store update failed: {error!r}\n")


def reindex(store: Store, runs_dir: Path) -> int:
    """Rebuild every row from the run directories. Returns how many runs were indexed."""
    store.delete_all()
    count = 0
    if runs_dir.is_dir():
        for child in sorted(runs_dir.iterdir()):
            if child.is_dir() and store.index_run_dir(child):
                count += 1
    return count

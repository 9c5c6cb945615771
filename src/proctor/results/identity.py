"""What a result measured, for deciding whether two results may be compared at all.

A difference between two benchmarks means something only when they measured the same thing:
same engine source, same engine arguments, same dataset, same GPU model. This reads those four
from a run directory (or the metrics.json inside one) and the server run it benchmarked:

    source       the server run's source identity (git commit + diff hash), else unknown
    engine_args  the server run's argv, without --host/--port (where it listened is no setting)
    dataset      metrics.json `dataset.id` (random: kind and lengths; a file: its sha256)
    gpu          the GPU models (names) the server run's record lists; "none" on a machine
                 without GPUs

A field that one side does not know (a plain log file, an older run) is never a mismatch:
there is nothing to refuse on, and the comparison says which fields it could not check.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from proctor.record.schema import RecordCore, read_view

FIELDS = ("source", "engine_args", "dataset", "gpu")
_WHERE_FLAGS = ("--host", "--port")


def _json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _engine_args(argv: Any) -> str | None:
    if not isinstance(argv, list) or not argv:
        return None
    out: list[str] = []
    skip = False
    for arg in [str(a) for a in argv[1:]]:  # argv[0] is an interpreter path: where, not what
        if skip:
            skip = False
            continue
        if arg in _WHERE_FLAGS:
            skip = True
            continue
        if arg.split("=", 1)[0] in _WHERE_FLAGS:
            continue
        out.append(arg)
    return " ".join(out)


def _source(record: RecordCore) -> str | None:
    src = record.source or {}
    if not src.get("is_git") or not src.get("commit"):
        return None
    return str(src.get("source_id") or f"{src['commit']}+{src.get('diff_sha256') or 'clean'}")


def _gpu(record: RecordCore) -> str | None:
    gpu = record.fact("gpu")
    if not isinstance(gpu, dict):
        return None
    names = [str(g.get("name")) for g in gpu.get("gpus") or [] if isinstance(g, dict)]
    if names:
        return ", ".join(sorted(names))
    reason = str(gpu.get("reason") or "")
    if gpu.get("present") is False and reason and "sampling off" not in reason:
        return "none"
    return None


def _server_record(run_dir: Path, record: RecordCore) -> RecordCore | None:
    if isinstance(record.fact("server"), dict):
        return record  # a server run itself
    ref = record.fact("server_run")
    if isinstance(ref, str) and ref and "/" not in ref and ref not in (".", ".."):
        return read_view(run_dir.parent / ref)
    return None


def identity_of(path: str | Path) -> dict[str, str | None]:
    """The four identity fields of a result (None: unknown)."""
    p = Path(path)
    run_dir = p if p.is_dir() else p.parent
    metrics = _json(p if p.is_file() and p.suffix == ".json" else run_dir / "metrics.json")
    dataset = metrics.get("dataset")
    out: dict[str, str | None] = dict.fromkeys(FIELDS)
    if isinstance(dataset, dict) and dataset.get("id"):
        out["dataset"] = str(dataset["id"])
    record = read_view(run_dir)
    server = _server_record(run_dir, record)
    facts = server.fact("server") if server is not None else None
    if isinstance(facts, dict):
        out["engine_args"] = _engine_args(facts.get("argv"))
    out["source"] = _source(server) if server is not None else None
    out["gpu"] = (_gpu(server) if server is not None else None) or _gpu(record)
    return out


def mismatches(a: dict[str, str | None], b: dict[str, str | None]) -> list[str]:
    """`field: A vs B` for each field both sides know and that differs."""
    return [
        f"{name}: {a[name]!r} vs {b[name]!r}"
        for name in FIELDS
        if a.get(name) is not None and b.get(name) is not None and a[name] != b[name]
    ]


def unchecked(a: dict[str, str | None], b: dict[str, str | None]) -> list[str]:
    return [name for name in FIELDS if a.get(name) is None or b.get(name) is None]

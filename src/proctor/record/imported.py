"""Another tool's result as a run of its own (`proctor results import`): each result that
`proctor.results.exchange.read_result_file` reads becomes a run directory of kind "imported",
written by the one Recorder (docs/results-exchange.md).

    import_file(path, runs_dir, store_path, fmt=None) -> [(run directory, ImportedResult)]
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

from proctor.record.recorder import Recorder
from proctor.results.exchange import IMPORTED_SCHEMA, ImportedResult, read_result_file
from proctor.results.exchange.judge import judge_imported
from proctor.results.exchange.loading import read_all


def import_file(
    path: Path, runs_dir: Path, store_path: str | Path | None, fmt: str | None = None
) -> list[tuple[Path, ImportedResult]]:
    """Each result in `path` as an imported run under `runs_dir` (indexed in the store)."""
    found, results = read_result_file(path, fmt)
    raw = read_all(path)
    digest = hashlib.sha256(raw).hexdigest()
    return [
        (_write_run(res, found, path, raw, digest, runs_dir, store_path, i, len(results)), res)
        for i, res in enumerate(results)
    ]


def _write_run(
    res: ImportedResult,
    fmt: str,
    path: Path,
    raw: bytes,
    digest: str,
    runs_dir: Path,
    store_path: str | Path | None,
    index: int,
    count: int,
) -> Path:
    rec = Recorder.create(runs_dir)
    try:
        _fill_run(rec, res, fmt, path, raw, digest, store_path, index, count)
    except BaseException:
        # Ctrl-C or a full disk mid-import: no half-imported run is left to be listed (the
        # store row is written last, by finish, so there is none to remove)
        shutil.rmtree(rec.run.path, ignore_errors=True)
        raise
    return rec.run.path


def _fill_run(
    rec: Recorder,
    res: ImportedResult,
    fmt: str,
    path: Path,
    raw: bytes,
    digest: str,
    store_path: str | Path | None,
    index: int,
    count: int,
) -> None:
    from proctor.version import __version__

    suffix = path.suffix if path.suffix in (".json", ".yaml", ".yml") else ".json"
    copy = f"imported-{fmt}{suffix}"
    imported = {
        "tool": res.tool,
        "format": fmt,
        "tool_version": res.tool_version,
        "file": path.name,
        "sha256": digest,
        "copy": copy,
        "lacks": res.lacks,
        **({"part": f"{index + 1} of {count}"} if count > 1 else {}),
        "measured_started_at": res.started_at,
        "measured_ended_at": res.ended_at,
    }
    rec.start(
        {
            "kind": "imported",
            "name": res.name,
            "argv": ["proctor", "results", "import", path.name, "--format", fmt],
            "proctor_version": __version__,
            "target": {"kind": "local"},
            "imported": imported,
            "outcome": "running",
        }
    )
    (rec.run.path / copy).write_bytes(raw)
    doc: dict[str, Any] = {
        "schema": IMPORTED_SCHEMA,
        "schema_version": 1,
        "tool": res.tool,
        "format": fmt,
        "tool_version": res.tool_version,
        "model": res.model,
        "started_at": res.started_at,
        "finished_at": res.ended_at,
        "metrics": res.metrics_doc(),
        "units": res.units(),
        "settings": res.settings,
        "lacks": res.lacks,
        **({"not_numbers": res.not_numbers} if res.not_numbers else {}),
        # a proctor export's own verdict; else proctor's rules on the figures (judge.py)
        "validity": res.validity or judge_imported(res),
    }
    dataset = res.settings.get("dataset_id")
    if isinstance(dataset, str) and dataset:
        doc["dataset"] = {"id": dataset}
    rec.run.write_json("metrics.json", json.loads(json.dumps(doc, default=str)))
    rec.finish(code=0, outcome="ok", store_path=store_path, who="results import")


__all__ = ["import_file"]

"""Export a run directory (br.py's Benchmark Report, native.py's proctor export), and read a
proctor export back."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from proctor.errors import UsageError
from proctor.results.exchange.model import ImportedResult, number
from proctor.results.exchange.native import (
    ExportIdentity,
    ExportImported,
    ExportMetric,
    ExportRun,
    ExportValidity,
    ProctorExport,
)
from proctor.results.model import ParsedResult


def _json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return {}
    return data if isinstance(data, dict) else {}


def _sources(run_dir: Path) -> tuple[dict[str, Any], ParsedResult, dict[str, Any]]:
    """(record.json, the parsed result, metrics.json) of a run directory."""
    from proctor.record.schema import load_record
    from proctor.results.parsers import parse_path

    if not (run_dir / "record.json").is_file():
        raise UsageError(f"{run_dir} is no run directory (no record.json)", hint="give a run id")
    load_record(run_dir, strict=True)  # a record this proctor cannot read: 64, said why
    record = _json(run_dir / "record.json")
    return record, parse_path(run_dir), _json(run_dir / "metrics.json")


def _server(run_dir: Path, record: dict[str, Any]) -> dict[str, Any] | None:
    ref = record.get("server_run")
    if isinstance(ref, str) and ref and "/" not in ref and ref not in (".", ".."):
        server = _json(run_dir.parent / ref / "record.json")
        return server or None
    return record if isinstance(record.get("server"), dict) else None


def export_br(run_dir: Path) -> dict[str, Any]:
    from proctor.results.exchange.br import to_br
    from proctor.version import __version__

    record, parsed, metrics_doc = _sources(run_dir)
    bench = metrics_doc if metrics_doc.get("schema") == "proctor.bench.metrics" else None
    report = to_br(
        run_id=str(record.get("run_id") or run_dir.name),
        metrics=parsed.values(),
        bench=bench,
        record=record,
        server=_server(run_dir, record),
        proctor_version=__version__,
    )
    outcome = record.get("outcome")
    if outcome != "ok":  # the report has no outcome field: said as a keyword
        report["run"]["keywords"].append(f"outcome:{outcome}")
    if bench is None and isinstance(metrics_doc.get("validity"), dict):
        verdict = metrics_doc["validity"].get("verdict")
        if verdict:
            report["run"]["keywords"].append(f"validity:{verdict}")
    return report


def export_native(run_dir: Path) -> dict[str, Any]:
    from proctor.results.identity import identity_of

    record, parsed, metrics_doc = _sources(run_dir)
    exit_info = record.get("exit") if isinstance(record.get("exit"), dict) else {}
    assert isinstance(exit_info, dict)
    host = record.get("host") if isinstance(record.get("host"), dict) else {}
    assert isinstance(host, dict)
    target = record.get("target") if isinstance(record.get("target"), dict) else {}
    assert isinstance(target, dict)
    validity = parsed.meta.get("validity")
    imported = record.get("imported") if isinstance(record.get("imported"), dict) else None
    settings = metrics_doc.get("config") if isinstance(metrics_doc.get("config"), dict) else {}
    assert isinstance(settings, dict)
    if imported and isinstance(metrics_doc.get("settings"), dict):
        settings = metrics_doc["settings"]
    model = parsed.meta.get("model") or parsed.meta.get("model_id")
    doc = ProctorExport(
        schema="proctor.results.export",
        exported_at=datetime.now(timezone.utc).isoformat(timespec="milliseconds"),
        result_kind=parsed.kind,
        model=str(model) if model else None,
        run=ExportRun(
            id=str(record.get("run_id") or run_dir.name),
            kind=str(record.get("kind") or "command"),
            name=record.get("name"),
            created_at=record.get("created_at"),
            started_at=record.get("started_at"),
            ended_at=record.get("ended_at"),
            duration_s=number(record.get("duration_s")),
            outcome=str(record.get("outcome") or "unknown"),
            exit_code=exit_info.get("code") if isinstance(exit_info.get("code"), int) else None,
            proctor_version=record.get("proctor_version"),
            host=host.get("hostname") or target.get("host"),
            target=target.get("kind"),
        ),
        identity=ExportIdentity(**identity_of(run_dir)),
        metrics=[
            ExportMetric(
                name=m.name,
                value=m.value,
                unit=m.unit,
                direction=m.direction,
                stderr=m.stderr,
                n=m.n,
            )
            for m in parsed.metrics.values()
        ],
        validity=(
            ExportValidity(
                verdict=validity["verdict"],
                reasons=[str(r) for r in validity.get("reasons") or []],
            )
            if isinstance(validity, dict) and validity.get("verdict") in ("VALID", "INVALID")
            else None
        ),
        imported=(
            ExportImported(
                tool=str(imported.get("tool")),
                format=str(imported.get("format")),
                tool_version=imported.get("tool_version"),
                file=imported.get("file"),
                sha256=imported.get("sha256"),
                lacks=[str(x) for x in imported.get("lacks") or []],
            )
            if imported
            else None
        ),
        settings={k: v for k, v in settings.items() if k not in ("base_url", "api_key")},
    )
    return dict(json.loads(doc.to_json()))


def read_native(obj: dict[str, Any], source: str) -> list[ImportedResult]:
    """A proctor export, back into a run (another machine's, or an archived one)."""
    try:
        doc = ProctorExport.model_validate(obj)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "document"
        raise UsageError(
            f"{source}: proctor export rejected at {where}: {first['msg']}",
            hint="give the file `proctor results export --format proctor` wrote",
        ) from None
    res = ImportedResult(
        tool="proctor",
        format="proctor",
        tool_version=doc.run.proctor_version,
        name=f"{doc.run.name or doc.run.kind}-from-{doc.run.id}"[:120],
        model=doc.model,
        started_at=doc.run.started_at,
        ended_at=doc.run.ended_at,
    )
    for metric in doc.metrics:
        res.put(metric.name, metric.value)
        if metric.stderr is not None and metric.name in res.metrics:
            res.stderr[metric.name] = metric.stderr
            if metric.n is not None and metric.n > 1:
                res.repeats[metric.name] = metric.n
    res.settings = dict(doc.settings)
    if doc.identity.dataset:
        res.settings["dataset_id"] = doc.identity.dataset
    if doc.validity is not None:
        res.validity = doc.validity.model_dump()
    res.lacks = [
        "the run directory's evidence (logs, requests, record, server run)",
        *(doc.imported.lacks if doc.imported else []),
    ]
    return [res]


__all__ = ["export_br", "export_native", "read_native"]

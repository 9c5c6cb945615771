"""The few numbers a reader of a run looks for first, read from its metrics.json (in `record`,
not `results`: the results package imports its parsers and baselines, which `runs show` need not).

    headline_of(run_dir) -> {"kind", "verdict", "why", "figures": [[label, value, unit], ...]}
    headline_text(h)     -> 'INVALID: 1769.7 output tok/s, TTFT p50 11.28 ms, ...'

A bench: its validity verdict (VALID / INVALID, with the first reasons), output tok/s, TTFT and
TPOT p50, failed requests. A GSM8K eval: its accuracy (flexible-extract, as ATOM's baseline
reads it; strict-match beside it) on N samples, ok or failed. An offline job: the metrics its
output printed. A load sweep (its summary.json): points, how many VALID, the peak output
tok/s and its concurrency. Any other run, or one without metrics.json: None (its exit status
says it all).
Shown by a flow for each workload, by `runs show` and stored in the flow's record; read
through the documents' models (proctor.jobs.documents); a damaged document has no headline.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from proctor.errors import ConfigError
from proctor.jobs.documents import (
    BenchDocument,
    EvalDocument,
    Figures,
    OfflineDocument,
    SweepPointRow,
    SweepSummary,
    parse_document,
    read_or_none,
)
from proctor.stats import finite

#: The most figures an offline job's headline shows (its output may print dozens).
OFFLINE_FIGURES = 4


def _read(run_dir: Path, name: str = "metrics.json") -> dict[str, Any] | None:
    try:
        data = json.loads((run_dir / name).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _figures(metrics: Figures, wanted: list[tuple[str, str, str]]) -> list[list[Any]]:
    out: list[list[Any]] = []
    for key, label, unit in wanted:
        value = metrics.get(key)
        if value is not None:
            out.append([label, value, unit])
    return out


def _bench(doc: BenchDocument) -> dict[str, Any]:
    validity = doc.validity
    figures = _figures(
        doc.metrics,
        [
            ("output_throughput", "output", "tok/s"),
            ("median_ttft_ms", "TTFT p50", "ms"),
            ("median_tpot_ms", "TPOT p50", "ms"),
            ("p99_ttft_ms", "TTFT p99", "ms"),
            ("p99_tpot_ms", "TPOT p99", "ms"),
        ],
    )
    completed, failed = doc.metrics.get("completed"), doc.metrics.get("failed")
    if failed is not None:
        figures.append(["failed", int(failed), f"of {int(failed + (completed or 0))}"])
    return {
        "kind": "bench",
        "verdict": validity.verdict if validity else None,
        "why": list(validity.reasons) if validity else [],
        "figures": figures,
    }


def _gsm8k(doc: EvalDocument) -> dict[str, Any]:
    figures = _figures(
        doc.metrics,
        [
            ("exact_match_flexible_extract", "accuracy", "GSM8K flexible-extract"),
            ("exact_match_strict_match", "strict-match", "GSM8K"),
        ],
    )
    samples = doc.metrics.get("n_samples")
    if samples is not None:
        figures.append(["samples", int(samples), ""])
    ok = doc.verdict.ok if doc.verdict else None
    return {
        "kind": "gsm8k",
        "verdict": None if ok is None else ("ok" if ok else "failed"),
        "why": [],
        "figures": figures,
    }


def _offline(doc: OfflineDocument) -> dict[str, Any]:
    figures: list[list[Any]] = []
    for name, value in doc.metrics.items():
        number = finite(value)
        if number is not None and len(figures) < OFFLINE_FIGURES:
            figures.append([str(name), number, str(doc.units.get(name) or "")])
    return {"kind": "offline", "verdict": None, "why": [], "figures": figures}


def _sweep(summary: SweepSummary) -> dict[str, Any] | None:
    """A load sweep (summary.json): how many points, how many VALID, the peak output tok/s
    and the concurrency that reached it."""
    points = summary.points
    if not points:
        return None
    rated: list[tuple[SweepPointRow, float]] = []
    for point in points:
        rate = point.figure("output_throughput")
        if rate is not None:
            rated.append((point, rate))
    valid = sum(1 for p in points if p.figure("valid") == 1)
    figures: list[list[Any]] = [["VALID points", valid, f"of {len(points)}"]]
    if rated:
        best, rate = max(rated, key=lambda pair: pair[1])
        figures.append(["peak output", rate, "tok/s"])
        if best.concurrency is not None:
            figures.append(["at concurrency", best.concurrency, ""])
    return {"kind": "sweep", "verdict": None, "why": [], "figures": figures}


def headline_of(run_dir: Path) -> dict[str, Any] | None:
    """The headline of the run in `run_dir`, from its metrics.json (a load sweep: its
    summary.json); None without one, or with one that is damaged."""
    raw = _read(run_dir)
    if raw is None:
        summary = read_or_none(run_dir / "summary.json")
        return _sweep(summary) if isinstance(summary, SweepSummary) else None
    try:
        doc = parse_document(raw, "metrics.json")
    except ConfigError:
        return None
    if "metrics" not in doc.model_fields_set:
        return None
    if isinstance(doc, BenchDocument):
        return _bench(doc)
    if isinstance(doc, EvalDocument):
        return _gsm8k(doc)
    if isinstance(doc, OfflineDocument):
        return _offline(doc)
    return None


def _shown(value: Any) -> str:
    """Counts whole; rates and latencies to 0.01 under 100, to 0.1 above (as `bench` prints)."""
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return f"{value:.2f}" if abs(value) < 100 else f"{value:.1f}"
    return str(value)


def figure_text(value: Any, unit: str) -> str:
    """A figure's value and unit as `runs show` prints it."""
    return f"{_shown(value)} {unit}".rstrip()


def headline_text(headline: dict[str, Any]) -> str:
    """One line: the verdict and the names of the checks that failed, then the figures, e.g.
    'INVALID (warmup, window): output 1299.4 tok/s, TTFT p50 14.84 ms, ..., 0 of 6 failed'."""
    parts = []
    figures = headline.get("figures") or []
    for label, value, unit in figures:
        if "p99" in label:  # the line has the medians; runs show and the JSON have all
            continue
        if label == "failed":
            parts.append(f"{value} {unit} failed")
        elif label == "accuracy":
            parts.append(f"accuracy {value:.3f} ({unit})")
        elif label == "strict-match":
            parts.append(f"strict-match {value:.3f}")
        elif label == "samples":
            parts.append(f"{value} samples")
        else:
            parts.append(f"{label} {_shown(value)} {unit}".rstrip())
    text = ", ".join(parts) or "no figures"
    verdict = headline.get("verdict")
    if not verdict or verdict == "ok":
        return text
    checks = [str(why).split(":", 1)[0] for why in headline.get("why") or []]
    failed = f" ({', '.join(checks)})" if checks else ""
    return f"{verdict}{failed}: {text}"


def result_line(label: str, code: int | None, headline: dict[str, Any] | None) -> str:
    """A workload's line in a flow: 'bench-c16: exit 0; VALID: output 2391.5 tok/s, ...'."""
    said = f"{label}: exit {'unknown' if code is None else code}"
    return f"{said}; {headline_text(headline)}" if headline else said


__all__ = ["figure_text", "headline_of", "headline_text", "result_line"]

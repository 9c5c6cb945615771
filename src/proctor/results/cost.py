"""Dollars per million output tokens of a bench on a priced machine (Runpod: the pods' costPerHr).

    cost = cost_of(metrics_doc, usd_per_hour=2.5, run_wall_s=41.0)
    usd_per_million_output_tokens = usd_per_hour x window_h / output_tokens x 1e6

The window and the token count are the bench's own (metrics.json `metrics.duration`, the measured
window, and `metrics.total_output_tokens`); `run_usd` is the price times the wall time of the
whole run on the machine (its record's duration). An unknown price is "not measured", never 0.

The controller writes this next to the fetched evidence as `.cost.json` (a dot-file: outside the
far manifest, so the fetched run still verifies); the store, `runs compare` and the report read it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from proctor.errors import ConfigError
from proctor.jobs.documents import BenchDocument, Figures, bench_document

COST_FILE = ".cost.json"
#: The metrics the store indexes from COST_FILE, with their units (as in results/names.py).
COST_UNITS = {"usd_per_million_output_tokens": "USD/Mtok", "run_cost_usd": "USD"}


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _figures(doc: BenchDocument | dict[str, Any] | None) -> Figures:
    """The bench's figures; none from a document that is not a bench's or is damaged."""
    if isinstance(doc, BenchDocument):
        return doc.metrics
    try:
        return bench_document(doc or {}).metrics
    except ConfigError:
        return Figures()


def cost_of(
    doc: BenchDocument | dict[str, Any] | None,
    usd_per_hour: float | None,
    run_wall_s: float | None = None,
    *,
    source: str = "",
) -> dict[str, Any]:
    """The cost section of one run: measured, or `{"available": False, "reason": ...}`."""
    metrics = _figures(doc)
    window_s = metrics.get("duration")
    tokens = metrics.get("total_output_tokens")
    out: dict[str, Any] = {
        "usd_per_hour": usd_per_hour,
        "price_source": source,
        "window_s": window_s,
        "output_tokens": tokens,
        "run_wall_s": run_wall_s,
    }
    reason = None
    if usd_per_hour is None:
        reason = "the machine's price is unknown (no costPerHr)"
    elif not window_s or window_s <= 0:
        reason = "no measured window in metrics.json"
    elif not tokens or tokens <= 0:
        reason = "no output tokens in metrics.json"
    if usd_per_hour is not None and run_wall_s is not None:
        out["run_usd"] = round(usd_per_hour * max(0.0, run_wall_s) / 3600.0, 6)
    if reason is not None:
        return {"available": False, "reason": reason, **out}
    assert usd_per_hour is not None and window_s is not None and tokens is not None
    window_usd = usd_per_hour * window_s / 3600.0
    return {
        "available": True,
        **out,
        "window_usd": round(window_usd, 6),
        "usd_per_million_output_tokens": round(window_usd / tokens * 1e6, 6),
    }


def read_cost(run_dir: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((run_dir / COST_FILE).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None


def cost_metrics(run_dir: Path) -> dict[str, float]:
    """The indexed cost metrics of a run directory (none when the price was unknown)."""
    cost = read_cost(run_dir) or {}
    values = {
        "usd_per_million_output_tokens": _number(cost.get("usd_per_million_output_tokens")),
        "run_cost_usd": _number(cost.get("run_usd")),
    }
    return {name: value for name, value in values.items() if value is not None}


def format_cost(cost: dict[str, Any]) -> str:
    """One line: `Cost: $1.2345 per million output tokens (...)` or `Cost: not measured (...)`."""
    if not cost.get("available"):
        return f"Cost: not measured ({cost.get('reason')})"
    run = (
        f", run ${cost['run_usd']:.4f} over {cost['run_wall_s']:.3g} s"
        if cost.get("run_usd") is not None and cost.get("run_wall_s") is not None
        else ""
    )
    return (
        f"Cost: ${cost['usd_per_million_output_tokens']:.4f} per million output tokens "
        f"(${cost['usd_per_hour']:g}/hr, {cost['output_tokens']:.0f} tokens over "
        f"{cost['window_s']:.3g} s{run})"
    )


__all__ = [
    "COST_FILE",
    "COST_UNITS",
    "cost_metrics",
    "cost_of",
    "format_cost",
    "read_cost",
]

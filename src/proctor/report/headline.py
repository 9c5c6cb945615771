"""The card a report opens with: the verdict and the few numbers a reader came for.

headline_card(view) -> HTML: VALID/INVALID (or the run's outcome) and why; for a bench,
output tok/s, TTFT and TPOT p50/p99, errors, energy per output token (when measured); for
an eval, its scores; for any other run, exit status and duration.
"""

from __future__ import annotations

from proctor.report.load import RunView
from proctor.report.page import badge, esc
from proctor.report.verdict import verdict_of


def _num(value: float | None, digits: int) -> str | None:
    return None if value is None else f"{value:,.{digits}f}"


def _tiles(view: RunView) -> list[tuple[str, str]]:
    """(value, label) pairs, in the order a reader scans them."""
    m = {name: metric.value for name, metric in view.metrics.items()}
    tiles: list[tuple[str | None, str]] = []
    if view.kind == "bench":
        completed, failed = m.get("completed"), m.get("failed")
        errors = None
        if failed is not None:
            total = int(failed) + int(completed or 0)
            errors = f"{int(failed):,} of {total:,}"
        energy = m.get("energy_per_output_token_j")
        tiles = [
            (_num(m.get("output_throughput"), 1), "output tok/s"),
            (_num(m.get("median_ttft_ms"), 2), "TTFT p50 (ms)"),
            (_num(m.get("p99_ttft_ms"), 2), "TTFT p99 (ms)"),
            (_num(m.get("median_tpot_ms"), 2), "TPOT p50 (ms)"),
            (_num(m.get("p99_tpot_ms"), 2), "TPOT p99 (ms)"),
            (errors, "errors (failed requests)"),
            (None if energy is None else f"{energy:.4f}", "energy (J / output token)"),
        ]
    elif view.kind == "gsm8k":
        tiles = [
            (_num(m.get("gsm8k_exact_match_flexible"), 4), "GSM8K flexible-extract"),
            (_num(m.get("gsm8k_exact_match_strict"), 4), "GSM8K strict-match"),
            (_num(m.get("gsm8k_n_samples"), 0), "samples"),
        ]
    else:
        duration = view.typed.duration_s
        code = view.state.exit.code if view.state.exit is not None else None
        tiles = [
            (view.exit_text if code is None else str(code), "exit status"),
            (None if duration is None else f"{duration:,.1f} s", "duration"),
        ]
    return [(value, label) for value, label in tiles if value is not None]


def headline_card(view: RunView, title: str = "") -> str:
    verdict = verdict_of(view)
    why = f'<span class="why">{esc(verdict.why)}</span>' if verdict.why else ""
    head = f"<h3>{esc(title)}</h3>" if title else ""
    tiles = "".join(
        f'<div class="tile"><b>{esc(value)}</b><span>{esc(label)}</span></div>'
        for value, label in _tiles(view)
    )
    return (
        f'<section class="card">{head}<div class="verdict">'
        f"{badge(verdict.text, verdict.css)}{why}</div>"
        f'<div class="tiles">{tiles}</div></section>'
    )


__all__ = ["headline_card"]

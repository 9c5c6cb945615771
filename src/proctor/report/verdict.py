"""What a run's report says first: its verdict (a bench that exited 0 with an INVALID
measurement is not "ok"), and numbers as a reader reads them (24 requests, not 24.0000).

    verdict_of(view) -> Verdict("INVALID", "fail", "24 measured requests (at least 100 ...)")
    fmt_value(24.0, "requests") -> "24";  fmt_value(0.0, "bool") -> "no"
"""

from __future__ import annotations

from dataclasses import dataclass

from proctor.jobs.documents import BenchDocument, EvalDocument
from proctor.report.load import RunView

# Units of whole things: a count prints as an integer.
COUNT_UNITS = frozenset({"requests", "tokens", "samples"})


@dataclass(frozen=True)
class Verdict:
    text: str  # the run's outcome, or for a bench that ran: VALID, INVALID, failed
    css: str  # the badge class: ok (green) only for a run that is ok and, for a bench, VALID
    why: str = ""  # the reasons, one line

    @property
    def ok(self) -> bool:
        return self.css == "ok"


def verdict_of(view: RunView) -> Verdict:
    """The run's outcome, then (a bench that exited 0) its own verdict and validity."""
    error = str(view.typed.error or "")
    if view.outcome != "ok":
        return Verdict(view.outcome, view.outcome, error)
    doc = view.document
    judged = doc.verdict if isinstance(doc, (BenchDocument, EvalDocument)) else None
    if judged is not None and judged.ok is False:
        return Verdict("failed", "failed", str(judged.message or ""))
    validity = doc.validity if isinstance(doc, BenchDocument) else None
    if validity is not None and validity.verdict is not None:
        if validity.verdict == "INVALID":
            return Verdict("INVALID", "fail", "; ".join(validity.reasons))
        return Verdict("VALID", "ok")
    return Verdict("ok", "ok")


def fmt_value(value: float | None, unit: str = "") -> str:
    """A metric's value: yes/no for a boolean, an integer for a count, else 4 significant
    decimals below 10 and 2 above."""
    if value is None:
        return "n/a"
    if unit == "bool":
        return "yes" if value else "no"
    if unit in COUNT_UNITS and float(value).is_integer():
        return f"{int(value):,}"
    return f"{value:.4f}" if abs(value) < 10 else f"{value:,.2f}"


def unit_text(unit: str) -> str:
    """The unit column: a boolean's yes/no needs none."""
    return "" if unit == "bool" else unit


__all__ = ["COUNT_UNITS", "Verdict", "fmt_value", "unit_text", "verdict_of"]

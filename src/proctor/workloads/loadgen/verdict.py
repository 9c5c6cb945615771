"""The benchmark's verdict: did more requests fail than --max-error-rate allows?

A benchmark whose requests failed is not a result: by default one failed measured request
fails the run (exit 3), with the count and the first distinct reasons in the summary,
metrics.json (`verdict`, and `error_rate`/`workload_failed` in `metrics`) and the store.
A benchmark in which no request succeeded measured nothing: it fails whatever
--max-error-rate allows. The limit is compared exactly as the decimal the user wrote
(0.57 allows 57 of 100; the float 0.57 * 100 is 56.99...).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from proctor.workloads.loadgen.records import RequestRecord


@dataclass(frozen=True)
class Verdict:
    """Whether the failed requests stay within --max-error-rate, and the first reasons why not."""

    ok: bool
    failed: int
    total: int
    max_error_rate: float
    first_reasons: list[str]

    @property
    def error_rate(self) -> float:
        return self.failed / self.total if self.total else 0.0

    def message(self) -> str:
        if self.total == 0:
            return "no request was measured"
        if self.failed == self.total:
            head = (
                f"no request succeeded ({self.failed} of {self.total} failed): nothing was measured"
            )
            return head + (
                "; first: " + " | ".join(self.first_reasons) if self.first_reasons else ""
            )
        head = (
            f"{self.failed} of {self.total} requests failed "
            f"({self.error_rate:.1%}; allowed {self.max_error_rate:.1%})"
        )
        if not self.first_reasons:
            return head
        return f"{head}; first: " + " | ".join(self.first_reasons)

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "failed": self.failed,
            "total": self.total,
            "error_rate": self.error_rate,
            "max_error_rate": self.max_error_rate,
            "first_reasons": self.first_reasons,
            "message": self.message(),
        }


FIRST_REASONS = 3  # distinct reasons quoted; the rest are counted in metrics.json


def judge(measured: list[RequestRecord], max_error_rate: float) -> Verdict:
    failed = [r for r in measured if not r.success]
    reasons: list[str] = []
    for r in failed:
        text = f"{r.reason}: {r.error}"[:200] if r.error else r.reason
        if text not in reasons:
            reasons.append(text)
        if len(reasons) == FIRST_REASONS:
            break
    total = len(measured)
    ok = total > 0 and len(failed) < total and within(len(failed), total, max_error_rate)
    return Verdict(ok, len(failed), total, max_error_rate, reasons)


def within(failed: int, total: int, max_error_rate: float) -> bool:
    """failed / total <= max_error_rate, with the rate read as the shortest decimal that
    prints as it (repr), so a limit of 0.57 allows exactly 57 of 100."""
    limit = Fraction(repr(float(max_error_rate)))
    return failed * limit.denominator <= limit.numerator * total


def format_verdict(verdict: Verdict) -> str:
    """The line printed under the summary block (outside it: vLLM's labels stay untouched)."""
    if verdict.ok:
        return (
            f"Result: ok ({verdict.failed} of {verdict.total} requests failed; "
            f"allowed {verdict.max_error_rate:.1%})"
        )
    return f"Result: FAILED: {verdict.message()}"

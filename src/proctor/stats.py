"""Small statistics shared by bench repeats and result comparisons; pure math, no imports
from the rest of proctor (any layer may use it).

    t95(df)                   two-sided 95% critical value of Student's t
    describe(values)          n, mean, sample stdev, stderr, 95% CI of the mean
    welch_half_width(...)     95% half-width of the difference of two means (Welch)
    finite(value)             a finite float, or None for anything else in a document
"""

from __future__ import annotations

import math
from typing import Any

CONFIDENCE = 0.95
# Two-sided 95% critical values of Student's t by degrees of freedom; between rows the next
# lower row is used (a slightly wider, conservative interval); beyond 120, the normal 1.96.
_T95 = {
    1: 12.706,
    2: 4.303,
    3: 3.182,
    4: 2.776,
    5: 2.571,
    6: 2.447,
    7: 2.365,
    8: 2.306,
    9: 2.262,
    10: 2.228,
    11: 2.201,
    12: 2.179,
    13: 2.160,
    14: 2.145,
    15: 2.131,
    16: 2.120,
    17: 2.110,
    18: 2.101,
    19: 2.093,
    20: 2.086,
    21: 2.080,
    22: 2.074,
    23: 2.069,
    24: 2.064,
    25: 2.060,
    26: 2.056,
    27: 2.052,
    28: 2.048,
    29: 2.045,
    30: 2.042,
    40: 2.021,
    60: 2.000,
    120: 1.980,
}


def t95(df: float) -> float:
    if not df >= 1:
        return math.inf
    if df > 120:
        return 1.960
    return _T95[max(k for k in _T95 if k <= df)]


def describe(values: list[float]) -> dict[str, float | int]:
    n = len(values)
    mean = math.fsum(values) / n
    stdev = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else 0.0
    stderr = stdev / math.sqrt(n)
    half = t95(n - 1) * stderr if n > 1 else math.inf
    return {
        "n": n,
        "mean": mean,
        "stdev": stdev,
        "stderr": stderr,
        "ci95_low": mean - half,
        "ci95_high": mean + half,
        "ci95_half": half,
    }


def welch_half_width(se_a: float, n_a: int, se_b: float, n_b: int) -> float:
    """95% half-width of mean_b - mean_a from each side's standard error and sample size
    (Welch-Satterthwaite degrees of freedom)."""
    var = se_a**2 + se_b**2
    denom = (se_a**4 / (n_a - 1) if n_a > 1 else 0.0) + (se_b**4 / (n_b - 1) if n_b > 1 else 0.0)
    df = var**2 / denom if denom > 0 else float(n_a + n_b - 2)
    return t95(df) * math.sqrt(var)


def finite(value: Any) -> float | None:
    """`value` as a finite float, or None (not a number, bool, NaN, infinite, too large)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None

"""Baselines and verdicts: ATOM's models_accuracy.json and proctor's performance baselines.

Verdicts (one per baselined metric):
- pass          at or better than the baseline, or worse by less than the tolerance
- within_noise  worse than the baseline but inside one stderr of it (the seed's rule:
                a score within 1 stderr of the baseline is no regression)
- regression    worse beyond the tolerance (perf) or below the threshold (accuracy),
                and outside the noise band
- missing       the baseline names a metric the result does not have

Measured noise instead of tolerances: when the result comes from `bench --repeat N` (each
metric has a standard error over N repeats) and the baseline gives the metric's `stderr` and
the `n` repeats behind it, the fixed tolerance is not used: a metric is a regression when it is
worse by more than the 95% confidence interval of the difference of the two means (Welch's t,
proctor/stats.py), within_noise when worse by less. `compare` does the same when both sides
have repeats. A baseline's [meta] may name `source`, `engine_args`, `dataset` and `gpu`
(identity.py); a result that differs in one is not compared (the CLI refuses, exit 77).

Performance baseline file (TOML or JSON), per metric: value, optional stderr, direction
(higher|lower; default from the metric's name) and tolerance (a fraction; default 0.05 for
higher-is-better, i.e. a throughput drop over 5%, and 0.10 for lower-is-better, a latency
rise over 10%):

    [metrics.total_token_throughput]
    value = 10234.5
    stderr = 80.0
    [metrics.mean_tpot_ms]
    value = 21.3
    tolerance = 0.15
    [metrics.output_throughput]     # from a bench --repeat 5: mean, its stderr and n
    value = 5120.0
    stderr = 31.0
    n = 5

ATOM accuracy file: a JSON array of {model_name, model_path, accuracy_threshold,
accuracy_baseline, mtp_accept_threshold?, ...}; checked against
`gsm8k_exact_match_flexible` (its stderr is the noise band) and `mtp_acceptance_rate`.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from proctor.errors import ConfigError, UsageError, invalid
from proctor.results.model import Metric
from proctor.results.names import Direction, metric_info
from proctor.results.reading import read_bounded
from proctor.stats import welch_half_width

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

Status = Literal["pass", "within_noise", "regression", "missing"]
DEFAULT_TOLERANCE = {"higher": 0.05, "lower": 0.10}
ACCURACY_METRIC = "gsm8k_exact_match_flexible"
MTP_METRIC = "mtp_acceptance_rate"
BASELINE_MAX_BYTES = 16 * 1024 * 1024  # far above any baseline; /dev/zero stops here


# Strict: a baseline that says `true` or "100" where a number goes, or nan / inf (valid TOML
# and Python JSON), would judge nothing while every verdict read "pass".
_NUMBERS = ConfigDict(strict=True, allow_inf_nan=False)


class MetricBaseline(BaseModel):
    model_config = ConfigDict(extra="forbid", **_NUMBERS)
    value: float
    stderr: float | None = Field(default=None, ge=0)
    direction: Literal["higher", "lower"] | None = None
    tolerance: float | None = Field(default=None, ge=0)
    n: int | None = Field(default=None, ge=1)  # repeats behind value and stderr


class PerfBaseline(BaseModel):
    model_config = ConfigDict(extra="forbid")
    meta: dict[str, Any] = Field(default_factory=dict)
    metrics: dict[str, MetricBaseline]


class AccuracyEntry(BaseModel):
    model_config = ConfigDict(extra="allow", **_NUMBERS)
    model_name: str
    model_path: str | None = None
    accuracy_threshold: float = Field(ge=0, le=1)  # fractions, as lm-eval scores (0-1)
    accuracy_baseline: float | None = Field(default=None, ge=0, le=1)
    mtp_accept_threshold: float | None = Field(default=None, ge=0, le=1)
    test_level: str | None = None


class Verdict(BaseModel):
    metric: str
    status: Status
    value: float | None = None
    baseline: float | None = None
    threshold: float | None = None
    change: float | None = None  # (value - baseline) / baseline
    tolerance: float | None = None
    noise: float | None = None  # one stderr, in the metric's unit
    direction: Direction = "none"
    message: str = ""
    # How `noise` was judged: "ci95" (measured: repeats on both sides), else "tolerance".
    method: Literal["ci95", "tolerance"] = "tolerance"


Baseline = PerfBaseline | list[AccuracyEntry]


def _err(path: Path, e: ValidationError) -> ConfigError:
    return invalid(e, what=str(path), hint="fix the baseline file", cls=ConfigError)


def load_baseline(path: str | Path) -> Baseline:
    """A baseline file (performance metrics with tolerances, accuracy entries), validated."""
    p = Path(path)
    if p.is_dir():
        raise ConfigError(f"cannot read baseline {p}: Is a directory", hint="check the path")
    try:  # bounded, as a result file: /dev/zero or a FIFO without a writer never hangs
        read = read_bounded(p, limit=BASELINE_MAX_BYTES, seconds=10.0)
    except UsageError as e:
        raise ConfigError(f"baseline {p}: {e.message}", hint="check the path") from None
    if read.cut:
        raise ConfigError(
            f"baseline {p} is not a baseline file: {read.cut}",
            hint="give the baseline TOML or JSON file",
        )
    raw = read.data
    try:
        data: Any = (
            tomllib.loads(raw.decode())
            if p.suffix == ".toml"
            else json.loads(raw, object_pairs_hook=_no_duplicates)
        )
    except _Duplicate as e:
        raise ConfigError(f"{p}: {e} named twice", hint="keep one of them") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise ConfigError(
            f"{p} is not valid {'TOML' if p.suffix == '.toml' else 'JSON'}: {e}",
            hint="fix the baseline file",
        ) from e
    if data == [] or (isinstance(data, dict) and data.get("metrics") == {}):
        what = "no model entry" if data == [] else "names no metric"
        raise ConfigError(
            f"{p}: {what}: nothing to check, so no verdict",
            hint="see docs/bench.md for the baseline format",
        )
    try:
        if isinstance(data, list):
            return [AccuracyEntry.model_validate(x) for x in data]
        if isinstance(data, dict) and isinstance(data.get("metrics"), dict):
            metrics = {
                k: (v if isinstance(v, dict) else {"value": v}) for k, v in data["metrics"].items()
            }
            return PerfBaseline.model_validate({**data, "metrics": metrics})
    except ValidationError as e:
        raise _err(p, e) from e
    raise ConfigError(
        f"{p}: neither an ATOM models_accuracy.json array nor a [metrics] table",
        hint="see docs/bench.md for the baseline format",
    )


class _Duplicate(ValueError):
    pass


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object whose keys are unique (json.loads would keep the last of two silently)."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _Duplicate(key)
        out[key] = value
    return out


def _noise(*errs: float | None) -> float | None:
    known = [e for e in errs if e is not None]
    return math.sqrt(sum(e * e for e in known)) if known else None


def _with(base: Verdict, status: Status, message: str) -> Verdict:
    return base.model_copy(update={"status": status, "message": message})


def check_metric(name: str, metric: Metric | None, spec: MetricBaseline) -> Verdict:
    info = metric_info(name)
    direction: Direction = spec.direction or info.direction
    if metric is None or not math.isfinite(metric.value):
        said = (
            "not in the result" if metric is None else f"{metric.value} in the result: not a number"
        )
        return Verdict(
            metric=name, status="missing", baseline=spec.value, direction=direction, message=said
        )
    v, b = metric.value, spec.value
    noise = _noise(spec.stderr, metric.stderr)
    change = (v - b) / abs(b) if b else None
    measured = _measured_noise(spec.stderr, spec.n, metric)
    if direction == "none":
        return Verdict(
            metric=name,
            status="pass",
            value=v,
            baseline=b,
            change=change,
            noise=noise,
            direction=direction,
            message="informational (no direction)",
        )
    tol = spec.tolerance if spec.tolerance is not None else DEFAULT_TOLERANCE[direction]
    worse_by = (b - v) if direction == "higher" else (v - b)  # > 0 means worse
    worse_frac = worse_by / abs(b) if b else (math.inf if worse_by > 0 else 0.0)
    if measured is not None:
        base = Verdict(
            metric=name,
            status="pass",
            value=v,
            baseline=b,
            change=change,
            noise=measured,
            direction=direction,
            method="ci95",
        )
        if worse_by <= 0:
            return _with(base, "pass", "at or better than the baseline")
        ci = f"95% CI of the difference ±{measured:.4g}, n={spec.n}/{metric.n}"
        if worse_by <= measured:
            return _with(base, "within_noise", f"worse by {worse_frac:.1%}, inside the {ci}")
        return _with(base, "regression", f"worse by {worse_frac:.1%}, beyond the {ci}")
    base = Verdict(
        metric=name,
        status="pass",
        value=v,
        baseline=b,
        change=change,
        tolerance=tol,
        noise=noise,
        direction=direction,
    )
    if worse_by <= 0:
        return _with(base, "pass", "at or better than the baseline")
    if noise is not None and worse_by <= noise:
        return _with(base, "within_noise", "worse, but within one stderr")
    if worse_frac > tol:
        return _with(base, "regression", f"worse by {worse_frac:.1%} (tolerance {tol:.0%})")
    return _with(base, "pass", f"worse by {worse_frac:.1%}, within tolerance")


def _measured_noise(stderr: float | None, n: int | None, metric: Metric) -> float | None:
    """The 95% half-width of the difference when both sides come from repeats, else None."""
    if stderr is None or n is None or n < 2 or metric.stderr is None or (metric.n or 0) < 2:
        return None
    return welch_half_width(stderr, n, metric.stderr, metric.n or 0)


def check_perf(metrics: dict[str, Metric], baseline: PerfBaseline) -> list[Verdict]:
    return [check_metric(n, metrics.get(n), spec) for n, spec in baseline.metrics.items()]


def find_entry(entries: list[AccuracyEntry], model: str) -> AccuracyEntry | None:
    """The entry naming `model` (its name, path or the path's last part), else None."""
    want = model.rstrip("/").lower()
    for e in entries:
        names = {e.model_name.lower()}
        if e.model_path:
            names |= {e.model_path.rstrip("/").lower(), Path(e.model_path.rstrip("/")).name.lower()}
        if want in names or Path(want).name in names:
            return e
    return None


def select_entry(
    entries: list[AccuracyEntry], model: str | None, explicit: bool = False
) -> AccuracyEntry:
    """The entry for `model`; else the only entry, unless the model was named by the user
    (`explicit`: --model), who then gets no other model's threshold."""
    found = find_entry(entries, model) if model else None
    if found is not None:
        return found
    if len(entries) == 1 and not explicit:
        return entries[0]
    known = ", ".join(e.model_name for e in entries[:8])
    raise ConfigError(
        f"no baseline entry for model {model!r}"
        if model
        else "the baseline file has several models",
        hint=f"pass --model, one of: {known}",
    )


def check_accuracy(metrics: dict[str, Metric], entry: AccuracyEntry) -> list[Verdict]:
    out: list[Verdict] = []
    m = metrics.get(ACCURACY_METRIC)
    m = m if m is not None and math.isfinite(m.value) else None
    t, b = entry.accuracy_threshold, entry.accuracy_baseline
    if m is None:
        out.append(
            Verdict(
                metric=ACCURACY_METRIC,
                status="missing",
                baseline=b,
                threshold=t,
                direction="higher",
                message="not in the result",
            )
        )
    else:
        v, s = m.value, m.stderr
        ref = b if b is not None else t
        base = Verdict(
            metric=ACCURACY_METRIC,
            status="pass",
            value=v,
            baseline=b,
            threshold=t,
            noise=s,
            change=(v - ref) / ref if ref else None,
            direction="higher",
        )
        if v >= ref:
            out.append(_with(base, "pass", "at or above the baseline"))
        elif s is not None and ref - v <= s:
            out.append(_with(base, "within_noise", "below the baseline by less than one stderr"))
        elif v >= t:
            out.append(_with(base, "pass", "below the baseline, above the threshold"))
        else:
            msg = f"{v:.4f} < threshold {t:.4f}, outside one stderr"
            out.append(_with(base, "regression", msg))
    if entry.mtp_accept_threshold is not None:
        mtp = metrics.get(MTP_METRIC) or metrics.get("spec_acceptance_rate")
        t2 = entry.mtp_accept_threshold
        if mtp is None or not math.isfinite(mtp.value):
            out.append(
                Verdict(
                    metric=MTP_METRIC,
                    status="missing",
                    threshold=t2,
                    direction="higher",
                    message="not in the result",
                )
            )
        else:
            # vLLM prints `Acceptance rate (%)` (spec_acceptance_rate): always a percentage, so
            # 0.8 is 0.8 %, not 80 %; mtp_acceptance_rate may be either (over 1: a percentage).
            percent = mtp.name == "spec_acceptance_rate" or mtp.value > 1.0
            v2 = mtp.value / 100.0 if percent else mtp.value
            ok = v2 >= t2
            out.append(
                Verdict(
                    metric=MTP_METRIC,
                    status="pass" if ok else "regression",
                    value=v2,
                    threshold=t2,
                    direction="higher",
                    message="" if ok else f"{v2:.3f} < {t2:.3f}",
                )
            )
    return out


def check(
    metrics: dict[str, Metric],
    baseline: Baseline,
    model: str | None = None,
    not_numbers: dict[str, str] | None = None,
    *,
    explicit: bool = False,
) -> list[Verdict]:
    """Verdicts of `metrics` against a baseline: pass, within noise, regression, missing.
    `not_numbers` (a parsed result's meta) names metrics the result gave as nan, inf or text:
    missing, and the verdict says what the result held instead."""
    if isinstance(baseline, PerfBaseline):
        verdicts = check_perf(metrics, baseline)
    else:
        verdicts = check_accuracy(metrics, select_entry(baseline, model, explicit))
    for v in verdicts:
        if v.status == "missing" and v.metric in (not_numbers or {}):
            v.message = f"{(not_numbers or {})[v.metric]} in the result: not a number"
    return verdicts


class CompareRow(BaseModel):
    metric: str
    a: float | None
    b: float | None
    change: float | None = None  # (b - a) / a
    delta: float | None = None
    noise: float | None = None
    direction: Direction = "none"
    assessment: Literal[
        "better", "worse", "same", "within_noise", "only_a", "only_b", "changed"
    ] = "same"
    # "ci95": noise is the 95% CI half-width of the difference (repeats on both sides);
    # "stderr": one combined stderr; "none": no noise known.
    method: Literal["ci95", "stderr", "none"] = "none"


def compare(a: dict[str, Metric], b: dict[str, Metric]) -> list[CompareRow]:
    """Each metric of A and B side by side: change from A to B and its noise band."""
    rows: list[CompareRow] = []
    for name in list(a) + [n for n in b if n not in a]:
        ma, mb = a.get(name), b.get(name)
        direction = (ma or mb).direction if (ma or mb) else "none"  # type: ignore[union-attr]
        if ma is None or mb is None:
            rows.append(
                CompareRow(
                    metric=name,
                    a=ma.value if ma else None,
                    b=mb.value if mb else None,
                    direction=direction,
                    assessment="only_a" if mb is None else "only_b",
                )
            )
            continue
        delta = mb.value - ma.value
        noise = _measured_noise(ma.stderr, ma.n, mb)
        method: Literal["ci95", "stderr", "none"] = "ci95"
        if noise is None:
            noise = _noise(ma.stderr, mb.stderr)
            method = "stderr" if noise is not None else "none"
        row = CompareRow(
            metric=name,
            a=ma.value,
            b=mb.value,
            delta=delta,
            noise=noise,
            change=delta / abs(ma.value) if ma.value else None,
            direction=direction,
            method=method,
        )
        if delta == 0:
            row.assessment = "same"
        elif noise is not None and abs(delta) <= noise:
            row.assessment = "within_noise"
        elif direction == "none":
            row.assessment = "changed"
        else:
            row.assessment = "better" if (delta > 0) == (direction == "higher") else "worse"
        rows.append(row)
    return rows


def worst_status(verdicts: list[Verdict]) -> Status:
    order: tuple[Status, ...] = ("regression", "missing", "within_noise")
    for status in order:
        if any(v.status == status for v in verdicts):
            return status
    return "pass"

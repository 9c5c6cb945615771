"""Baseline verdicts: pass, within noise, regression and missing, for perf and accuracy."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from proctor.errors import ConfigError
from proctor.results import (
    AccuracyEntry,
    Metric,
    PerfBaseline,
    check,
    compare,
    load_baseline,
    parse_path,
    worst_status,
)
from proctor.results.baselines import MetricBaseline, check_metric

SAMPLES = Path(__file__).parent / "samples"


def m(name: str, value: float, stderr: float | None = None) -> Metric:
    return Metric.of(name, value, stderr)


@pytest.mark.parametrize(
    ("name", "value", "base", "status"),
    [
        ("total_token_throughput", 1000.0, 1000.0, "pass"),
        ("total_token_throughput", 1100.0, 1000.0, "pass"),  # better
        ("total_token_throughput", 960.0, 1000.0, "pass"),  # -4% < 5%
        ("total_token_throughput", 940.0, 1000.0, "regression"),  # -6% > 5%
        ("mean_ttft_ms", 109.0, 100.0, "pass"),  # +9% < 10%
        ("mean_ttft_ms", 111.0, 100.0, "regression"),  # +11% > 10%
        ("mean_ttft_ms", 80.0, 100.0, "pass"),  # faster
    ],
)
def test_default_tolerances(name: str, value: float, base: float, status: str) -> None:
    v = check_metric(name, m(name, value), MetricBaseline(value=base))
    assert v.status == status, v.message


def test_within_noise_needs_a_stderr() -> None:
    spec = MetricBaseline(value=1000.0, stderr=80.0)
    assert (
        check_metric("output_throughput", m("output_throughput", 930.0), spec).status
        == "within_noise"
    )  # -7%, but inside one stderr
    assert (
        check_metric("output_throughput", m("output_throughput", 910.0), spec).status
        == "regression"
    )
    # the result's own stderr widens the band (combined in quadrature: sqrt(80² + 60²) = 100)
    assert (
        check_metric("output_throughput", m("output_throughput", 910.0, 60.0), spec).status
        == "within_noise"
    )


def test_explicit_direction_and_tolerance() -> None:
    spec = MetricBaseline(value=10.0, direction="lower", tolerance=0.5)
    assert check_metric("custom", m("custom", 14.0), spec).status == "pass"
    assert check_metric("custom", m("custom", 16.0), spec).status == "regression"


def test_missing_metric() -> None:
    base = PerfBaseline(metrics={"request_goodput": MetricBaseline(value=3.0)})
    (v,) = check({}, base)
    assert v.status == "missing" and worst_status([v]) == "missing"


def test_perf_file_against_vllm_result() -> None:
    base = load_baseline(SAMPLES / "perf_baseline.toml")
    res = parse_path(SAMPLES / "vllm_result.json")
    verdicts = {v.metric: v for v in check(res.metrics, base)}
    assert verdicts["total_token_throughput"].status == "within_noise"  # -22.7, stderr 40
    assert verdicts["output_throughput"].status == "pass"
    assert verdicts["mean_tpot_ms"].status == "pass"  # +1.4%
    assert verdicts["p99_ttft_ms"].status == "regression"  # +1.45% > 1%
    assert verdicts["p99_ttft_ms"].change == pytest.approx(0.01448, rel=1e-3)
    assert worst_status(list(verdicts.values())) == "regression"


def test_perf_json_shorthand(tmp_path: Path) -> None:
    p = tmp_path / "b.json"
    p.write_text(json.dumps({"metrics": {"request_throughput": 4.0}}))
    base = load_baseline(p)
    assert isinstance(base, PerfBaseline)
    assert base.metrics["request_throughput"].value == 4.0


def test_bad_baseline_files(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[metrics.x]\nvalue = 'fast'\n")
    with pytest.raises(ConfigError, match=r"metrics\.x\.value"):
        load_baseline(bad)
    (tmp_path / "junk.json").write_text("{not json")
    with pytest.raises(ConfigError):
        load_baseline(tmp_path / "junk.json")
    (tmp_path / "other.json").write_text('{"foo": 1}')
    with pytest.raises(ConfigError):
        load_baseline(tmp_path / "other.json")


ATOM = AccuracyEntry(model_name="M", accuracy_threshold=0.93, accuracy_baseline=0.955)


@pytest.mark.parametrize(
    ("value", "stderr", "status"),
    [
        (0.96, 0.006, "pass"),
        (0.9522, 0.0059, "within_noise"),  # below baseline by 0.0028 < 1 stderr
        (0.94, 0.005, "pass"),  # below baseline beyond noise, above the CI threshold
        (0.92, 0.005, "regression"),  # below threshold, outside noise
        (0.925, 0.04, "within_noise"),  # below threshold but within 1 stderr of baseline
    ],
)
def test_accuracy_verdicts(value: float, stderr: float, status: str) -> None:
    (v,) = check(
        {"gsm8k_exact_match_flexible": m("gsm8k_exact_match_flexible", value, stderr)}, [ATOM]
    )
    assert v.status == status, v.message


def test_atom_file_against_lm_eval_result() -> None:
    base = load_baseline(SAMPLES / "models_accuracy.json")
    res = parse_path(SAMPLES / "lmeval_results.json")
    verdicts = check(res.metrics, base, res.meta["model_name"])  # matched by model_path
    by = {v.metric: v for v in verdicts}
    assert by["gsm8k_exact_match_flexible"].status == "within_noise"
    assert by["gsm8k_exact_match_flexible"].threshold == 0.93
    assert by["mtp_acceptance_rate"].status == "missing"  # entry has mtp_accept_threshold
    # the other entry, by name: no MTP threshold; 0.9522 is 0.0078 (> 1 stderr) under its
    # baseline 0.96 but above its threshold 0.94, so the CI gate passes
    (kimi,) = check(res.metrics, base, "Kimi-K2.5-MXFP4")
    assert kimi.status == "pass" and "above the threshold" in kimi.message


def test_mtp_acceptance_percent_or_fraction() -> None:
    entry = AccuracyEntry(model_name="M", accuracy_threshold=0.5, mtp_accept_threshold=0.7)
    acc = m("gsm8k_exact_match_flexible", 0.9, 0.01)
    ok = check(
        {
            "gsm8k_exact_match_flexible": acc,
            "spec_acceptance_rate": m("spec_acceptance_rate", 73.47),
        },
        [entry],
    )
    assert [v.status for v in ok] == ["pass", "pass"]
    low = check(
        {"gsm8k_exact_match_flexible": acc, "mtp_acceptance_rate": m("mtp_acceptance_rate", 0.65)},
        [entry],
    )
    assert low[1].status == "regression"


def test_entry_selection_errors() -> None:
    entries = [ATOM, AccuracyEntry(model_name="N", accuracy_threshold=0.5)]
    with pytest.raises(ConfigError, match="several models"):
        check({}, entries)
    with pytest.raises(ConfigError, match="no baseline entry"):
        check({}, entries, "Z")


def test_compare_rows() -> None:
    a = {
        "total_token_throughput": m("total_token_throughput", 1000.0),
        "mean_ttft_ms": m("mean_ttft_ms", 100.0),
        "gsm8k_exact_match_flexible": m("gsm8k_exact_match_flexible", 0.95, 0.006),
        "only_here": m("total_input_tokens", 5),
    }
    b = {
        "total_token_throughput": m("total_token_throughput", 900.0),
        "mean_ttft_ms": m("mean_ttft_ms", 90.0),
        "gsm8k_exact_match_flexible": m("gsm8k_exact_match_flexible", 0.945, 0.006),
        "request_goodput": m("request_goodput", 2.0),
    }
    rows = {r.metric: r for r in compare(a, b)}
    assert rows["total_token_throughput"].assessment == "worse"
    assert rows["total_token_throughput"].change == pytest.approx(-0.1)
    assert rows["mean_ttft_ms"].assessment == "better"
    acc = rows["gsm8k_exact_match_flexible"]
    assert acc.assessment == "within_noise" and acc.noise == pytest.approx(0.0084853, rel=1e-4)
    assert rows["only_here"].assessment == "only_a"
    assert rows["request_goodput"].assessment == "only_b"


def rep(name: str, value: float, stderr: float, n: int) -> Metric:
    """A metric from bench --repeat n: its mean and the standard error over the repeats."""
    metric = Metric.of(name, value, stderr)
    metric.n = n
    return metric


def test_compare_with_repeats_on_both_sides_uses_the_95pct_interval() -> None:
    # se 10 on each side, n=3: Welch df = 4, t = 2.776, half = 2.776 * sqrt(200) = 39.26.
    a = {"output_throughput": rep("output_throughput", 1000.0, 10.0, 3)}
    inside = {"output_throughput": rep("output_throughput", 965.0, 10.0, 3)}
    beyond = {"output_throughput": rep("output_throughput", 955.0, 10.0, 3)}
    row = compare(a, inside)[0]
    assert row.method == "ci95" and row.noise == pytest.approx(2.776 * 200**0.5)
    # 3.5% worse: one stderr (14.1) would call it worse; the interval says noise.
    assert row.assessment == "within_noise"
    assert compare(a, beyond)[0].assessment == "worse"
    # Repeats on one side only: the old one-stderr band.
    single = {"output_throughput": m("output_throughput", 965.0, 10.0)}
    row = compare(a, single)[0]
    assert row.method == "stderr" and row.assessment == "worse"


def test_check_with_repeats_replaces_the_tolerance_by_the_interval() -> None:
    spec = MetricBaseline(value=1000.0, stderr=5.0, n=5)
    # 3% worse: inside a 5% tolerance, but far beyond the interval of such quiet repeats.
    v = check_metric("output_throughput", rep("output_throughput", 970.0, 5.0, 5), spec)
    assert (v.status, v.method) == ("regression", "ci95")
    # Noisy repeats: 8% worse (beyond the 5% tolerance) is inside their interval.
    noisy = MetricBaseline(value=1000.0, stderr=40.0, n=3)
    v = check_metric("output_throughput", rep("output_throughput", 920.0, 40.0, 3), noisy)
    assert (v.status, v.method) == ("within_noise", "ci95")
    # A baseline stderr without n (not from repeats): the tolerance rule as before.
    plain = MetricBaseline(value=1000.0, stderr=5.0)
    v = check_metric("output_throughput", rep("output_throughput", 970.0, 5.0, 5), plain)
    assert (v.status, v.method) == ("pass", "tolerance")

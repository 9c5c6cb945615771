"""A run's headline from its metrics.json (or a sweep's summary.json), on real files."""

from __future__ import annotations

import json
from pathlib import Path

from proctor.record.headline import headline_of, headline_text


def _write(tmp_path: Path, name: str, doc: object) -> Path:
    (tmp_path / name).write_text(json.dumps(doc) if not isinstance(doc, str) else doc)
    return tmp_path


def test_a_bench_headline_is_its_validity_and_its_figures(tmp_path: Path) -> None:
    doc = {
        "schema": "proctor.bench.metrics",
        "metrics": {
            "output_throughput": 2391.54,
            "median_ttft_ms": 41.2,
            "median_tpot_ms": 6.37,
            "p99_ttft_ms": 90.0,
            "completed": 158,
            "failed": 2,
        },
        "validity": {"verdict": "INVALID", "reasons": ["window: 3 s", "warmup: none"]},
    }
    headline = headline_of(_write(tmp_path, "metrics.json", doc))
    assert headline is not None
    assert headline["verdict"] == "INVALID"
    assert ["output", 2391.54, "tok/s"] in headline["figures"]
    assert ["failed", 2, "of 160"] in headline["figures"]
    assert headline_text(headline) == (
        "INVALID (window, warmup): output 2391.5 tok/s, TTFT p50 41.20 ms,"
        " TPOT p50 6.37 ms, 2 of 160 failed"
    )


def test_a_gsm8k_headline_is_its_accuracy(tmp_path: Path) -> None:
    doc = {
        "kind": "gsm8k",
        "metrics": {
            "exact_match_flexible_extract": 0.65,
            "exact_match_strict_match": 0.62,
            "n_samples": 50,
        },
        "verdict": {"ok": True},
    }
    headline = headline_of(_write(tmp_path, "metrics.json", doc))
    assert headline is not None and headline["verdict"] == "ok"
    assert headline_text(headline) == (
        "accuracy 0.650 (GSM8K flexible-extract), strict-match 0.620, 50 samples"
    )


def test_a_sweep_headline_is_its_peak_and_how_many_points_are_valid(tmp_path: Path) -> None:
    summary = {
        "points": [
            {"concurrency": 4, "output_throughput": 100.0, "valid": 1.0},
            {"concurrency": 16, "output_throughput": 300.0, "valid": 0.0},
            {"concurrency": 64, "output_throughput": 250.0, "valid": 1.0},
        ]
    }
    headline = headline_of(_write(tmp_path, "summary.json", summary))
    assert headline is not None
    assert headline_text(headline) == (
        "VALID points 2 of 3, peak output 300.0 tok/s, at concurrency 16"
    )


def test_no_metrics_or_damaged_ones_give_no_headline_or_skip_the_damage(tmp_path: Path) -> None:
    assert headline_of(tmp_path) is None
    assert headline_of(_write(tmp_path, "metrics.json", "not json {")) is None
    assert headline_of(_write(tmp_path, "metrics.json", "[1, 2]")) is None
    # NaN (Python's JSON reader takes it) and text are no figures; the rest stands.
    _write(
        tmp_path,
        "metrics.json",
        '{"schema": "proctor.bench.metrics", "metrics": {"output_throughput": NaN,'
        ' "median_ttft_ms": "fast", "median_tpot_ms": 5.0}}',
    )
    headline = headline_of(tmp_path)
    assert headline is not None and headline["figures"] == [["TPOT p50", 5.0, "ms"]]
    assert headline["verdict"] is None

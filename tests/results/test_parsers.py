"""Parsers on hand-written samples of vLLM, ATOM, SGLang and lm-eval output, and round trips."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from proctor.errors import ConfigError, UsageError
from proctor.results import metric_info, parse_path, parse_string
from proctor.workloads.loadgen.metrics import compute_metrics
from proctor.workloads.loadgen.records import RequestRecord
from proctor.workloads.loadgen.summary import format_summary

SAMPLES = Path(__file__).parent / "samples"


def test_vllm_printed_block() -> None:
    r = parse_path(SAMPLES / "vllm_bench_serve.log")
    assert r.kind == "serving-summary" and r.meta["flavour"] == "vllm"
    v = r.values()
    assert v["completed"] == 638 and v["failed"] == 2 and v["max_concurrency"] == 64
    assert v["total_token_throughput"] == 8077.29
    assert v["max_output_tokens_per_s"] == 4992.0 and v["max_concurrent_requests"] == 72.0
    assert v["mean_ttft_ms"] == 612.40 and v["p99_itl_ms"] == 41.33
    assert v["median_e2el_ms"] == 16089.50
    # "Maximum request concurrency: 64" before the block (the Namespace line) is not read
    assert len(v) == 23
    m = r.metrics["mean_tpot_ms"]
    assert (m.unit, m.direction) == ("ms", "lower")
    assert r.metrics["total_token_throughput"].direction == "higher"


def test_atom_old_spelling_and_last_block_wins() -> None:
    r = parse_path(SAMPLES / "atom_benchmark.log")
    assert r.meta["blocks"] == 2
    assert r.values()["total_token_throughput"] == 1365.33  # "Total Token throughput"
    assert r.values()["completed"] == 40


def test_sglang_block() -> None:
    r = parse_path(SAMPLES / "sglang_bench_serving.log")
    v = r.values()
    assert r.meta["flavour"] == "sglang"
    assert v["request_rate"] == float("inf")
    assert v["max_concurrency"] == 16 and v["concurrency"] == 15.62
    assert v["mean_e2el_ms"] == 3203.41 and v["p95_itl_ms"] == 30.10 and v["max_itl_ms"] == 120.33
    assert v["input_throughput"] == 4992.69
    assert v["total_output_tokens_retokenized"] == 12795


def test_vllm_result_json_ignores_per_request_arrays() -> None:
    r = parse_path(SAMPLES / "vllm_result.json")
    assert r.kind == "vllm-json"
    v = r.values()
    assert v["std_ttft_ms"] == 401.2233 and v["duration"] == 161.4712
    assert "ttfts" not in v and "request_goodput" not in v  # null is not a value
    assert r.meta["model_id"] == "meta-llama/Llama-3.1-8B-Instruct"


def test_lm_eval_results() -> None:
    r = parse_path(SAMPLES / "lmeval_results.json")
    assert r.kind == "lm-eval"
    flex = r.metrics["gsm8k_exact_match_flexible"]
    assert flex.value == pytest.approx(0.95223654)
    assert flex.stderr == pytest.approx(0.0058744, rel=1e-4)
    assert flex.direction == "higher"
    assert r.metrics["gsm8k_exact_match_strict"].value == pytest.approx(0.94692949)
    assert r.values()["gsm8k_n_samples"] == 1319
    assert r.meta["model_name"] == "/models/DeepSeek-R1-0528" and r.meta["n_shot"] == {"gsm8k": 3}


def test_lm_eval_output_dir_layout(tmp_path: Path) -> None:
    d = tmp_path / "out" / "__models__DeepSeek-R1-0528"
    d.mkdir(parents=True)
    (d / "results_2026-12-01T10-00-00.json").write_text(
        (SAMPLES / "lmeval_results.json").read_text()
    )
    assert parse_path(tmp_path / "out").kind == "lm-eval"


def test_sglang_jsonl_last_line() -> None:
    a = {"backend": "sglang", "request_throughput": 1.0, "mean_e2e_latency_ms": 10.0}
    b = {"backend": "sglang", "request_throughput": 2.0, "mean_e2e_latency_ms": 20.0}
    r = parse_string(json.dumps(a) + "\n" + json.dumps(b) + "\n")
    assert r.kind == "sglang-json"
    assert r.values() == {"request_throughput": 2.0, "mean_e2el_ms": 20.0}


def test_summary_round_trip_through_parser() -> None:
    recs = [
        RequestRecord(
            index=i,
            prompt_len=100 + i,
            expected_output_len=10,
            start_time=1.0 + i,
            queued_at=1.0,
            ttft=0.1 * (i + 1),
            itl=[0.01] * 9,
            latency=0.5 + i,
            end_time=1.5 + 2 * i,
            output_tokens=10,
            success=True,
        )
        for i in range(5)
    ]
    m = compute_metrics(
        recs, 6.0, percentiles=[50, 99.9], goodput_slos_ms={"ttft": 250}, max_concurrency=5
    )
    text = "some log line\n" + format_summary(m) + "\ntrailing\n"
    back = parse_string(text).values()
    flat = m.flat()
    for key in (
        "completed",
        "failed",
        "total_input_tokens",
        "total_output_tokens",
        "request_throughput",
        "request_goodput",
        "output_throughput",
        "total_token_throughput",
        "mean_ttft_ms",
        "median_ttft_ms",
        "p50_ttft_ms",
        "p99.9_tpot_ms",
        "mean_itl_ms",
        "p99.9_e2el_ms",
        "max_concurrency",
    ):
        expected = flat[key]
        assert isinstance(expected, (int, float))
        assert back[key] == pytest.approx(expected, abs=0.006), key
    assert back["mean_queue_ms"] == pytest.approx(m.stats_ms["queue"].mean, abs=0.006)


def test_proctor_metrics_json(tmp_path: Path) -> None:
    doc = {
        "schema": "proctor.bench.metrics",
        "schema_version": 1,
        "model": "m",
        "metrics": {"completed": 3, "mean_ttft_ms": 1.5, "request_goodput": None},
    }
    (tmp_path / "metrics.json").write_text(json.dumps(doc))
    r = parse_path(tmp_path)
    assert r.kind == "proctor-metrics" and r.values() == {"completed": 3, "mean_ttft_ms": 1.5}


def test_unknown_inputs_are_config_errors(tmp_path: Path) -> None:
    (tmp_path / "x.log").write_text("nothing here\n")
    with pytest.raises(ConfigError):
        parse_path(tmp_path / "x.log")
    with pytest.raises(ConfigError):
        parse_string('{"hello": 1}')
    with pytest.raises(UsageError):
        parse_path(tmp_path / "missing.json")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(UsageError):
        parse_path(empty)


def test_metric_info_directions() -> None:
    assert metric_info("p99_ttft_ms").direction == "lower"
    assert metric_info("request_goodput").direction == "higher"
    assert metric_info("arc_easy_acc_none").direction == "higher"
    assert metric_info("total_input_tokens").direction == "none"

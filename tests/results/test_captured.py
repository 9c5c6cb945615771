"""Parsers on REAL output captured from vLLM's `vllm bench serve` and from lm-eval
(tests/data/captured/, see its README), plus proctor's own GSM8K and offline metrics.json."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from proctor.errors import ConfigError
from proctor.results import check, load_baseline, parse_path
from proctor.workloads.gsm8k import SCHEMA as GSM8K_SCHEMA
from proctor.workloads.gsm8k import read_results
from proctor.workloads.offline import run_offline

CAPTURED = Path(__file__).resolve().parents[1] / "data" / "captured"
BENCH_STDOUT = CAPTURED / "vllm-bench-serve" / "stdout.txt"
BENCH_JSON = CAPTURED / "vllm-bench-serve" / "result.json"
LM_EVAL_JSON = next((CAPTURED / "lm-eval").glob("results_*.json"))
LM_EVAL_TABLE = CAPTURED / "lm-eval" / "lm-eval-table.txt"


def test_vllm_printed_block_matches_its_own_result_json() -> None:
    printed = parse_path(BENCH_STDOUT)
    saved = parse_path(BENCH_JSON)
    assert printed.kind == "serving-summary" and printed.meta["flavour"] == "vllm"
    assert saved.kind == "vllm-json" and saved.meta["model_id"] == "smollm2"
    p, j = printed.values(), saved.values()
    assert len(p) == 23
    # vLLM prints each figure rounded to 2 decimals from the same numbers it saves.
    for name, value in p.items():
        assert name in j, name
        assert value == pytest.approx(j[name], abs=0.0051), name
    # std_* and the per-request arrays exist only in the JSON; arrays are not metrics.
    assert {n for n in j if n not in p} == {
        "std_ttft_ms",
        "std_tpot_ms",
        "std_itl_ms",
        "std_e2el_ms",
    }
    assert "latencies" not in j and "queue_times" not in j


def test_vllm_block_labels_of_this_version() -> None:
    v = parse_path(BENCH_STDOUT).values()
    # "Peak output token throughput (tok/s)" and "Peak concurrent requests" are new labels.
    assert v["max_output_tokens_per_s"] == 44.0 and v["max_concurrent_requests"] == 8.0
    assert v["output_throughput"] == 33.20  # not overwritten by the "Peak" line
    assert v["total_token_throughput"] == 99.60 and v["completed"] == 8 and v["failed"] == 0
    # The Namespace(...) line before the block (max_concurrency=4) is not parsed; the block is.
    assert v["max_concurrency"] == 4 and v["mean_tpot_ms"] == 104.43


def test_lm_eval_results_json_and_printed_table_agree() -> None:
    js = parse_path(LM_EVAL_JSON)
    table = parse_path(LM_EVAL_TABLE)
    assert js.kind == "lm-eval" and table.kind == "lm-eval-table"
    assert js.meta["model_name"] == "smollm2" and js.meta["n_shot"] == {"gsm8k": 3}
    assert js.values() == {
        "gsm8k_exact_match_flexible": 0.0,
        "gsm8k_exact_match_strict": 0.0,
        "gsm8k_n_samples": 5.0,
    }
    assert js.metrics["gsm8k_exact_match_flexible"].stderr == 0.0
    for name in ("gsm8k_exact_match_flexible", "gsm8k_exact_match_strict"):
        assert table.metrics[name].value == js.metrics[name].value
        assert table.metrics[name].stderr == js.metrics[name].stderr
    assert table.meta["n_shot"] == {"gsm8k": 3}


def test_proctor_gsm8k_metrics_json_as_written_by_the_workload(tmp_path: Path) -> None:
    # The document run_gsm8k writes, from the real lm-eval results.
    result = read_results(LM_EVAL_JSON)
    doc = {
        "schema": GSM8K_SCHEMA,
        "kind": "gsm8k",
        "status": "ok",
        "config": {"model": "smollm2", "num_fewshot": 3, "limit": 5},
        "metrics": result.to_metrics(),
        "lm_eval_version": result.lm_eval_version,
    }
    (tmp_path / "metrics.json").write_text(json.dumps(doc))
    parsed = parse_path(tmp_path)  # a run directory
    assert parsed.kind == "gsm8k" and parsed.meta["model"] == "smollm2"
    assert parsed.values() == {
        "gsm8k_exact_match_flexible": 0.0,
        "gsm8k_exact_match_strict": 0.0,
        "gsm8k_n_samples": 5.0,
    }
    assert parsed.metrics["gsm8k_exact_match_flexible"].stderr == 0.0
    # The accuracy baseline check sees the metric name it needs: 0.0 < 0.3 is a regression.
    entries = tmp_path / "models_accuracy.json"
    entries.write_text(json.dumps([{"model_name": "smollm2", "accuracy_threshold": 0.3}]))
    verdicts = check(parsed.metrics, load_baseline(entries), "smollm2")
    assert [v.status for v in verdicts] == ["regression"]


def test_failed_gsm8k_metrics_json_has_no_metrics(tmp_path: Path) -> None:
    path = tmp_path / "metrics.json"
    path.write_text(
        json.dumps(
            {
                "schema": GSM8K_SCHEMA,
                "kind": "gsm8k",
                "status": "failed",
                "error": "lm-eval exited with status 1",
                "metrics": {},
            }
        )
    )
    parsed = parse_path(path)
    assert parsed.kind == "gsm8k" and parsed.metrics == {} and parsed.meta["status"] == "failed"


def test_offline_metrics_json_from_a_real_offline_run(tmp_path: Path) -> None:
    # run_offline on a real process that prints vLLM's `bench throughput` line.
    line = "Throughput: 3.00 requests/s, 900.00 total tokens/s, 300.00 output tokens/s"
    result = run_offline(
        [sys.executable, "-c", f"print({line!r})"], tmp_path, engine="vllm", echo=False
    )
    assert result.status == "ok"
    parsed = parse_path(tmp_path)
    assert parsed.kind == "offline" and parsed.meta["engine"] == "vllm"
    assert parsed.values() == {
        "request_throughput": 3.0,
        "total_token_throughput": 900.0,
        "output_throughput": 300.0,
    }
    assert parsed.metrics["output_throughput"].unit == "tok/s"


def test_a_server_log_is_not_a_result() -> None:
    with pytest.raises(ConfigError, match="no 'Serving Benchmark Result' block"):
        parse_path(CAPTURED / "vllm-server" / "server.log")


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "proctor.cli.main", *args],
        text=True,
        capture_output=True,
        timeout=60,
        env={**os.environ},
    )


def test_cli_parse_of_captured_files() -> None:
    r = _cli("results", "parse", str(BENCH_STDOUT), "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["kind"] == "serving-summary"
    assert doc["metrics"]["max_output_tokens_per_s"]["value"] == 44.0
    table = _cli("results", "parse", str(LM_EVAL_TABLE), "--json")
    assert table.returncode == 0 and json.loads(table.stdout)["kind"] == "lm-eval-table"
    log = _cli("results", "parse", str(CAPTURED / "vllm-server" / "server.log"))
    assert log.returncode == 64 and "Serving Benchmark Result" in log.stderr

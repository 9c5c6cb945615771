"""`proctor results parse|check|compare` and `proctor bench`, exit codes as main() maps them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from proctor.cli import bench, results
from proctor.errors import ProctorError, exit_code_for
from tests.fixtures.fake_openai_server import FakeServer

SAMPLES = Path(__file__).parent / "samples"


def run(*args: str) -> tuple[int, str]:
    root = typer.Typer()
    root.add_typer(results.app, name="results")
    bench.register(root)
    res = CliRunner().invoke(root, list(args))
    if isinstance(res.exception, ProctorError):
        return exit_code_for(res.exception), res.output + res.exception.one_line()
    if res.exception and not isinstance(res.exception, SystemExit):
        raise res.exception
    return res.exit_code, res.output


def test_parse_json() -> None:
    code, out = run("results", "parse", str(SAMPLES / "lmeval_results.json"), "--json")
    assert code == 0
    doc = json.loads(out)
    assert doc["kind"] == "lm-eval"
    assert doc["metrics"]["gsm8k_exact_match_flexible"]["stderr"] == pytest.approx(0.005874, 1e-3)


def test_parse_table() -> None:
    code, out = run("results", "parse", str(SAMPLES / "vllm_bench_serve.log"))
    assert code == 0 and "total_token_throughput" in out and "8077" in out


def test_check_regression_exits_7() -> None:
    code, out = run(
        "results",
        "check",
        str(SAMPLES / "vllm_result.json"),
        "--baselines",
        str(SAMPLES / "perf_baseline.toml"),
    )
    assert code == 7 and "regression in p99_ttft_ms" in out


def test_check_within_noise_exits_0_and_json() -> None:
    code, out = run(
        "results",
        "check",
        str(SAMPLES / "lmeval_results.json"),
        "--baselines",
        str(SAMPLES / "models_accuracy.json"),
        "--model",
        "Kimi-K2.5-MXFP4",
        "--json",
    )
    assert code == 0
    doc = json.loads(out)
    assert doc["status"] == "pass" and doc["verdicts"][0]["metric"] == "gsm8k_exact_match_flexible"


def test_check_missing_metric_exits_6() -> None:
    # the DeepSeek entry asks for an MTP acceptance rate the lm-eval result does not have
    code, out = run(
        "results",
        "check",
        str(SAMPLES / "lmeval_results.json"),
        "--baselines",
        str(SAMPLES / "models_accuracy.json"),
    )
    assert code == 6 and "mtp_acceptance_rate" in out


def test_check_bad_baseline_exits_64(tmp_path: Path) -> None:
    bad = tmp_path / "b.toml"
    bad.write_text("nonsense = [")
    code, _ = run("results", "check", str(SAMPLES / "vllm_result.json"), "--baselines", str(bad))
    assert code == 64


def test_compare_json() -> None:
    code, out = run(
        "results",
        "compare",
        str(SAMPLES / "atom_benchmark.log"),
        str(SAMPLES / "vllm_bench_serve.log"),
        "--json",
    )
    assert code == 0
    rows = {r["metric"]: r for r in json.loads(out)}
    assert rows["total_token_throughput"]["assessment"] == "better"
    assert rows["max_output_tokens_per_s"]["assessment"] == "only_b"


def test_bench_command_writes_run_and_reads_back(tmp_path: Path) -> None:
    with FakeServer(itl=0.001) as srv:
        code, out = run(
            "bench",
            "--base-url",
            srv.base_url,
            "--output-dir",
            str(tmp_path),
            "--isl",
            "8",
            "--osl",
            "4",
            "--concurrency",
            "2",
            "--num-prompts",
            "6",
            "--num-warmups",
            "0",
            "--json",
        )
    assert code == 0
    assert json.loads(out)["metrics"]["completed"] == 6
    code, out = run("results", "parse", str(tmp_path), "--json")
    assert code == 0 and json.loads(out)["kind"] == "proctor-metrics"


def test_bench_command_bad_flag_and_all_failed(tmp_path: Path) -> None:
    code, out = run("bench", "--output-dir", str(tmp_path), "--concurrency", "0")
    assert code == 64 and "concurrency" in out
    with FakeServer(mode="http500") as srv:
        code, out = run(
            "bench",
            "--base-url",
            srv.base_url,
            "--output-dir",
            str(tmp_path),
            "--isl",
            "8",
            "--osl",
            "4",
            "--concurrency",
            "2",
            "--num-prompts",
            "4",
            "--num-warmups",
            "0",
        )
    assert code == 3 and "Serving Benchmark Result" in out

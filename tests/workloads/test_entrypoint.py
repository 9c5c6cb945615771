"""`python -m proctor.workloads.loadgen` as the run wrapper executes it: files and exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from proctor.results import parse_string
from tests.fixtures.fake_openai_server import free_port
from tests.workloads.conftest import FakeProcess

pytestmark = pytest.mark.timeout(120)

SMALL = [
    "--isl",
    "16",
    "--osl",
    "8",
    "--concurrency",
    "4",
    "--prompt-multiplier",
    "3",
    "--no-progress",
]


def loadgen(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "proctor.workloads.loadgen", *args],
        capture_output=True,
        text=True,
        timeout=90,
    )


def started(fake_process: Callable[..., FakeProcess], *args: str) -> FakeProcess:
    p = fake_process("--no-access-log", *args)
    p.wait_for("Application startup complete.")
    return p


def test_completed_run_writes_metrics_and_details(
    fake_process: Callable[..., FakeProcess], tmp_path: Path
) -> None:
    srv = started(fake_process, "--itl", "0.001")
    out = tmp_path / "run"
    r = loadgen(
        "--port",
        str(srv.port),
        "--output-dir",
        str(out),
        "--save-detailed",
        "--percentiles",
        "50,90,99",
        "--goodput",
        "ttft:1000",
        *SMALL,
    )
    assert r.returncode == 0, r.stderr
    doc = json.loads((out / "metrics.json").read_text())
    assert doc["schema"] == "proctor.bench.metrics" and doc["schema_version"] == 1
    assert doc["config"]["concurrency"] == 4 and doc["config"]["request_rate"] == "inf"
    assert "api_key" not in doc["config"]
    m = doc["metrics"]
    assert m["completed"] == 12 and m["failed"] == 0
    assert {"p50_ttft_ms", "p90_itl_ms", "p99_e2el_ms", "request_goodput"} <= set(m)
    assert doc["warmup"] == {"count": 8, "failed": 0}  # 2 x concurrency
    assert doc["prompt_lengths"]["source"] == "server"
    assert len(doc["prompt_lengths"]["actual_by_request"]) == 12
    lines = (out / "requests.jsonl").read_text().splitlines()
    assert len(lines) == 20 and json.loads(lines[0])["warmup"] is True
    # The printed block is vLLM's and reads back with the same numbers.
    assert "============ Serving Benchmark Result ============" in r.stdout
    back = parse_string(r.stdout)
    assert back.metrics["completed"].value == 12
    assert back.metrics["total_token_throughput"].value == pytest.approx(
        m["total_token_throughput"], abs=0.01
    )


def test_partial_failures_exit_3_with_count_and_reason(
    fake_process: Callable[..., FakeProcess], tmp_path: Path
) -> None:
    srv = started(fake_process, "--mode", "http500", "--fault-every", "3")
    r = loadgen(
        "--port", str(srv.port), "--output-dir", str(tmp_path), "--num-warmups", "0", *SMALL
    )
    assert r.returncode == 3, r.stderr
    assert "4 of 12 requests failed" in r.stderr and "HTTP 500" in r.stderr
    assert "Result: FAILED: 4 of 12 requests failed" in r.stdout
    doc = json.loads((tmp_path / "metrics.json").read_text())
    assert doc["failures"]["count"] == 4 and doc["failures"]["by_reason"] == {"http_error": 4}
    assert doc["failures"]["examples"][0]["status"] == 500
    assert doc["verdict"]["ok"] is False and doc["verdict"]["failed"] == 4
    assert doc["verdict"]["first_reasons"][0].startswith("http_error: HTTP 500")
    assert doc["metrics"]["workload_failed"] == 1
    assert doc["metrics"]["error_rate"] == pytest.approx(4 / 12)


def test_partial_failures_within_max_error_rate_exit_0(
    fake_process: Callable[..., FakeProcess], tmp_path: Path
) -> None:
    srv = started(fake_process, "--mode", "http500", "--fault-every", "3")
    r = loadgen(
        "--port",
        str(srv.port),
        "--output-dir",
        str(tmp_path),
        "--num-warmups",
        "0",
        "--max-error-rate",
        "0.34",
        *SMALL,
    )
    assert r.returncode == 0, r.stderr
    assert "Result: ok (4 of 12 requests failed" in r.stdout
    doc = json.loads((tmp_path / "metrics.json").read_text())
    assert doc["verdict"]["ok"] is True and doc["metrics"]["workload_failed"] == 0
    assert doc["config"]["max_error_rate"] == 0.34


def test_every_request_failed_exits_3(
    fake_process: Callable[..., FakeProcess], tmp_path: Path
) -> None:
    srv = started(fake_process, "--mode", "http429")
    r = loadgen("--port", str(srv.port), "--output-dir", str(tmp_path), *SMALL)
    assert r.returncode == 3
    assert "no request succeeded (12 of 12 failed)" in r.stderr and "rate_limited=12" in r.stderr
    assert json.loads((tmp_path / "metrics.json").read_text())["metrics"]["completed"] == 0


def test_unreachable_exits_69(tmp_path: Path) -> None:
    r = loadgen("--port", str(free_port()), "--output-dir", str(tmp_path), *SMALL)
    assert r.returncode == 69
    assert "cannot reach the server" in r.stderr


def test_bad_flag_exits_64(tmp_path: Path) -> None:
    r = loadgen("--port", "1", "--output-dir", str(tmp_path), "--range-ratio", "1.5")
    assert r.returncode == 64
    assert "range_ratio" in r.stderr


def test_api_key_is_sent_and_never_written(
    fake_process: Callable[..., FakeProcess], tmp_path: Path
) -> None:
    secret = "sk-test-DO-NOT-LEAK-1234"
    srv = started(fake_process, "--api-key", secret)
    out = tmp_path / "run"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "proctor.workloads.loadgen",
            "--port",
            str(srv.port),
            "--output-dir",
            str(out),
            "--save-detailed",
            *SMALL,
        ],
        capture_output=True,
        text=True,
        timeout=90,
        env={**os.environ, "OPENAI_API_KEY": secret},
    )
    assert r.returncode == 0, r.stderr  # the server refuses requests without the key
    for f in out.iterdir():
        assert secret not in f.read_text()
    assert secret not in r.stdout + r.stderr


def test_workers_merge_records(fake_process: Callable[..., FakeProcess], tmp_path: Path) -> None:
    srv = started(fake_process, "--itl", "0.001")
    r = loadgen(
        "--port",
        str(srv.port),
        "--output-dir",
        str(tmp_path),
        "--workers",
        "2",
        "--save-detailed",
        *SMALL,
    )
    assert r.returncode == 0, r.stderr
    doc = json.loads((tmp_path / "metrics.json").read_text())
    assert doc["metrics"]["completed"] == 12 and doc["workers"] == 2
    recs = [json.loads(x) for x in (tmp_path / "requests.jsonl").read_text().splitlines()]
    assert {x["worker"] for x in recs} == {0, 1}
    assert sorted(x["index"] for x in recs) == list(range(20))
    assert doc["metrics"]["peak_concurrency"] <= 4


def test_a_typed_request_runs_the_same_bench_and_a_bad_one_is_64(
    fake_process: Callable[..., FakeProcess], tmp_path: Path
) -> None:
    """`proctor bench` hands the load generator its validated config as one JSON request."""
    srv = started(fake_process)
    request = {
        "base_url": f"http://127.0.0.1:{srv.port}",
        "isl": 16,
        "osl": 8,
        "concurrency": 2,
        "num_prompts": 4,
        "num_warmups": 0,
        "request_rate": "inf",
        "progress": False,
    }
    out = tmp_path / "run"
    r = loadgen("--config-json", json.dumps(request), "--output-dir", str(out))
    assert r.returncode == 0, r.stderr
    config = json.loads((out / "metrics.json").read_text())["config"]
    assert (config["isl"], config["num_prompts"], config["request_rate"]) == (16, 4, "inf")
    bad = loadgen("--config-json", json.dumps({**request, "isl": -1}), "--output-dir", str(out))
    assert bad.returncode == 64 and "invalid --config-json: isl:" in bad.stderr
    assert loadgen("--config-json", "[1]", "--output-dir", str(out)).returncode == 64


def test_proctor_bench_records_the_typed_request_it_ran(
    fake_process: Callable[..., FakeProcess], isolated_runs: Path
) -> None:
    from tests.helpers import only_run, proctor

    srv = started(fake_process)
    r = proctor(
        "bench",
        "--port",
        str(srv.port),
        "--isl",
        "16",
        "--osl",
        "8",
        "--concurrency",
        "2",
        "--num-prompts",
        "4",
        "--num-warmups",
        "0",
        "--json",
    )
    assert r.returncode == 0, r.stderr
    record = json.loads((only_run(isolated_runs) / "record.json").read_text())
    argv = record["argv"]
    assert argv[1:4] == ["-m", "proctor.jobs", "run"] and len(argv) == 5
    sent = json.loads(argv[4])
    assert (sent["isl"], sent["concurrency"], sent["num_prompts"]) == (16, 2, 4)
    assert "api_key" not in sent

"""Server /metrics during a bench: parsed, written as a time series, reconciled with the client;
a server without /metrics is a note, never an error. Real fake-server processes, real CLI."""

from __future__ import annotations

import csv
import json
import math
from datetime import datetime
from pathlib import Path

import pytest

from proctor.monitors.prom import histogram_quantile, histogram_window, parse_exposition
from proctor.monitors.server_metrics import ServerMetricsScraper
from proctor.store.db import Store
from tests.cli.test_serve_flow import fake_engine  # noqa: F401 - fixture
from tests.fixtures.fake_openai_server import FakeServer
from tests.helpers import only_run, proctor

pytestmark = pytest.mark.timeout(180)

# Lines as vLLM 0.32 writes them (names, label order, _created samples, other prefixes).
VLLM_BODY = """\
# HELP python_gc_objects_collected_total Objects collected during gc
# TYPE python_gc_objects_collected_total counter
python_gc_objects_collected_total{generation="0"} 1234.0
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="smollm2"} 3.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="smollm2"} 0.25
# TYPE vllm:generation_tokens counter
vllm:generation_tokens_total{engine="0",model_name="smollm2"} 640.0
vllm:generation_tokens_created{engine="0",model_name="smollm2"} 1.7e9
# TYPE vllm:request_prompt_tokens histogram
vllm:request_prompt_tokens_bucket{engine="0",le="1.0",model_name="smollm2"} 0.0
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1",model_name="smollm2"} 2.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.5",model_name="smollm2"} 8.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="smollm2"} 10.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="smollm2"} 3.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="smollm2"} 10.0
"""

SMALL = [
    "--isl",
    "8",
    "--osl",
    "16",
    "--concurrency",
    "4",
    "--num-prompts",
    "40",
    "--num-warmups",
    "4",
    "--tokenizer-mode",
    "approx",
    "--gpu-sample",
    "0",
]


def test_parse_keeps_engine_series_only_and_histograms_work() -> None:
    values = parse_exposition(VLLM_BODY)
    names = {name for name, _ in values}
    assert "vllm:generation_tokens_total" in names and "vllm:kv_cache_usage_perc" in names
    assert not any(n.startswith("python_") or n.endswith("_created") for n in names)
    assert not any("request_prompt_tokens" in n for n in names)  # not in KEEP: never parsed
    found = histogram_window({}, values, "vllm:time_to_first_token_seconds")
    assert found is not None
    count, total, buckets = found
    assert (count, total) == (10.0, 3.0)
    assert buckets == [(0.1, 2.0), (0.5, 8.0), (math.inf, 10.0)]
    # rank 5 of 10 lies in (0.1, 0.5] holding ranks 3..8: 0.1 + 0.4 * 3/6
    assert histogram_quantile(0.5, buckets) == pytest.approx(0.3)
    assert histogram_quantile(0.99, buckets) == 0.5  # in +Inf: the highest finite bound


def test_fast_reader_agrees_with_prometheus_client_and_falls_back_to_it() -> None:
    from proctor.monitors import prom

    lines = [line for line in VLLM_BODY.splitlines() if prom._wanted(line)]
    fast = prom._fast(lines)
    assert fast is not None and fast == {
        (s.name, ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))): s.value
        for f in prom.text_string_to_metric_families("\n".join(lines) + "\n")
        for s in f.samples
        if not s.name.endswith("_created")
    }
    escaped = 'vllm:num_requests_running{model_name="a\\"b"} 2.0\n'  # an escaped quote
    assert prom._fast(escaped.splitlines()) is None
    assert parse_exposition(escaped) == {("vllm:num_requests_running", 'model_name="a"b"'): 2.0}


def test_bench_writes_server_series_and_agrees_with_client(isolated_runs: Path) -> None:
    with FakeServer(itl=0.002) as srv:
        r = proctor("bench", "--base-url", srv.base_url, *SMALL)
    assert r.returncode == 0, r.stderr
    run = only_run(isolated_runs)
    rows = list(csv.DictReader((run / "server_metrics.csv").open()))
    names = {row["name"] for row in rows}
    assert {
        "vllm:num_requests_running",
        "vllm:generation_tokens_total",
        "vllm:time_to_first_token_seconds_count",
    } <= names
    assert all(float(row["t"]) > 1.6e9 for row in rows)  # unix seconds
    doc = json.loads((run / "metrics.json").read_text())
    server = doc["server"]
    assert server["available"] and server["engine"] == "vllm"
    client_tokens = doc["metrics"]["total_output_tokens"]
    assert server["generation_tokens"] == client_tokens  # the same window, counted by both
    assert server["ttft_ms"]["count"] == 40 and server["e2el_ms"]["count"] == 40
    assert server["reconcile"]["ok"] is True
    assert server["reconcile"]["tokens"]["client"] == client_tokens
    assert (
        f"Server metrics (vllm, {server['scrapes']} scrapes): {client_tokens} generated" in r.stdout
    )
    assert "Server/client disagree" not in r.stdout
    assert "server_metrics.csv" in (run / "manifest.sha256").read_text()


def test_server_that_counts_differently_is_reported(tmp_path: Path) -> None:
    with FakeServer(itl=0.002, metrics_token_scale=2.0) as srv:
        r = proctor(
            "bench", "--base-url", srv.base_url, "--output-dir", str(tmp_path / "o"), *SMALL
        )
    assert r.returncode == 0, r.stderr  # a disagreement is evidence, not a failed bench
    doc = json.loads((tmp_path / "o" / "metrics.json").read_text())
    rec = doc["server"]["reconcile"]
    assert rec["ok"] is False and rec["tokens"]["server"] == 2 * rec["tokens"]["client"]
    assert "Server/client disagree: server counted" in r.stdout
    assert doc["validity"]["checks"]["server"]["ok"] is False


def test_server_without_metrics_is_a_note_not_an_error(isolated_runs: Path) -> None:
    with FakeServer(itl=0.001, metrics=False) as srv:
        r = proctor("bench", "--base-url", srv.base_url, *SMALL)
    assert r.returncode == 0, r.stderr
    run = only_run(isolated_runs)
    doc = json.loads((run / "metrics.json").read_text())
    assert doc["server"]["available"] is False and "HTTP 404" in doc["server"]["note"]
    assert doc["metrics"]["completed"] == 40
    assert "Server metrics: none (the server has no /metrics (HTTP 404" in r.stdout
    assert not (run / "server_metrics.csv").exists()


def test_hanging_metrics_costs_the_bench_a_few_seconds_at_most(tmp_path: Path) -> None:
    with FakeServer(itl=0.002, metrics_hang=True) as srv:
        r = proctor(
            "bench", "--base-url", srv.base_url, "--output-dir", str(tmp_path / "o"), *SMALL
        )
    assert r.returncode == 0, r.stderr
    doc = json.loads((tmp_path / "o" / "metrics.json").read_text())
    assert doc["server"]["available"] is False
    assert "gave up after 3 failed scrapes" in doc["server"]["note"], doc["server"]
    assert doc["metrics"]["completed"] == 40 and doc["metrics"]["duration"] < 2.0
    # The bench's own span, not the CLI's start-up (imports take seconds on a loaded machine):
    # three 2 s timeouts, then no more scrapes.
    span = datetime.fromisoformat(doc["finished_at"]) - datetime.fromisoformat(doc["started_at"])
    assert span.total_seconds() < 20, span


def test_unreachable_metrics_is_a_note_never_an_exception(tmp_path: Path) -> None:
    scraper = ServerMetricsScraper(
        "http://127.0.0.1:9", tmp_path / "s.csv", interval_s=0.05, timeout_s=0.5
    )
    scraper.start()
    assert scraper.mark("start", window=True) is None
    scraper.stop()
    summary = scraper.summary("start", "end")
    assert summary["available"] is False and summary["errors"] >= 1
    assert "gave up after 3 failed scrapes" in summary["note"] and "ConnectError" in summary["note"]
    assert not (tmp_path / "s.csv").exists()


def test_store_holds_validity_and_server_run_is_in_store(isolated_runs: Path) -> None:
    with FakeServer(itl=0.001) as srv:
        r = proctor("bench", "--base-url", srv.base_url, *SMALL)
    assert r.returncode == 0, r.stderr
    run = only_run(isolated_runs)
    with Store(isolated_runs / "proctor.sqlite") as store:
        metrics = {m["name"]: m["value"] for m in store.metrics(run.name)}
    assert metrics["valid"] == 0  # 40 requests in well under 10 s: INVALID by default


def test_flow_scrapes_its_server_from_ready_to_teardown(
    fake_engine: int,
    isolated_runs: Path,
) -> None:
    port = fake_engine
    body = json.dumps({"model": "m", "prompt": "a b c", "max_tokens": 40, "stream": True})
    work = (
        f"bash -c 'for i in 1 2 3; do curl -sN http://127.0.0.1:{port}/v1/completions "
        f"-d '\"'\"'{body}'\"'\"' >/dev/null; sleep 0.5; done'"
    )
    result = proctor(
        "flow",
        "--engine",
        "fake",
        "--model",
        "m",
        "--port",
        str(port),
        "--poll",
        "1s",
        "--workload-cmd",
        work,
        "--json",
        "--",
        "--itl",
        "0.01",
    )
    assert result.returncode == 0, result.stderr
    flow = json.loads(result.stdout)
    flow_dir = isolated_runs / flow["run_id"]
    rows = list(csv.DictReader((flow_dir / "server_metrics.csv").open()))
    tokens = [float(r["value"]) for r in rows if r["name"] == "vllm:generation_tokens_total"]
    assert tokens[0] == 0 and tokens[-1] == 120  # three requests of 40 tokens, seen growing
    record = json.loads((flow_dir / "record.json").read_text())
    assert record["server_metrics"]["available"] is True
    assert record["server_metrics"]["generation_tokens"] == 120
    assert "server_metrics.csv" in (flow_dir / "manifest.sha256").read_text()
    out = isolated_runs.parent / "flow.html"
    made = proctor("report", flow["run_id"], "-o", str(out), "--json")
    assert made.returncode == 0, made.stderr
    timeline = {f["id"]: f for f in json.loads(made.stdout)["figures"]}["timeline"]
    assert timeline["points"] > 0 and "server: running requests" in out.read_text()

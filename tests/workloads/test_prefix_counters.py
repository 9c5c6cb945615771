"""Reading the prefix-cache counters from Prometheus text, on what real vLLM printed."""

from __future__ import annotations

from pathlib import Path

import pytest

from proctor.workloads.loadgen.prefix_counters import Reading, achieved, merge, reading_of

CAPTURED = Path(__file__).resolve().parents[1] / "data" / "captured" / "vllm-server" / "metrics.txt"


def test_captured_vllm_metrics_give_the_counters() -> None:
    # vLLM 0.32 for CPU, SmolLM2, after a few random prompts: tokens queried, none hit.
    assert reading_of(CAPTURED.read_text()) == Reading(queries=7654.0, hits=0.0)


def test_counters_are_summed_over_label_sets_and_older_names_read() -> None:
    text = (
        "# TYPE vllm:prefix_cache_queries counter\n"
        'vllm:prefix_cache_queries_total{engine="0",model_name="m"} 100.0\n'
        'vllm:prefix_cache_queries_total{engine="1",model_name="m"} 50.0\n'
        'vllm:prefix_cache_hits_total{engine="0",model_name="m"} 30.0\n'
        'vllm:prefix_cache_hits_total{engine="1",model_name="m"} 15.0\n'
    )
    assert reading_of(text) == Reading(150.0, 45.0)
    old = "vllm:gpu_prefix_cache_queries_total 10\nvllm:gpu_prefix_cache_hits_total 4\n"
    assert reading_of(old) == Reading(10.0, 4.0)
    assert reading_of("vllm:num_requests_running 0\n") is None


def test_rate_is_the_increase_over_the_window() -> None:
    window = achieved(Reading(1000.0, 100.0), Reading(3000.0, 900.0))
    assert window["hit_rate"] == 0.4 and window["queries_tokens"] == 2000.0
    assert achieved(None, Reading(1.0, 1.0))["hit_rate"] is None
    both = merge([window, achieved(Reading(0.0, 0.0), Reading(2000.0, 0.0))])
    assert both["hit_rate"] == 0.2 and both["per_repeat"] == [0.4, 0.0]


def test_a_metrics_endpoint_that_never_answers_is_read_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A real listener that reads the request and never answers: each read would cost a bench
    # the whole timeout, twice per repeat. After one, the reader does not knock again.
    import asyncio
    import socket
    import threading

    from proctor.workloads.loadgen import prefix_counters
    from proctor.workloads.loadgen.config import BenchConfig
    from proctor.workloads.loadgen.runner import PrefixReader

    monkeypatch.setattr(prefix_counters, "SCRAPE_TIMEOUT_S", 0.5)
    listener = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                accepted.append(listener.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    port = listener.getsockname()[1]
    reader = PrefixReader(BenchConfig(base_url=f"http://127.0.0.1:{port}"))
    try:
        assert asyncio.run(reader.read()) is None and reader.unanswered
        assert asyncio.run(reader.read()) is None
        assert len(accepted) == 1
        # The scraper giving up on /metrics stops the reads too, before any is tried.
        quiet = PrefixReader(BenchConfig(base_url=f"http://127.0.0.1:{port}"), lambda: True)
        assert asyncio.run(quiet.read()) is None and len(accepted) == 1
    finally:
        listener.close()
        for conn in accepted:
            conn.close()

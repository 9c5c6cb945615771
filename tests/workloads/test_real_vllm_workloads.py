"""Datasets against the real vLLM for CPU (SmolLM2): the prefix-cache hit rate the server
achieved, read from its own counters, for shared-prefix and multi-turn workloads."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest

from proctor.workloads.loadgen.config import BenchConfig
from proctor.workloads.loadgen.runner import BenchResult, result_document, run_benchmark
from tests.infra.engines import EngineServer, vllm_server  # noqa: F401

pytestmark = [pytest.mark.slow, pytest.mark.engine, pytest.mark.timeout(600)]

DATA = Path(__file__).resolve().parents[1] / "data" / "datasets"


def bench(server: EngineServer, **kw: Any) -> BenchResult:
    args: dict[str, Any] = dict(
        base_url=server.base_url,
        model=server.model,
        osl=4,
        concurrency=1,
        num_warmups=1,
        range_ratio=0.0,
        progress=False,
        idle_timeout_s=120.0,
        request_timeout_s=300.0,
    )
    args.update(kw)
    return run_benchmark(BenchConfig(**args))


def test_vllm_shared_prefix_hit_rate_from_its_counters(vllm_server: EngineServer) -> None:
    # One request at a time: each group's first prompt is prefilled before the next arrives.
    res = bench(
        vllm_server,
        dataset="shared-prefix",
        isl=256,
        num_prompts=8,
        prefix_groups=2,
        prefix_hit_rate=0.5,
    )
    assert res.metrics.completed == 8, [r.error for r in res.measured]
    info = result_document(res)["dataset"]
    expected, cache = info["expected_hit_rate"], info["prefix_cache"]
    assert expected == pytest.approx(0.5, abs=0.02)
    assert cache["source"].startswith("server /metrics")
    # vLLM counts every prompt token of the measured phase, and hits only whole cached blocks
    # of the shared prefix: some, never more than a perfect cache.
    assert cache["queries_tokens"] == sum(r.prompt_tokens or 0 for r in res.measured)
    assert 0.2 < cache["hit_rate"] <= expected + 0.01
    print(
        f"vLLM CPU shared-prefix: expected {expected:.3f}, achieved {cache['hit_rate']:.3f} "
        f"({cache['hits_tokens']:.0f}/{cache['queries_tokens']:.0f} tokens)"
    )
    # A prefix of whole blocks (128 tokens on vLLM for CPU) is hit in full: achieved = expected.
    res = bench(
        vllm_server,
        dataset="shared-prefix",
        isl=256,
        num_prompts=8,
        prefix_groups=2,
        prefix_len=128,
        seed=1,
    )
    info = result_document(res)["dataset"]
    assert info["prefix_len"] == 128
    assert info["prefix_cache"]["hit_rate"] == pytest.approx(info["expected_hit_rate"], abs=0.01)
    print(
        f"vLLM CPU shared-prefix, 128-token prefix: expected {info['expected_hit_rate']:.3f}, "
        f"achieved {info['prefix_cache']['hit_rate']:.3f}"
    )


def test_vllm_multi_turn_sends_the_history(vllm_server: EngineServer) -> None:
    res = bench(vllm_server, dataset=f"multi-turn:{DATA / 'conversations.jsonl'}", osl=8)
    assert res.metrics.completed == 6, [r.error for r in res.measured]
    doc = result_document(res)["dataset"]
    assert [t["requests"] for t in doc["per_turn"]] == [3, 2, 1]
    first = sorted((r for r in res.measured if r.conversation == 0), key=lambda r: r.turn or 0)
    # vLLM counted what was planned: each turn's prompt is the whole history, so it grows.
    assert [r.prompt_tokens for r in first] == [r.prompt_len for r in first]
    assert first[0].prompt_len < first[1].prompt_len < first[2].prompt_len
    # Each turn's output length is its dataset reply's token length (ignore_eos holds it).
    assert [r.output_tokens for r in first] == [r.expected_output_len for r in first]
    for a, b in itertools.pairwise(first):
        assert b.start_time >= a.end_time
    # These histories are shorter than one cache block (128 tokens here): nothing to hit,
    # and the server's counters say so rather than proctor guessing.
    print(f"vLLM CPU multi-turn: prefix cache {doc['prefix_cache']}")
    assert doc["prefix_cache"]["hit_rate"] is not None


def test_vllm_trace_blocks_are_the_trace_lengths_and_hit_as_the_trace_shares(
    vllm_server: EngineServer, tmp_path: Path
) -> None:
    """A Mooncake trace against the real tokenizer and prefix cache: every prompt is exactly its
    record's input length as vLLM counts it (the one-token words), and vLLM's counters hit the
    shared 512-token blocks (whole 128-token blocks of its own) as a perfect cache would."""
    import json

    records = [
        (0, 1100, [1, 2, 3]),
        (100, 1300, [1, 2, 4]),
        (200, 700, [1, 5]),
        (300, 1500, [1, 2, 3, 6]),
    ]
    trace = tmp_path / "t.jsonl"
    trace.write_text(
        "".join(
            json.dumps({"timestamp": t, "input_length": n, "output_length": 3, "hash_ids": ids})
            + "\n"
            for t, n, ids in records
        )
    )
    res = bench(vllm_server, dataset=f"trace:{trace}", isl=64, tokenizer_mode="server")
    assert res.metrics.completed == 4, [r.error for r in res.measured]
    assert [r.prompt_tokens for r in res.measured] == [n for _, n, _ in records]
    doc = result_document(res)
    assert doc["conformance"]["input"]["judged"] and doc["conformance"]["input"]["off"] == 0
    # Whole 512-token blocks sent before, in order: [1, 2] (1024), [1] (512), [1, 2] (1024);
    # block 3 of the last was partial in the first (76 tokens): never cached.
    cache = doc["dataset"]["prefix_cache"]
    assert doc["dataset"]["expected_hit_rate"] == pytest.approx(2560 / 4600)
    assert cache["hits_tokens"] == 2560 and cache["queries_tokens"] == 4600
    print(f"vLLM CPU trace: hit {cache['hits_tokens']:.0f} of {cache['queries_tokens']:.0f}")


def test_vllm_logs_the_request_id_proctor_sent(vllm_server: EngineServer) -> None:
    # vLLM takes x-request-id as its request id and, with --enable-log-requests, logs it:
    # the id recorded in requests.jsonl finds the request in the server's log.
    res = bench(vllm_server, isl=8, num_prompts=3, num_warmups=0)
    assert all(r.success for r in res.records)
    log = vllm_server.log_path.read_text(errors="replace")
    for r in res.records:
        assert r.request_id and f"Received request cmpl-{r.request_id}-0:" in log

"""proctor's client against real engines serving SmolLM2 (vLLM for CPU, transformers serve)."""

from __future__ import annotations

from typing import Any

import pytest

from proctor.workloads.loadgen.config import BenchConfig
from proctor.workloads.loadgen.runner import BenchResult, run_benchmark
from tests.infra.engines import EngineServer, tf_server, vllm_server  # noqa: F401

pytestmark = [pytest.mark.slow, pytest.mark.engine, pytest.mark.timeout(600)]


def bench(server: EngineServer, **kw: Any) -> BenchResult:
    args: dict[str, Any] = dict(
        base_url=server.base_url,
        model=server.model,
        isl=32,
        osl=8,
        concurrency=2,
        num_prompts=4,
        num_warmups=1,
        range_ratio=0.5,
        progress=False,
        idle_timeout_s=120.0,
        request_timeout_s=300.0,
    )
    args.update(kw)
    return run_benchmark(BenchConfig(**args))


def test_vllm_completions_exact_lengths(vllm_server: EngineServer) -> None:
    res = bench(vllm_server)
    assert res.metrics.completed == 4, [r.error for r in res.measured]
    assert res.prompt_source == "server"  # vLLM's /tokenize and /detokenize
    for r in res.measured:
        assert r.prompt_tokens == r.prompt_len  # what we planned is what vLLM counted
        assert r.output_tokens == r.expected_output_len  # ignore_eos honoured, usage read
        assert r.output_tokens_source == "usage" and r.saw_done
        assert r.ttft > 0 and r.latency >= r.ttft
    assert res.metrics.stats_ms["tpot"].mean > 0


def test_vllm_chat(vllm_server: EngineServer) -> None:
    res = bench(vllm_server, endpoint="chat", num_prompts=2, num_warmups=0)
    assert res.metrics.completed == 2, [r.error for r in res.measured]
    for r in res.measured:
        assert r.output_tokens == r.expected_output_len
        # vLLM's role-only opening chunk is no token: not counted, no TTFT, no ITL sample.
        assert r.chunks == r.output_tokens and len(r.itl) == r.output_tokens - 1
        assert r.prompt_tokens is not None and r.prompt_tokens > r.prompt_len  # chat template


def test_transformers_serve_strictness_is_recorded(tf_server: EngineServer) -> None:
    # It rejects the unknown ignore_eos field: a recorded failure, not a crash.
    rejected = bench(tf_server, num_prompts=2, num_warmups=0)
    assert rejected.metrics.completed == 0
    assert {r.status for r in rejected.measured} == {422}
    # Without it, streams succeed although they carry no data: [DONE].
    ok = bench(tf_server, ignore_eos=False, num_prompts=2, num_warmups=0)
    assert ok.metrics.completed == 2, [r.error for r in ok.measured]
    assert ok.prompt_source == "approx"  # no /tokenize there
    assert not any(r.saw_done for r in ok.measured)

"""The client against each fault mode of the fake server: failures recorded, never a hang."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from proctor.errors import TargetUnavailable, UsageError, WorkloadFailed
from proctor.workloads.loadgen.config import BenchConfig
from proctor.workloads.loadgen.runner import BenchResult, check_outcome, run_benchmark
from tests.fixtures.fake_openai_server import FakeServer, free_port

pytestmark = pytest.mark.timeout(60)


def bench(url: str, **kw: Any) -> BenchResult:
    args: dict[str, Any] = dict(
        base_url=url,
        isl=16,
        osl=8,
        concurrency=4,
        num_prompts=8,
        num_warmups=0,
        range_ratio=0.0,
        progress=False,
        idle_timeout_s=5.0,
        request_timeout_s=20.0,
    )
    args.update(kw)
    return run_benchmark(BenchConfig(**args))


Fake = Callable[..., FakeServer]


def test_normal_stream_counts_usage_and_exact_prompts(fake: Fake) -> None:
    s = fake(itl=0.002)
    res = bench(s.base_url, num_warmups=4, range_ratio=0.5)
    assert res.metrics.completed == 8 and res.metrics.failed == 0
    assert len(res.records) == 12 and sum(r.warmup for r in res.records) == 4
    assert res.prompt_source == "server"
    for r in res.measured:
        assert r.success and r.saw_done and r.output_tokens_source == "usage"
        assert r.output_tokens == r.expected_output_len
        assert r.prompt_tokens == r.prompt_len  # the server counted what we planned
        assert len(r.itl) == r.output_tokens - 1 and r.ttft > 0
    lens = {r.prompt_len for r in res.measured}
    assert len(lens) > 1 and all(8 <= n <= 24 for n in lens)  # range ratio 0.5 around 16
    check_outcome(res)  # does not raise


def test_same_seed_same_prompts(fake: Fake) -> None:
    s = fake()
    a = bench(s.base_url, seed=3, range_ratio=0.5)
    b = bench(s.base_url, seed=3, range_ratio=0.5)
    c = bench(s.base_url, seed=4, range_ratio=0.5)
    assert [r.prompt_len for r in a.measured] == [r.prompt_len for r in b.measured]
    assert [r.expected_output_len for r in a.measured] != [
        r.expected_output_len for r in c.measured
    ] or [r.prompt_len for r in a.measured] != [r.prompt_len for r in c.measured]


def test_slow_first_token_is_measured(fake: Fake) -> None:
    s = fake(mode="slow-first-token", slow_ttft=0.6)
    res = bench(s.base_url, num_prompts=4)
    assert res.metrics.completed == 4
    assert all(r.ttft >= 0.6 for r in res.measured)
    assert res.metrics.stats_ms["ttft"].mean >= 600


def test_slow_first_token_beyond_idle_timeout_fails_as_timeout(fake: Fake) -> None:
    s = fake(mode="slow-first-token", slow_ttft=15.0)
    t0 = time.monotonic()
    res = bench(s.base_url, num_prompts=4, idle_timeout_s=0.4)
    assert time.monotonic() - t0 < 10  # not the 15 s first token (slack for a loaded machine)
    assert {r.reason for r in res.measured} == {"timeout"}
    with pytest.raises(WorkloadFailed):
        check_outcome(res)


def test_mid_stream_disconnect(fake: Fake) -> None:
    s = fake(mode="disconnect", fault_every=2)
    res = bench(s.base_url)
    bad = [r for r in res.measured if not r.success]
    assert len(bad) == 4 and res.metrics.completed == 4
    assert {r.reason for r in bad} == {"disconnect"}
    assert all(r.error for r in bad)
    # The tokens that came before the cut count, as they always did (the raw client parses
    # a stream when it ends, and a failed stream first parses what it held).
    assert all(r.chunks >= 1 and r.ttft > 0 and len(r.itl) == r.chunks - 1 for r in bad)
    assert res.metrics.failures_by_reason == {"disconnect": 4}
    # Half the requests failed: by default that fails the benchmark, with the count and reason.
    with pytest.raises(WorkloadFailed, match=r"4 of 8 requests failed .*first: disconnect"):
        check_outcome(res)
    verdict = res.verdict()
    assert (verdict.ok, verdict.failed, verdict.total, verdict.error_rate) == (False, 4, 8, 0.5)
    allowed = bench(s.base_url, max_error_rate=0.5)
    assert allowed.metrics.failed == 4
    check_outcome(allowed)  # within --max-error-rate 0.5: a result


@pytest.mark.parametrize(
    ("mode", "status", "reason"), [("http500", 500, "http_error"), ("http429", 429, "rate_limited")]
)
def test_http_errors(fake: Fake, mode: str, status: int, reason: str) -> None:
    s = fake(mode=mode)
    res = bench(s.base_url)
    assert res.metrics.completed == 0
    for r in res.measured:
        assert (r.status, r.reason) == (status, reason)
        assert f"HTTP {status}" in r.error and "injected" in r.error
    with pytest.raises(WorkloadFailed, match=reason):
        check_outcome(res)


def test_malformed_sse(fake: Fake) -> None:
    s = fake(mode="malformed-sse")
    res = bench(s.base_url)
    assert {r.reason for r in res.measured} == {"malformed_sse"}
    assert all("not JSON" in r.error for r in res.measured)


@pytest.mark.parametrize(
    "chunk",
    [
        '{"choices":"x"}',
        '{"choices":[null]}',
        '{"choices":[1]}',
        '{"choices":{"text":"a"}}',
        "null",
        "[1, 2]",
        '"text"',
        '{"usage":[]}',
        '{"choices":[],"usage":{"completion_tokens":"many"}}',
        '{"choices":[{"text":"a"}],"usage":{"completion_tokens":1e999}}',
        '{"choices":[{"text":"a"}],"usage":{"prompt_tokens":[3]}}',
    ],
)
def test_garbage_chunk_is_a_failed_request_not_a_crash(fake: Fake, chunk: str) -> None:
    s = fake(mode="malformed-sse", malformed_chunk=chunk)
    res = bench(s.base_url)
    assert res.metrics.completed == 0 and res.metrics.failed == 8
    assert {r.reason for r in res.measured} == {"malformed_sse"}
    assert all(r.error.startswith("malformed stream message") for r in res.measured)
    with pytest.raises(WorkloadFailed, match="malformed_sse"):
        check_outcome(res)


def test_message_without_boundary_fails_the_request_at_a_bound(fake: Fake) -> None:
    s = fake(mode="endless-message")
    res = bench(s.base_url, num_prompts=2)
    assert {r.reason for r in res.measured} == {"malformed_sse"}
    assert all("no message boundary in 16 MiB" in r.error for r in res.measured)


def test_garbage_chunk_in_chat_stream(fake: Fake) -> None:
    s = fake(mode="malformed-sse", malformed_chunk='{"choices":[null]}')
    res = bench(s.base_url, endpoint="chat")
    assert {r.reason for r in res.measured} == {"malformed_sse"}


def test_reasoning_only_stream_counts_as_output(fake: Fake) -> None:
    s = fake(mode="reasoning-only")
    res = bench(s.base_url, endpoint="chat")
    assert res.metrics.completed == 8
    for r in res.measured:
        assert r.ttft > 0 and r.generated_chars > 0 and r.output_tokens == 8


def test_without_usage_output_falls_back_to_chunks(fake: Fake) -> None:
    # No usage and no local tokenizer: one token per chunk (documented; undercounts here).
    s = fake(mode="reasoning-only", tokens_per_chunk=2, usage=False)
    res = bench(s.base_url, endpoint="chat")
    assert all(r.output_tokens_source == "chunks" for r in res.measured)
    assert all(r.output_tokens == 4 and r.chunks == 4 for r in res.measured)


def test_stream_without_done_still_succeeds(fake: Fake) -> None:
    s = fake(mode="no-done")
    res = bench(s.base_url)
    assert res.metrics.completed == 8
    assert not any(r.saw_done for r in res.measured)


def test_never_answer_is_bounded_by_timeouts(fake: Fake) -> None:
    s = fake(mode="never-answer")
    t0 = time.monotonic()
    res = bench(s.base_url, idle_timeout_s=0.5)
    assert time.monotonic() - t0 < 12  # two waves of 0.5 s, not the 20 s request timeout
    assert {r.reason for r in res.measured} == {"timeout"}
    assert all(r.status is None for r in res.measured)


def test_total_request_timeout(fake: Fake) -> None:
    s = fake(itl=0.2)  # each chunk arrives well within the idle timeout
    res = bench(s.base_url, num_prompts=2, osl=30, request_timeout_s=1.0)
    assert {r.reason for r in res.measured} == {"timeout"}
    # The tokens before the timeout count (parsed when the request was given up).
    assert all(r.chunks >= 2 and len(r.itl) == r.chunks - 1 for r in res.measured)


def test_hang_mid_stream(fake: Fake) -> None:
    s = fake(hang_after_requests=0)
    res = bench(s.base_url, num_prompts=4, idle_timeout_s=0.5)
    assert {r.reason for r in res.measured} == {"timeout"}


def test_unreachable_server_is_target_unavailable() -> None:
    with pytest.raises(TargetUnavailable) as info:
        bench(f"http://127.0.0.1:{free_port()}")
    assert info.value.exit_code == 69


def test_profile_wraps_the_measured_part(fake: Fake) -> None:
    s = fake()
    res = bench(s.base_url, num_warmups=3, profile=True)
    assert s.app is not None
    assert s.app.state.profile_calls == ["start@3", "stop@11"]
    assert res.profile.started and res.profile.stopped


def test_queue_time_reflects_the_semaphore(fake: Fake) -> None:
    s = fake(ttft=0.2)
    res = bench(s.base_url, concurrency=2, num_prompts=6, osl=1)
    waits = sorted(r.queue_time for r in res.measured)
    assert waits[0] < 0.1 and waits[-1] > 0.3  # the last pair waited two rounds
    assert res.metrics.peak_concurrency == 2


def test_request_rate_spreads_arrivals(fake: Fake) -> None:
    s = fake()
    res = bench(s.base_url, num_prompts=10, request_rate=20.0, concurrency=10)
    arrivals = sorted(r.queued_at for r in res.measured)
    span = arrivals[-1] - arrivals[0]
    assert 0.15 < span < 1.5  # 9 gaps at a mean of 50 ms


def test_approx_tokenizer_records_server_counts(fake: Fake) -> None:
    s = fake()
    res = bench(s.base_url, tokenizer_mode="approx")
    assert res.prompt_source == "approx"
    assert all(r.prompt_tokens == r.prompt_len for r in res.measured)  # one word per token


@pytest.mark.parametrize("body", ["[1, 2]", '{"data": 5}', '{"data": "abc"}', "null"])
def test_garbage_model_list_is_a_clear_error_not_a_crash(fake: Fake, body: str) -> None:
    s = fake(models_body=body)
    # Without --model nothing says which model to ask for: a usage error, never a traceback.
    with pytest.raises(UsageError, match="listed no model"):
        bench(s.base_url, num_prompts=2)
    res = bench(s.base_url, num_prompts=2, model="fake-model")  # with --model it runs
    assert res.metrics.completed == 2

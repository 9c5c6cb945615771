"""The bench's numbers and its verdict (issue 19 section 4, issue 23 point 2, issue 20): no
success is never a pass, the error limit is exact, a server's word is checked, each repeat
has its window, the client is judged by its schedule delay, the chat role chunk is no token,
the prompt tokens are the server's, the printed peak is exact, and odd but valid input works."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest

from proctor.results.validity import delay_limit_ms, judge_validity
from proctor.workloads.loadgen.config import BenchConfig
from proctor.workloads.loadgen.records import RequestRecord
from proctor.workloads.loadgen.runner import BenchResult, run_benchmark
from proctor.workloads.loadgen.scheduler import arrival_offsets
from proctor.workloads.loadgen.verdict import judge
from tests.fixtures.fake_openai_server import FakeServer
from tests.helpers import only_run, proctor

pytestmark = pytest.mark.timeout(180)

SMALL = (
    "--isl",
    "8",
    "--osl",
    "4",
    "--range-ratio",
    "0",
    "--tokenizer-mode",
    "approx",
    "--min-requests",
    "1",
    "--min-window",
    "0",
)


def bench(url: str, **kw: Any) -> BenchResult:
    args: dict[str, Any] = dict(
        base_url=url,
        isl=8,
        osl=4,
        concurrency=4,
        num_prompts=8,
        num_warmups=0,
        range_ratio=0.0,
        progress=False,
        tokenizer_mode="approx",
        idle_timeout_s=10.0,
        request_timeout_s=30.0,
        server_metrics_s=0,
        gpu_sample_s=0,
    )
    args.update(kw)
    return run_benchmark(BenchConfig(**args))


def metrics_json(runs: Path) -> dict[str, Any]:
    return json.loads((only_run(runs) / "metrics.json").read_text())  # type: ignore[no-any-return]


@pytest.fixture(params=["fast", "aiohttp"])
def http_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Both HTTP paths of the client: each must read the stream the same way."""
    if request.param == "aiohttp":
        monkeypatch.setenv("PROCTOR_HTTP_CLIENT", "aiohttp")
    else:
        monkeypatch.delenv("PROCTOR_HTTP_CLIENT", raising=False)
    return str(request.param)


# -- no success, no measurement ---------------------------------------------------------------
def test_every_request_failed_is_never_valid_nor_exit_0(isolated_runs: Path) -> None:
    with FakeServer(mode="http500") as srv:
        r = proctor(
            "bench",
            "--base-url",
            srv.base_url,
            *SMALL,
            "--num-prompts",
            "6",
            "--num-warmups",
            "0",
            "--max-error-rate",
            "1",
        )
    assert r.returncode == 3, r.stdout + r.stderr
    assert "no request succeeded (6 of 6 failed)" in r.stderr
    doc = metrics_json(isolated_runs)
    assert doc["verdict"]["ok"] is False and doc["metrics"]["workload_failed"] == 1
    assert doc["validity"]["verdict"] == "INVALID"
    assert doc["validity"]["checks"]["errors"]["ok"] is False


def test_a_warmup_where_every_request_failed_fails_the_warmup_check(isolated_runs: Path) -> None:
    with FakeServer(fail_first=3) as srv:  # the 3 warm-ups fail, the measured ones succeed
        r = proctor(
            "bench",
            "--base-url",
            srv.base_url,
            *SMALL,
            "--concurrency",
            "1",
            "--num-prompts",
            "4",
            "--num-warmups",
            "3",
        )
    assert r.returncode == 0, r.stderr
    check = metrics_json(isolated_runs)["validity"]["checks"]["warmup"]
    assert check["ok"] is False and "every one of the 3 warm-up requests failed" in check["detail"]


def test_judge_refuses_no_success_whatever_the_limit() -> None:
    failed = [RequestRecord(index=i, prompt_len=1, expected_output_len=1) for i in range(5)]
    v = judge(failed, 1.0)
    assert not v.ok and "no request succeeded" in v.message()
    doc = {
        "verdict": {"ok": True, "message": "forged"},
        "warmup": {"count": 2, "failed": 0},
        "metrics": {"completed": 0, "failed": 5, "duration": 30.0},
    }
    assert judge_validity(doc, None, min_requests=0, min_window_s=0).verdict == "INVALID"


# -- the error limit is the decimal the user wrote ---------------------------------------------
@pytest.mark.parametrize(("limit", "code"), [("0.57", 0), ("0.56", 3)])
def test_error_rate_limit_is_exact(isolated_runs: Path, limit: str, code: int) -> None:
    with FakeServer(fail_first=57) as srv:  # exactly 57 of 100 fail
        r = proctor(
            "bench",
            "--base-url",
            srv.base_url,
            *SMALL,
            "--concurrency",
            "1",
            "--num-prompts",
            "100",
            "--num-warmups",
            "0",
            "--max-error-rate",
            limit,
        )
    assert r.returncode == code, r.stdout + r.stderr
    assert metrics_json(isolated_runs)["verdict"]["failed"] == 57


# -- a server's word is checked ----------------------------------------------------------------
@pytest.mark.parametrize(
    ("fault", "reason", "words"),
    [
        ({"usage_completion_tokens": "1000"}, "bad_usage", "more than the 4 the request allowed"),
        (
            {"usage_completion_tokens": "1" + "0" * 32},
            "malformed_sse",
            "beyond any model's context",
        ),
        ({"usage_completion_tokens": "3.7"}, "malformed_sse", "not a whole number"),
        ({"usage_prompt_tokens": "1e308"}, "malformed_sse", "beyond any model's context"),
        ({"error_chunk": True}, "http_error", '"message": "Internal"'),
        ({"finish_reason": "abort"}, "aborted", "finish_reason 'abort'"),
        ({"finish_reason": "error"}, "aborted", "finish_reason 'error'"),
    ],
)
def test_a_server_lie_or_error_shape_fails_the_request(
    http_path: str, fault: dict[str, Any], reason: str, words: str
) -> None:
    with FakeServer(itl=0.001, **fault) as srv:
        res = bench(srv.base_url, num_prompts=4)
    assert res.metrics.completed == 0, [r.to_dict() for r in res.measured]
    assert {r.reason for r in res.measured} == {reason}
    assert all(words in r.error for r in res.measured), res.measured[0].error
    assert not res.verdict().ok


def test_the_lying_server_bench_fails_and_its_log_fails_check_too(
    isolated_runs: Path, tmp_path: Path
) -> None:
    with FakeServer(usage_completion_tokens="1000") as srv:
        r = proctor(
            "bench",
            "--base-url",
            srv.base_url,
            *SMALL,
            "--num-prompts",
            "4",
            "--num-warmups",
            "0",
            "--max-error-rate",
            "1",
        )
    assert r.returncode == 3, r.stdout + r.stderr
    run = only_run(isolated_runs)
    logs = [p for p in run.iterdir() if p.suffix == ".log"]
    assert logs, list(run.iterdir())
    baseline = tmp_path / "perf.toml"
    baseline.write_text('[metrics.completed]\nvalue = 0.0\ndirection = "higher"\n')
    for target in (str(logs[0]), run.name):
        checked = proctor("check", target, "--baselines", str(baseline))
        assert checked.returncode == 6, (target, checked.stdout + checked.stderr)


# -- each repeat has its window ------------------------------------------------------------------
def test_the_window_is_each_repeats_not_their_sum() -> None:
    base = {
        "verdict": {"ok": True},
        "warmup": {"count": 2, "failed": 0},
        "metrics": {"completed": 300, "failed": 0, "duration": 12.6},
    }
    repeats = {"per_repeat": [{"duration": 4.1}, {"duration": 4.3}, {"duration": 4.2}]}
    once = judge_validity(base, None, min_requests=1, min_window_s=10)
    three = judge_validity({**base, "repeats": repeats}, None, min_requests=1, min_window_s=10)
    assert once.checks["window"]["ok"] is True
    assert three.checks["window"]["ok"] is False
    assert "shortest measured window of 3 repeats 4.1 s" in three.checks["window"]["detail"]


def test_real_repeats_each_shorter_than_the_window_are_invalid(isolated_runs: Path) -> None:
    with FakeServer(itl=0.01) as srv:  # 3 repeats of 4 requests x 40 ms, each far under 1 s
        r = proctor(
            "bench",
            "--base-url",
            srv.base_url,
            "--isl",
            "8",
            "--osl",
            "4",
            "--range-ratio",
            "0",
            "--tokenizer-mode",
            "approx",
            "--min-requests",
            "1",
            "--min-window",
            "1",
            "--num-prompts",
            "4",
            "--concurrency",
            "1",
            "--num-warmups",
            "1",
            "--repeat",
            "3",
        )
    assert r.returncode == 0, r.stderr
    doc = metrics_json(isolated_runs)
    assert doc["validity"]["checks"]["window"]["ok"] is False, doc["validity"]


# -- the schedule: vLLM's arrival process, judged by schedule delay ------------------------------
@pytest.mark.parametrize("burstiness", [1.0, 0.5, 4.0, float("inf")])
def test_arrivals_are_rescaled_so_the_last_lands_at_n_over_rate(burstiness: float) -> None:
    for seed in range(20):
        offs = arrival_offsets(100, 40.0, burstiness, seed)
        assert offs[-1] == pytest.approx(100 / 40.0)
        assert all(b >= a for a, b in itertools.pairwise(offs)) and offs[0] > 0


def test_an_on_time_client_at_a_random_schedule_is_valid_for_rate(isolated_runs: Path) -> None:
    # The seed: raw gamma gaps read "achieved 33.19 of 40 (83%)" with every request on
    # time. Now the schedule is vLLM's and the client is judged by its delays.
    with FakeServer() as srv:
        r = proctor(
            "bench",
            "--base-url",
            srv.base_url,
            *SMALL,
            "--request-rate",
            "40",
            "--num-prompts",
            "100",
            "--seed",
            "2",
            "--concurrency",
            "64",
            "--num-warmups",
            "1",
        )
    assert r.returncode == 0, r.stderr
    doc = metrics_json(isolated_runs)
    sched = doc["schedule"]
    for key in (
        "schedule_delay_p50_ms",
        "schedule_delay_p99_ms",
        "schedule_delay_max_ms",
        "achieved_rate",
    ):
        assert isinstance(sched[key], float), sched
    check = doc["validity"]["checks"]["rate"]
    if sched["schedule_delay_p99_ms"] <= delay_limit_ms(40):
        assert check["ok"] is True, check
        assert sched["achieved_rate"] == pytest.approx(40, rel=0.05)
    else:  # the machine's load made this client late: then the verdict must say so
        assert check["ok"] is False and "late" in check["detail"]


# -- the chat role chunk is no token -------------------------------------------------------------
def test_the_chat_role_chunk_is_not_the_first_token(http_path: str) -> None:
    with FakeServer(role_chunk=True, ttft=0.3, itl=0.002) as srv:
        res = bench(srv.base_url, endpoint="chat", num_prompts=3, osl=5)
    assert res.metrics.completed == 3
    for r in res.measured:
        assert r.ttft >= 0.29, r.ttft  # the role chunk came at once; the first token 0.3 s later
        assert len(r.itl) == r.output_tokens - 1 == 4


# -- prompt tokens are the server's ------------------------------------------------------------------
def test_total_input_tokens_are_the_servers_usage() -> None:
    with FakeServer(usage_prompt_tokens="50") as srv:
        res = bench(srv.base_url, endpoint="chat", num_prompts=4)
    assert res.metrics.completed == 4 and res.metrics.total_input_tokens == 200


# -- the printed peak is the exact one --------------------------------------------------------------
def test_peak_concurrent_requests_printed_is_the_exact_figure(isolated_runs: Path) -> None:
    with FakeServer(itl=0.005) as srv:  # 40 short requests, 2 at a time, all in ~1 s
        r = proctor(
            "bench",
            "--base-url",
            srv.base_url,
            *SMALL,
            "--concurrency",
            "2",
            "--num-prompts",
            "40",
            "--num-warmups",
            "0",
        )
    assert r.returncode == 0, r.stderr
    doc = metrics_json(isolated_runs)
    assert doc["metrics"]["peak_concurrency"] <= 2
    assert doc["metrics"]["max_concurrent_requests"] > 2  # vLLM's bucket count, kept in JSON
    printed = [ln for ln in r.stdout.splitlines() if ln.startswith("Peak concurrent requests:")]
    assert printed and float(printed[0].split()[-1]) == doc["metrics"]["peak_concurrency"]


# -- odd but valid input, and bad input --------------------------------------------------------------
@pytest.mark.parametrize("line_end", ["crlf", "cr"])
@pytest.mark.parametrize("endpoint", ["completions", "chat"])
def test_sse_lines_ended_with_crlf_or_cr_are_read(
    http_path: str, line_end: str, endpoint: str
) -> None:
    with FakeServer(line_end=line_end, itl=0.001) as srv:
        res = bench(srv.base_url, endpoint=endpoint, num_prompts=4)
    assert res.metrics.completed == 4, [r.error for r in res.measured]
    assert all(r.saw_done and r.output_tokens == 4 and len(r.itl) == 3 for r in res.measured)


def test_sse_crlf_split_across_reads_is_one_line_end() -> None:
    from proctor.workloads.loadgen.sse import StreamState

    rec = RequestRecord(index=0, prompt_len=1, expected_output_len=4)
    state = StreamState(rec, False, 0.0)
    msg = b'data: {"choices":[{"text":"a"}]}\r\n\r\n'
    for i, piece in enumerate([msg[:-3], msg[-3:-2], msg[-2:], msg, b"data: [DONE]\r", b"\n\r\n"]):
        assert state.feed(piece, float(i + 1)) is False
    state.finish(None)
    assert rec.success and rec.chunks == 2 and rec.saw_done and rec.ttft == 3.0


def test_goodput_nan_is_refused(isolated_runs: Path) -> None:
    for bad in ("ttft:nan", "tpot:inf", "e2el:1e309"):
        r = proctor("bench", "--base-url", "http://127.0.0.1:9", "--goodput", bad)
        assert r.returncode == 64, (bad, r.stdout + r.stderr)
        assert "must be a number of ms above 0" in r.stderr


@pytest.mark.parametrize("kind", ["jsonl", "sharegpt", "multi-turn"])
def test_dataset_from_dev_zero_is_refused_in_one_line(isolated_runs: Path, kind: str) -> None:
    with FakeServer() as srv:
        r = proctor(
            "bench",
            "--base-url",
            srv.base_url,
            *SMALL,
            "--dataset",
            f"{kind}:/dev/zero",
            "--num-prompts",
            "2",
            "--num-warmups",
            "0",
        )
    assert r.returncode in (64, 69), r.stdout + r.stderr
    log = next(p for p in only_run(isolated_runs).iterdir() if p.suffix == ".log").read_text()
    said = [ln for ln in log.splitlines() if ln.startswith("proctor:")]
    assert said == [
        "proctor: dataset /dev/zero: not a text file (a NUL byte at byte 1) "
        "(see docs/bench.md#datasets for the format)"
    ], log
    assert "Traceback" not in log + r.stderr


def test_offline_throughput_numbers_read_whole() -> None:
    from proctor.workloads.offline import DEFAULT_THROUGHPUT_PATTERNS, OutputScanner

    scan = OutputScanner(DEFAULT_THROUGHPUT_PATTERNS)
    scan._lines([b"Throughput: 3.20 requests/s, 1.5e+04 total tokens/s, -50 output tokens/s"])
    assert scan.metrics == {"request_throughput": 3.2, "total_token_throughput": 15000.0}

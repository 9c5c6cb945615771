"""The validity verdict: each check on documents, then real benches against the fake server
(VALID; over-saturated), printed, stored, and used by `proctor check`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from proctor.results.validity import judge_validity, ttft_trend
from tests.fixtures.fake_openai_server import FakeServer
from tests.helpers import only_run, proctor

pytestmark = pytest.mark.timeout(180)


def doc(**over: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "verdict": {"ok": True, "message": "0 of 200 requests failed"},
        "warmup": {"count": 8, "failed": 0},
        "metrics": {"completed": 200, "failed": 0, "duration": 30.0},
        "config": {"request_rate": "inf"},
    }
    base.update(over)
    return base


def judge(d: dict[str, Any], trend: dict[str, float] | None = None) -> dict[str, Any]:
    return judge_validity(d, trend, min_requests=100, min_window_s=10.0).to_dict()


def test_a_sound_run_is_valid_and_says_what_was_not_measured() -> None:
    v = judge(doc())
    assert v["verdict"] == "VALID" and v["reasons"] == []
    assert v["checks"]["client"] == {"ok": True, "detail": "client headroom not measured"}
    assert v["checks"]["server"]["ok"] and "not measured" in v["checks"]["server"]["detail"]
    assert set(v["checks"]) == {
        "errors",
        "warmup",
        "requests",
        "window",
        "rate",
        "client",
        "server",
        "conformance",
        "saturation",
    }


@pytest.mark.parametrize(
    ("over", "check", "words"),
    [
        ({"verdict": {"ok": False, "message": "3 of 200 requests failed"}}, "errors", "3 of 200"),
        ({"warmup": {"count": 0, "failed": 0}}, "warmup", "no warm-up request"),
        ({"metrics": {"completed": 40, "failed": 0, "duration": 30.0}}, "requests", "40 measured"),
        ({"metrics": {"completed": 200, "failed": 0, "duration": 2.5}}, "window", "2.5 s"),
        ({"schedule": {"target_rate": 50.0, "achieved_rate": 31.0}}, "rate", "achieved 31.00"),
        (
            {
                "client": {
                    "cpu_percent": 99.0,
                    "loop_lag_p99_ms": 80.0,
                    "client_bound": True,
                    "reasons": ["client CPU 99% of one core"],
                }
            },
            "client",
            "client-bound",
        ),
        (
            {
                "server": {
                    "reconcile": {
                        "tokens": {"server": 4000.0, "client": 2000.0, "allowed": 20.0, "ok": False}
                    }
                }
            },
            "server",
            "another client",
        ),
        (
            {
                "server": {
                    "reconcile": {
                        "tokens": {"server": 1000.0, "client": 2000.0, "allowed": 20.0, "ok": False}
                    }
                }
            },
            "server",
            "miscounts",
        ),
    ],
)
def test_each_check_makes_the_run_invalid(over: dict[str, Any], check: str, words: str) -> None:
    v = judge(doc(**over))
    assert v["verdict"] == "INVALID"
    assert not v["checks"][check]["ok"] and words in v["checks"][check]["detail"]
    assert [r.split(":")[0] for r in v["reasons"]] == [check]


def test_rate_met_and_client_with_headroom_are_fine() -> None:
    v = judge(
        doc(
            schedule={"target_rate": 50.0, "achieved_rate": 49.0},
            client={"cpu_percent": 20.0, "loop_lag_p99_ms": 1.0, "client_bound": False},
        )
    )
    assert v["verdict"] == "VALID"
    assert "client CPU 20%" in v["checks"]["client"]["detail"]


def test_ttft_growing_without_bound_is_saturation() -> None:
    flat = ttft_trend([(t * 0.1, 0.05 + 0.001 * (t % 3)) for t in range(100)])
    growing = ttft_trend([(t * 0.1, 0.05 + 0.5 * t * 0.1) for t in range(100)])  # +0.5 s per s
    assert flat is not None and growing is not None
    assert judge(doc(), flat)["verdict"] == "VALID"
    v = judge(doc(), growing)
    assert v["verdict"] == "INVALID" and "TTFT grows without bound" in v["reasons"][0]
    assert growing["slope_s_per_s"] == pytest.approx(0.5)
    assert ttft_trend([(0.0, 1.0)] * 3) is None  # too few points: not judged


BASELINE = """\
[metrics.completed]
value = 1.0
direction = "higher"
"""


def test_real_bench_valid_then_check_passes(isolated_runs: Path, tmp_path: Path) -> None:
    with FakeServer(itl=0.01) as srv:  # 20 tokens x 10 ms: about 0.2 s a request
        r = proctor(
            "bench",
            "--base-url",
            srv.base_url,
            "--isl",
            "8",
            "--osl",
            "20",
            "--range-ratio",
            "0",
            "--concurrency",
            "4",
            "--num-prompts",
            "30",
            "--num-warmups",
            "4",
            "--tokenizer-mode",
            "approx",
            "--min-requests",
            "20",
            "--min-window",
            "1",
        )
    assert r.returncode == 0, r.stderr
    assert "Validity: VALID" in r.stdout
    run = only_run(isolated_runs)
    validity = json.loads((run / "metrics.json").read_text())["validity"]
    assert validity["verdict"] == "VALID", validity
    baseline = tmp_path / "perf.toml"
    baseline.write_text(BASELINE)
    checked = proctor("check", run.name, "--baselines", str(baseline))
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_real_overloaded_server_is_invalid_and_check_fails(
    isolated_runs: Path, tmp_path: Path
) -> None:
    # The server runs 2 requests at once, 0.1 s each: 20 req/s. Asking 60 req/s queues the rest,
    # so every later request waits longer for its first token.
    with FakeServer(itl=0.01, max_running=2) as srv:
        r = proctor(
            "bench",
            "--base-url",
            srv.base_url,
            "--isl",
            "8",
            "--osl",
            "10",
            "--range-ratio",
            "0",
            "--concurrency",
            "500",
            "--num-prompts",
            "120",
            "--num-warmups",
            "2",
            "--request-rate",
            "60",
            "--tokenizer-mode",
            "approx",
            "--min-requests",
            "20",
            "--min-window",
            "1",
        )
    assert r.returncode == 0, r.stderr  # every request answered: the bench itself succeeded
    assert "Validity: INVALID" in r.stdout and "TTFT grows without bound" in r.stdout
    assert "proctor: benchmark INVALID: saturation: TTFT grows without bound" in r.stderr
    run = only_run(isolated_runs)
    doc_ = json.loads((run / "metrics.json").read_text())
    assert doc_["validity"]["checks"]["saturation"]["ok"] is False
    assert doc_["server"]["waiting_max"] > 10  # the server's queue, seen from its /metrics
    baseline = tmp_path / "perf.toml"
    baseline.write_text(BASELINE)
    checked = proctor("check", run.name, "--baselines", str(baseline))
    assert checked.returncode == 6, checked.stdout + checked.stderr
    assert "invalid benchmark: saturation: TTFT grows without bound" in checked.stderr
    compared = proctor("runs", "compare", run.name, run.name, "--json")
    assert compared.returncode == 0, compared.stderr
    assert any(row["metric"] == "valid" and row["a"] == 0 for row in json.loads(compared.stdout))


def test_sent_rate_against_its_schedule_cancels_poisson_noise() -> None:
    from proctor.results.validity import sent_rates

    due = [0.0, 0.05, 0.3, 0.31, 0.9, 1.0]  # bursty arrivals, as Poisson gives
    assert sent_rates([(d, d + 0.002) for d in due]) == pytest.approx((5.0, 5.0))
    late = sent_rates([(d, i * 0.5) for i, d in enumerate(due)])  # sends fell behind
    assert late is not None and late[0] == pytest.approx(2.0)
    v = judge_validity(
        doc(config={"request_rate": 5.0}), None, min_requests=1, min_window_s=0, sent=late
    ).to_dict()
    assert (
        v["verdict"] == "INVALID"
        and "achieved 2.00 req/s of the 5.00 asked (sent" in v["checks"]["rate"]["detail"]
    )


def test_real_client_that_cannot_keep_the_rate_is_invalid(isolated_runs: Path) -> None:
    # 4 in flight, the server runs 2 at once for 0.1 s: about 20 req/s can be sent, 60 are asked.
    with FakeServer(itl=0.01, max_running=2) as srv:
        r = proctor(
            "bench",
            "--base-url",
            srv.base_url,
            "--isl",
            "8",
            "--osl",
            "10",
            "--range-ratio",
            "0",
            "--concurrency",
            "4",
            "--num-prompts",
            "60",
            "--num-warmups",
            "2",
            "--request-rate",
            "60",
            "--tokenizer-mode",
            "approx",
            "--min-requests",
            "20",
            "--min-window",
            "1",
        )
    assert r.returncode == 0, r.stderr
    checks = json.loads((only_run(isolated_runs) / "metrics.json").read_text())["validity"][
        "checks"
    ]
    assert checks["rate"]["ok"] is False, checks["rate"]
    assert "rate: the client sent requests late: schedule delay p99" in r.stdout


def test_real_server_counting_other_tokens_makes_the_bench_invalid(isolated_runs: Path) -> None:
    # The server's /metrics counts twice the tokens this client received, as it would with a
    # second client loading it: the latencies measured are not those of the load asked for.
    with FakeServer(itl=0.001, metrics_token_scale=2.0) as srv:
        r = proctor(
            "bench",
            "--base-url",
            srv.base_url,
            "--isl",
            "8",
            "--osl",
            "16",
            "--range-ratio",
            "0",
            "--concurrency",
            "4",
            "--num-prompts",
            "40",
            "--tokenizer-mode",
            "approx",
            "--min-requests",
            "20",
            "--min-window",
            "0",
        )
    assert r.returncode == 0, r.stderr
    checks = json.loads((only_run(isolated_runs) / "metrics.json").read_text())["validity"][
        "checks"
    ]
    assert checks["server"]["ok"] is False and "another client" in checks["server"]["detail"]
    assert "server: the server generated 1280 tokens" in r.stderr
    assert "client received 640" in r.stderr and "proctor: benchmark INVALID" in r.stderr

"""A server that stays alive (health 200) but answers every generation request with an error
is a fault (exit 2) for flow and drain, with no engine-profile pattern for what it printed."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.cli.test_serve_flow import curl, fake_engine, script, start  # noqa: F401 - fixture
from tests.helpers import proctor

pytestmark = pytest.mark.timeout(180)


def loadgen(port: int, *extra: str) -> str:
    return (
        f"{sys.executable} -m proctor.workloads.loadgen --port {port} --isl 8 --osl 4 "
        f"--concurrency 2 --num-prompts 8 --num-warmups 0 --no-progress --log-every 0.2 "
        + " ".join(extra)
    )


def flow(port: int, workload: str, *server_args: str) -> tuple[int, dict[str, object], str]:
    r = proctor(
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
        workload,
        "--json",
        "--",
        *server_args,
    )
    return r.returncode, json.loads(r.stdout) if r.stdout.strip() else {}, r.stderr


def drain_step(flow_doc: dict[str, object]) -> dict[str, object]:
    steps = flow_doc["steps"]
    assert isinstance(steps, list)
    return next(s for s in steps if s["step"] == "drain")


def test_http_500_to_every_request_is_a_fault(fake_engine: int, tmp_path: Path) -> None:
    port = fake_engine
    workload = script(tmp_path, curl(port), curl(port), curl(port))
    code, doc, err = flow(port, workload, "--broken-after-requests", "0")
    assert code == 2, err
    step = drain_step(doc)
    assert "alive but answered the last 3 generation requests with errors" in str(step["message"])
    assert "HTTP 500" in str(step["message"])


def test_error_events_in_200_streams_are_a_fault(fake_engine: int) -> None:
    port = fake_engine
    code, doc, err = flow(
        port, loadgen(port), "--broken-after-requests", "0", "--broken-as", "error-event"
    )
    assert code == 2, err
    assert "load generator's progress" in str(drain_step(doc)["message"])


def test_broken_after_a_while_is_a_fault_before_the_bench_ends(fake_engine: int) -> None:
    port = fake_engine
    code, doc, err = flow(
        port, loadgen(port, "--num-prompts", "40"), "--broken-after-requests", "4"
    )
    assert code == 2, err
    assert "generation requests with errors" in str(drain_step(doc)["message"])


def test_a_few_failed_requests_fail_the_workload_not_the_server(fake_engine: int) -> None:
    port = fake_engine
    code, doc, err = flow(port, loadgen(port), "--mode", "http500", "--fault-every", "3")
    assert code == 3, err  # the bench failed (2 of 8 requests); the server answered the rest
    assert "the workload exited 3" in str(drain_step(doc)["message"])


def test_broken_server_without_access_log_is_caught_from_metrics(
    fake_engine: int, tmp_path: Path
) -> None:
    port = fake_engine
    # No access log and a plain curl workload: /metrics' http_requests_total is the evidence.
    workload = script(tmp_path, "sleep 0.5", *[curl(port)] * 6, "sleep 2")
    code, doc, err = flow(port, workload, "--broken-after-requests", "0", "--no-access-log")
    assert code == 2, err
    assert "the server's /metrics" in str(drain_step(doc)["message"])


def test_error_streak_sets_how_many_errors_in_a_row_make_a_fault(fake_engine: int) -> None:
    port = fake_engine
    r = proctor(
        "flow",
        "--engine",
        "fake",
        "--model",
        "m",
        "--port",
        str(port),
        "--poll",
        "1s",
        "--error-streak",
        "50",
        "--workload-cmd",
        loadgen(port, "--num-prompts", "40"),
        "--json",
        "--",
        "--broken-after-requests",
        "4",
    )
    assert r.returncode == 3, r.stderr  # 36 errors after 4 answers: under 50, the bench failed
    assert "the workload exited 3" in str(drain_step(json.loads(r.stdout))["message"])


def test_drain_of_a_broken_server_with_a_bench_client_is_a_fault(fake_engine: int) -> None:
    server = start(fake_engine, "--broken-after-requests", "0", "--broken-as", "error-event")
    try:
        assert proctor("serve", "ready", server, "--timeout", "30s").returncode == 0
        bench = proctor(
            "bench",
            "--server",
            server,
            "--isl",
            "8",
            "--osl",
            "4",
            "--concurrency",
            "2",
            "--num-prompts",
            "8",
            "--num-warmups",
            "0",
            "--detach",
        )
        assert bench.returncode == 0, bench.stderr
        r = proctor("drain", server, "--poll", "1s", "--json")
        assert r.returncode == 2, r.stderr
        assert "alive but answered" in json.loads(r.stdout)["message"]
    finally:
        proctor("serve", "stop", server)

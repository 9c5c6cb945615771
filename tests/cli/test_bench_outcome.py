"""`proctor bench` and `sweep` through the real CLI: a failed request is never a success, the
API key is never the attach key nor written, a stopped server run is refused, the log grows."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from proctor.store.db import Store
from tests.cli.test_serve_flow import fake_engine, start  # noqa: F401 - fixture
from tests.fixtures.fake_openai_server import FakeServer
from tests.helpers import only_run, proctor

pytestmark = pytest.mark.timeout(180)

SMALL = [
    "--isl",
    "8",
    "--osl",
    "4",
    "--concurrency",
    "2",
    "--num-prompts",
    "10",
    "--num-warmups",
    "0",
]


def bench(url: str, *extra: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    r = proctor("bench", "--base-url", url, *SMALL, *extra, env=env)
    return r.returncode, r.stdout, r.stderr


def bench_runs(runs: Path) -> list[Path]:
    return sorted(p for p in runs.iterdir() if p.is_dir() and not p.name.startswith("."))


def test_half_the_requests_failed_is_exit_3_everywhere(isolated_runs: Path) -> None:
    with FakeServer(mode="http500", fault_every=2) as srv:  # every second request: HTTP 500
        code, out, err = bench(srv.base_url)
    assert code == 3, err
    assert "benchmark failed: 5 of 10 requests failed" in err and "HTTP 500" in err
    assert "Result: FAILED: 5 of 10 requests failed" in out
    run = only_run(isolated_runs)
    doc = json.loads((run / "metrics.json").read_text())
    assert doc["verdict"]["ok"] is False and doc["verdict"]["failed"] == 5
    assert (run / "exit_code").read_text().split()[0] == "3"
    with Store(isolated_runs / "proctor.sqlite") as store:
        metrics = {m["name"]: m["value"] for m in store.metrics(run.name)}
        row = store.runs()[0]
    assert metrics["failed"] == 5 and metrics["workload_failed"] == 1
    assert metrics["error_rate"] == pytest.approx(0.5)
    assert row["outcome"] == "failed" and row["exit_code"] == 3


def test_max_error_rate_allows_some(isolated_runs: Path) -> None:
    with FakeServer(mode="http500", fault_every=2) as srv:
        code, out, err = bench(srv.base_url, "--max-error-rate", "0.5", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["verdict"]["ok"] is True and doc["metrics"]["failed"] == 5


def test_in_process_bench_with_failures_is_exit_3(tmp_path: Path) -> None:
    with FakeServer(mode="http500", fault_every=2) as srv:
        r = proctor(
            "bench", "--base-url", srv.base_url, "--output-dir", str(tmp_path / "o"), *SMALL
        )
    assert r.returncode == 3, r.stderr
    assert "5 of 10 requests failed" in r.stdout + r.stderr


def test_api_key_is_not_the_attach_key_and_never_written(
    isolated_runs: Path, tmp_path: Path
) -> None:
    secret = "sk-canary-Zq81-never-write-me"
    env = {"OPENAI_API_KEY": secret}
    with FakeServer(api_key=secret, itl=0.1) as srv:  # refuses requests without the key
        slow = ["--osl", "50", "--num-prompts", "4", "--detach", "--json"]  # ~10 s: still live
        first = proctor("bench", "--base-url", srv.base_url, *SMALL, *slow, env=env)
        assert first.returncode == 0, first.stderr
        # Other settings, same API key, no --key: a run of its own, never an attach.
        second = proctor("bench", "--base-url", srv.base_url, *SMALL, *slow, "--isl", "6", env=env)
        assert second.returncode == 0, second.stderr
        a, b = json.loads(first.stdout), json.loads(second.stdout)
        assert a["run_id"] != b["run_id"] and not b["attached"]
        for run_id in (a["run_id"], b["run_id"]):
            proctor("runs", "stop", run_id, timeout=60)
    printed = first.stdout + first.stderr + second.stdout + second.stderr
    assert secret not in printed
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert secret.encode() not in path.read_bytes(), path
    for run in bench_runs(isolated_runs):
        assert json.loads((run / "record.json").read_text()).get("key") is None


def test_key_flag_is_the_attach_key(isolated_runs: Path) -> None:
    with FakeServer(itl=0.1) as srv:  # ~10 s: still live when the same key comes again
        args = ["--osl", "50", "--num-prompts", "4", "--key", "nightly", "--detach", "--json"]
        first = json.loads(
            proctor("bench", "--base-url", srv.base_url, *SMALL, *args, check=True).stdout
        )
        again = json.loads(
            proctor("bench", "--base-url", srv.base_url, *SMALL, *args, check=True).stdout
        )
        assert again["run_id"] == first["run_id"] and again["attached"] is True
        other = proctor("bench", "--base-url", srv.base_url, *SMALL, *args, "--isl", "6")
        assert other.returncode == 64, other.stderr
        assert "other settings" in other.stderr
        proctor("runs", "stop", first["run_id"], timeout=60)
    assert len(bench_runs(isolated_runs)) == 1
    record = json.loads((isolated_runs / first["run_id"] / "record.json").read_text())
    assert record["key"] == "nightly"


def test_detached_bench_log_grows_while_it_runs(isolated_runs: Path) -> None:
    with FakeServer(itl=0.05) as srv:  # 10 requests x 20 tokens x 50 ms at concurrency 2: ~5 s
        r = proctor(
            "bench",
            "--base-url",
            srv.base_url,
            *SMALL,
            "--osl",
            "20",
            "--log-every",
            "0.5",
            "--detach",
            "--json",
            check=True,
        )
        run = isolated_runs / json.loads(r.stdout)["run_id"]
        log = run / json.loads((run / "record.json").read_text())["log"]
        deadline = time.monotonic() + 30
        seen = ""
        while time.monotonic() < deadline and "[bench] benchmark:" not in seen:
            seen = log.read_text(errors="replace")
            time.sleep(0.1)
        assert "[bench] benchmark:" in seen, seen
        assert not (run / "exit_code").exists()  # still running: the log grew before the end
        assert proctor("runs", "wait", run.name, timeout=60).returncode == 0
    final = log.read_text()
    assert "[bench] benchmark: 10/10 done, 0 failed" in final


def test_bench_against_a_stopped_server_run_is_refused(
    fake_engine: int, isolated_runs: Path
) -> None:
    server = start(fake_engine)
    assert proctor("serve", "ready", server, "--timeout", "30s").returncode == 0
    assert proctor("serve", "stop", server).returncode == 0
    with FakeServer(port=fake_engine, model="m"):  # something else now holds the port
        r = proctor("bench", "--server", server, *SMALL)
    assert r.returncode == 69, r.stderr
    assert f"server run {server} ended" in r.stderr
    assert [p.name for p in bench_runs(isolated_runs)] == [server]  # no bench run was made


def test_bench_against_a_server_run_serving_another_model_is_refused(
    fake_engine: int,
    isolated_runs: Path,
) -> None:
    server = start(fake_engine, "--model", "intruder")  # the process serves another model
    try:
        assert proctor("serve", "ready", server, "--timeout", "30s").returncode == 0
        r = proctor("bench", "--server", server, *SMALL)
        assert r.returncode == 69, r.stderr
        assert "'m'" in r.stderr and "intruder" in r.stderr
    finally:
        proctor("serve", "stop", server)


def test_sweep_point_with_failed_requests_fails_the_sweep(isolated_runs: Path) -> None:
    with FakeServer(mode="http500", fault_every=4) as srv:
        r = proctor(
            "sweep",
            "--base-url",
            srv.base_url,
            "--concurrency",
            "2,4",
            "--isl",
            "8",
            "--osl",
            "4",
            "--prompt-multiplier",
            "2",
            "--json",
        )
    assert r.returncode == 3, r.stderr
    summary = json.loads(r.stdout)
    assert len(summary["points"]) == 2  # both measured, both kept
    for point in summary["points"]:
        assert point["exit_code"] == 3 and "requests failed" in point["failure"]
    record = json.loads((isolated_runs / summary["sweep"] / "record.json").read_text())
    assert record["outcome"] == "failed"

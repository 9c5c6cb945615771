"""The server workflow against the fault-injecting fake server: each outcome the gate, the
drain monitor and the stop must tell apart, through the real CLI."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import psutil
import pytest

from tests.fixtures.fake_openai_server import free_port
from tests.helpers import FAKE_ENGINE_TOML, REPO, proctor, proctor_popen, wait_for_flow_step

FAKE = REPO / "tests/fixtures/fake_openai_server.py"
FAULT = "Memory access fault by GPU node-2 (Agent handle: 0x1) on address 0x0."


def _epoch(iso: str) -> float:
    return datetime.fromisoformat(iso).timestamp()


@pytest.fixture
def fake_engine(tmp_path: Path) -> int:
    """A proctor.toml in the test's working directory with an engine profile for the fake."""
    (tmp_path / "work" / "proctor.toml").write_text(
        f"""
{FAKE_ENGINE_TOML}
"""
    )
    return free_port()


def curl(port: int, tokens: int = 5, stream: bool = False) -> str:
    body = json.dumps({"model": "m", "prompt": "hi", "max_tokens": tokens, "stream": stream})
    return f"curl -sN http://127.0.0.1:{port}/v1/completions -d '{body}'"


def script(tmp_path: Path, *lines: str) -> str:
    """A workload as a script file, so no quoting crosses shlex and bash twice."""
    path = tmp_path / f"workload-{len(list(tmp_path.glob('workload-*')))}.sh"
    path.write_text("\n".join(lines) + "\n")
    return f"bash {path}"


def fake_flow(
    port: int,
    poll: str,
    workload: str,
    *engine_args: str,
) -> subprocess.CompletedProcess[str]:
    """`proctor flow --json` of the fake engine on `port` with one workload command."""
    return proctor(
        "flow",
        "--engine",
        "fake",
        "--model",
        "m",
        "--port",
        str(port),
        "--poll",
        poll,
        "--workload-cmd",
        workload,
        "--json",
        "--",
        *engine_args,
    )


def start(port: int, *extra: str) -> str:
    result = proctor(
        "serve",
        "start",
        "--engine",
        "fake",
        "--model",
        "m",
        "--port",
        str(port),
        "--json",
        "--",
        *extra,
    )
    assert result.returncode == 0, result.stderr
    return str(json.loads(result.stdout)["run_id"])


def test_flow_happy_path_leaves_nothing_running(fake_engine: int, isolated_runs: Path) -> None:
    port = fake_engine
    result = fake_flow(port, "1s", curl(port), "--spawn-mp-helper")
    assert result.returncode == 0, result.stderr
    flow = json.loads(result.stdout)
    assert [s["step"] for s in flow["steps"]] == [
        "stop",
        "start",
        "ready",
        "workload",
        "drain",
        "teardown",
    ]
    server = isolated_runs / flow["server_run"]
    record = json.loads((server / "record.json").read_text())
    assert record["group"] == flow["run_id"] and record["kind"] == "server"
    assert record["outcome"] == "stopped"
    pid = record["process"]["pid"]
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert (isolated_runs / flow["run_id"] / "exit_code").read_text() == "0\n"


def test_crash_at_startup_is_a_fault_with_the_line(fake_engine: int) -> None:
    run_id = start(
        fake_engine,
        "--startup-delay",
        "0.5",
        "--crash-at-startup",
        "torch.OutOfMemoryError: CUDA out of memory",
    )
    result = proctor("serve", "ready", run_id, "--timeout", "30s")
    assert result.returncode == 2, result.stderr
    assert "CUDA out of memory" in result.stderr


def test_silent_death_at_startup_is_exit_3(fake_engine: int) -> None:
    run_id = start(fake_engine, "--startup-delay", "0.3", "--crash-at-startup", "bye")
    result = proctor("serve", "ready", run_id, "--timeout", "30s")
    assert result.returncode == 3, result.stderr


def test_not_ready_in_time_is_exit_5(fake_engine: int) -> None:
    run_id = start(fake_engine, "--startup-delay", "30")
    t0 = time.monotonic()
    result = proctor("serve", "ready", run_id, "--timeout", "2s")
    assert result.returncode == 5, result.stderr
    assert time.monotonic() - t0 < 15
    assert proctor("serve", "stop", run_id).returncode == 0


def test_fault_while_serving_is_caught_within_a_second_with_poll_10s(
    fake_engine: int, tmp_path: Path
) -> None:
    port = fake_engine
    result = fake_flow(
        port, "10s", script(tmp_path, curl(port), "sleep 60"), "--fault-after-requests", "1"
    )
    assert result.returncode == 2, result.stderr
    flow = json.loads(result.stdout)
    drain = next(s for s in flow["steps"] if s["step"] == "drain")
    assert "Memory access fault" in drain["message"]
    # The drain step's own span (the start-up of CLI and server before it is slow under load):
    # seconds, not the 10 s poll.
    elapsed = _epoch(drain["ended_at"]) - _epoch(drain["started_at"])
    assert elapsed < 6, f"fault took {elapsed:.1f}s to surface"


def test_hang_mid_stream_is_exit_1_and_inspected(fake_engine: int, isolated_runs: Path) -> None:
    port = fake_engine
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
        "--stuck-polls",
        "3",
        "--workload-cmd",
        curl(port, tokens=500, stream=True),
        "--json",
        "--",
        "--hang-after-requests",
        "0",
        "--itl",
        "0.01",
    )
    assert result.returncode == 1, result.stderr
    flow = json.loads(result.stdout)
    steps = [s["step"] for s in flow["steps"]]
    assert steps[-2:] == ["inspect", "teardown"]
    inspect_dir = isolated_runs / flow["server_run"] / "inspect"
    assert list(inspect_dir.glob("*-pyspy.txt"))


def test_inspect_of_a_local_server_writes_stacks_and_kills_nothing(
    fake_engine: int, isolated_runs: Path
) -> None:
    run_id = start(fake_engine, "--spawn-mp-helper")
    try:
        result = proctor("inspect", run_id, "--timeout", "30s", "--json")
        assert result.returncode == 0, result.stderr
        rows = json.loads(result.stdout)
        engine = json.loads((isolated_runs / run_id / "record.json").read_text())["process"]["pid"]
        (spy,) = [r for r in rows if r["tool"] == "py-spy" and r["pid"] == engine]
        assert spy["path"] == str(isolated_runs / run_id / "inspect" / f"{engine}-pyspy.txt")
        assert "node" not in spy and "fake_openai_server" in Path(spy["path"]).read_text()
        assert psutil.pid_exists(engine) and psutil.Process(engine).status() != psutil.STATUS_ZOMBIE
    finally:
        assert proctor("serve", "stop", run_id).returncode == 0
    gone = proctor("inspect", run_id)
    assert gone.returncode == 64 and "no live process" in gone.stderr, gone.stderr


def test_silent_server_death_while_serving_is_3_not_drained(
    fake_engine: int, tmp_path: Path
) -> None:
    port = fake_engine
    result = fake_flow(
        port, "1s", script(tmp_path, curl(port), "sleep 30"), "--die-after-requests", "1"
    )
    assert result.returncode == 3, result.stderr


def test_stale_fault_line_in_a_reused_log_is_not_a_fault(fake_engine: int, tmp_path: Path) -> None:
    port = fake_engine
    old = tmp_path / "old-client.log"
    old.write_text(f"yesterday: {FAULT}\n")
    run_id = start(port)
    assert proctor("serve", "ready", run_id, "--timeout", "30s").returncode == 0
    client = proctor("run", "-d", "--json", "--", "bash", "-c", curl(port))
    client_id = json.loads(client.stdout)["run_id"]
    result = proctor("drain", run_id, "--poll", "1s", "--client", client_id, "--log", str(old))
    assert result.returncode == 0, result.stderr
    assert proctor("serve", "stop", run_id).returncode == 0


def test_offline_job_still_running_after_a_quiet_poll_is_not_drained(isolated_runs: Path) -> None:
    job = proctor(
        "run", "-d", "--json", "--", "bash", "-c", "echo loading; sleep 4; echo done; exit 0"
    )
    job_id = json.loads(job.stdout)["run_id"]
    result = proctor("drain", "--offline", job_id, "--poll", "1s", "--stuck-polls", "10")
    assert result.returncode == 0, result.stderr
    # Counted from the job's own start (a CLI's start-up under load is no part of it).
    started = json.loads((isolated_runs / job_id / "record.json").read_text())["started_at"]
    assert time.time() - _epoch(started) >= 4, "reported drained while the offline job still ran"
    failed = json.loads(
        proctor("run", "-d", "--json", "--", "bash", "-c", "sleep 1; exit 9").stdout
    )
    result = proctor("drain", "--offline", failed["run_id"], "--poll", "1s")
    assert result.returncode == 3, result.stderr


def test_port_in_use_is_refused_before_anything_starts(
    fake_engine: int, isolated_runs: Path
) -> None:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", fake_engine))
        sock.listen()
        result = proctor(
            "serve", "start", "--engine", "fake", "--model", "m", "--port", str(fake_engine)
        )
    assert result.returncode == 69
    assert "already in use" in result.stderr
    assert not isolated_runs.exists() or not [
        p for p in isolated_runs.iterdir() if p.is_dir() and not p.name.startswith(".")
    ]


def test_stop_kills_sigterm_ignorer_and_escaped_grandchild(
    fake_engine: int, isolated_runs: Path
) -> None:
    port = fake_engine
    run_id = start(port, "--ignore-sigterm", "--spawn-grandchild")
    assert proctor("serve", "ready", run_id, "--timeout", "30s").returncode == 0
    run = isolated_runs / run_id
    server_pid = json.loads((run / "record.json").read_text())["process"]["pid"]
    tree = psutil.Process(json.loads((run / "wrapper.pid").read_text())["pid"]).children(
        recursive=True
    )
    escaped = [p for p in tree if p.pid != server_pid]
    assert escaped, "the fake server did not spawn its grandchild"
    assert any(p.pid == p.pgid() if hasattr(p, "pgid") else True for p in escaped)
    proctor("serve", "stop", run_id, "--json", check=True)
    for proc in [psutil.Process(server_pid) if psutil.pid_exists(server_pid) else None, *escaped]:
        if proc is not None and proc.is_running():
            assert proc.status() == psutil.STATUS_ZOMBIE
    again = json.loads(proctor("serve", "stop", run_id, "--json", check=True).stdout)
    assert again[0]["was_running"] is False
    record = json.loads((run / "record.json").read_text())
    assert (
        record["exit"]["command"]["signal"] == "SIGKILL"
    )  # the server's own, after the stop's 130


def test_serve_start_prints_the_profile_it_applied(isolated_runs: Path, tmp_path: Path) -> None:
    """A required model-family setting that was not applied must be impossible to miss."""
    # ATOM is not installed here: a stand-in module where its launcher looks (serve start now
    # refuses an engine its python cannot import), and a model directory the profile matches.
    site = tmp_path / "site"
    server = site / "atom" / "entrypoints" / "openai_server.py"
    server.parent.mkdir(parents=True)
    for package in (site / "atom", server.parent):
        (package / "__init__.py").write_text("")
    server.write_text("import time\ntime.sleep(120)\n")
    model = tmp_path / "DeepSeek-V4-Pro"
    model.mkdir()
    pythonpath = os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))
    result = proctor(
        "serve",
        "start",
        "--engine",
        "atom",
        "--model",
        str(model),
        "--python",
        sys.executable,
        "--port",
        str(free_port()),
        env={"PYTHONPATH": pythonpath},
    )
    assert result.returncode == 0, result.stderr
    assert "model profile DeepSeek-V4-Pro" in result.stderr
    assert "AITER_BF16_FP8_MOE_BOUND=0" in result.stderr
    assert proctor("serve", "stop", result.stdout.strip()).returncode == 0


def test_bench_against_a_server_run_is_a_run_with_metrics_in_the_store(
    fake_engine: int, isolated_runs: Path, tmp_path: Path
) -> None:
    from proctor.store.db import Store

    server = start(fake_engine)
    assert proctor("serve", "ready", server, "--timeout", "30s").returncode == 0
    # A tiny bench: validity thresholds off, so check judges the baseline (an INVALID bench
    # would be refused with exit 6 before any baseline is looked at).
    result = proctor(
        "bench",
        "--server",
        server,
        "--isl",
        "16",
        "--osl",
        "8",
        "--concurrency",
        "4",
        "--prompt-multiplier",
        "2",
        "--name",
        "b",
        "--min-requests",
        "0",
        "--min-window",
        "0",
    )
    assert result.returncode == 0, result.stderr
    assert "Serving Benchmark Result" in result.stdout
    bench_dir = next(p for p in isolated_runs.iterdir() if (p / "b.log").exists())
    record = json.loads((bench_dir / "record.json").read_text())
    assert record["kind"] == "bench" and record["server_run"] == server
    with Store(isolated_runs / "proctor.sqlite") as store:
        names = {m["name"] for m in store.metrics(bench_dir.name)}
    assert {"total_token_throughput", "mean_ttft_ms", "mean_tpot_ms"} <= names
    baseline = tmp_path / "perf.toml"
    baseline.write_text('[metrics.total_token_throughput]\nvalue = 1e12\ndirection = "higher"\n')
    assert proctor("check", bench_dir.name, "--baselines", str(baseline)).returncode == 7
    compared = proctor("runs", "compare", bench_dir.name, bench_dir.name, "--json")
    assert compared.returncode == 0, compared.stderr
    assert proctor("serve", "stop", server).returncode == 0


def test_sweep_keeps_measured_points_when_a_later_one_fails(
    fake_engine: int, isolated_runs: Path
) -> None:
    server = start(fake_engine, "--die-after-requests", "14")
    assert proctor("serve", "ready", server, "--timeout", "30s").returncode == 0
    # 2 x (2 warmups + 4 measured) = 12 requests succeed; the second point kills the server.
    result = proctor(
        "sweep",
        "--server",
        server,
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
    assert result.returncode != 0
    summary = json.loads(result.stdout)
    first, second = summary["points"]
    assert (
        first["concurrency"] == 2
        and first["exit_code"] == 0
        and first["total_token_throughput"] > 0
    )
    assert second["exit_code"] != 0
    sweep_dir = isolated_runs / summary["sweep"]
    assert (sweep_dir / "summary.csv").read_text().count("\n") == 3
    # The sweep's record holds the same points (written through its recorder) and its end.
    written = json.loads((sweep_dir / "record.json").read_text())
    assert written["kind"] == "sweep" and written["points"] == summary["points"]
    assert not list(sweep_dir.glob("*.png"))  # its plots are its report (plotly)
    assert written["outcome"] == "failed" and written["exit_code"] == second["exit_code"]
    proctor("serve", "stop", server)


def test_resume_after_a_dead_controller_starts_no_second_server(
    fake_engine: int, isolated_runs: Path, tmp_path: Path
) -> None:
    import signal

    from tests.helpers import proctor_popen

    port = fake_engine
    workload = script(tmp_path, "sleep 4", curl(port))
    controller = proctor_popen(
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
    )
    flow_dir = wait_for_flow_step(isolated_runs, "drain")
    assert flow_dir is not None, "the flow never reached its drain step"
    controller.send_signal(signal.SIGKILL)
    controller.wait(timeout=10)
    resumed = proctor("flow", "--resume", flow_dir.name, "--json")
    assert resumed.returncode == 0, resumed.stderr
    servers = [
        p
        for p in isolated_runs.iterdir()
        if (p / "record.json").exists()
        and json.loads((p / "record.json").read_text()).get("kind") == "server"
    ]
    assert len(servers) == 1
    record = json.loads((flow_dir / "record.json").read_text())
    assert record["exit_code"] == 0 and record["steps"][-1]["step"] == "teardown"
    assert json.loads((servers[0] / "record.json").read_text())["outcome"] == "stopped"
    again = proctor("flow", "--resume", flow_dir.name)
    assert again.returncode == 64  # already ended


def test_flow_from_a_file_with_flags_winning(
    fake_engine: int, isolated_runs: Path, tmp_path: Path
) -> None:
    port = fake_engine
    flow_file = tmp_path / "flow.toml"
    flow_file.write_text(
        f'[flow]\nengine = "fake"\nmodel = "m"\nport = 1\npoll = "1s"\n'
        f'workload_cmd = "{script(tmp_path, curl(port))}"\n'
    )
    result = proctor("flow", "--file", str(flow_file), "--port", str(port), "--json")
    assert result.returncode == 0, result.stderr
    record = json.loads(result.stdout)
    assert record["job"]["server"]["port"] == port and record["job"]["poll"] == 1.0


def test_drain_a_server_proctor_did_not_start(fake_engine: int, tmp_path: Path) -> None:
    import subprocess

    port = fake_engine
    log = tmp_path / "foreign.log"
    with log.open("w") as out:
        server = subprocess.Popen(
            [
                sys.executable,
                str(FAKE),
                "--port",
                str(port),
                "--model",
                "m",
                "--fault-after-requests",
                "1",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        ready = proctor(
            "serve", "ready", "--port", str(port), "--engine", "fake", "--timeout", "30s"
        )
        assert ready.returncode == 0, ready.stderr
        # The client sends its request once the drain is watching (the drain reads only the
        # bytes written after its start): a fixed sleep lost that race on a loaded machine.
        go = tmp_path / "go"
        wait = f"while [ ! -e {go} ]; do sleep 0.1; done"
        client = json.loads(
            proctor(
                "run", "-d", "--json", "--", "bash", "-c", f"{wait}; {curl(port)}; sleep 20"
            ).stdout
        )
        drain = proctor_popen(
            "drain",
            "--port",
            str(port),
            "--engine",
            "fake",
            "--poll",
            "1s",
            "--client",
            client["run_id"],
        )
        assert drain.stderr is not None
        seen: list[str] = []
        for line in drain.stderr:  # the first status line: the drain is watching
            seen.append(line)
            if line.startswith("[t="):
                break
        go.touch()
        out, rest = drain.communicate(timeout=120)
        stderr = "".join(seen) + rest
        assert drain.returncode == 2, stderr
        assert "Memory access fault" in stderr
        assert server.poll() is None, "drain must never kill a server it did not start"
    finally:
        server.kill()
        server.wait()


def _status_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("[t=")]


def test_ready_prints_on_change_not_every_second(fake_engine: int) -> None:
    # A start of several seconds printed one line a second ("31 lines for a 31 s start").
    run_id = start(fake_engine, "--startup-delay", "6")
    result = proctor("serve", "ready", run_id, "--timeout", "120s")
    assert result.returncode == 0, result.stderr
    elapsed = float(result.stderr.split("ready after ")[1].split("s")[0])
    lines = _status_lines(result.stderr)
    # What changed (nothing listening, then ready), plus a line per 15 s of nothing new.
    assert 1 <= len(lines) <= 2 + int(elapsed // 15), lines
    assert f"nothing listening on 127.0.0.1:{fake_engine} (connection refused)" in lines[0]
    assert "server process alive" in lines[0] and "alive=" not in result.stderr
    proctor("serve", "stop", run_id, check=True)


def test_ready_on_a_port_with_nothing_says_nothing_listens(fake_engine: int) -> None:
    # It said `alive=True` with no process at all on the port.
    result = proctor(
        "serve", "ready", "--port", str(fake_engine), "--engine", "fake", "--timeout", "3s"
    )
    assert result.returncode == 5, result.stderr
    assert "alive" not in result.stderr
    lines = _status_lines(result.stderr)
    assert 1 <= len(lines) <= 2, lines
    assert all("nothing listening on 127.0.0.1" in line for line in lines)
    assert "last answer: nothing listening" in result.stderr


def test_drain_tail_leaves_out_proctors_own_requests(fake_engine: int, isolated_runs: Path) -> None:
    # A drain's tail was 30 lines of its own `GET /metrics` scrapes.
    port = fake_engine
    run_id = start(port, "--log-probes", "--fault-after-requests", "1")
    assert proctor("serve", "ready", run_id, "--timeout", "60s").returncode == 0
    client = json.loads(
        proctor(
            "run", "-d", "--json", "--", "bash", "-c", f"sleep 10; {curl(port)}; sleep 30"
        ).stdout
    )
    try:
        result = proctor("drain", run_id, "--poll", "1s", "--client", client["run_id"])
        assert result.returncode == 2, result.stderr
        text = "\n".join(p.read_text() for p in (isolated_runs / run_id).glob("*.log"))
        assert text.count('"GET /metrics HTTP/1.1"') >= 3  # the scrapes are in the log ...
        tail = result.stderr.split("--- last lines of", 1)[1]
        assert '"GET /metrics' not in tail and '"GET /health' not in tail  # ... not the tail
        assert '"POST /v1/completions HTTP/1.1" 200' in tail
        assert "Memory access fault" in tail
    finally:
        proctor("runs", "stop", client["run_id"])
        proctor("serve", "stop", run_id)

"""Points 8 and 9 of issue 11: a flow's teardown covers every run it started, and flow and
sweep run directories carry the same evidence as any run (atomic exit_code, manifest)."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
from pathlib import Path

import jsonschema
import psutil
import pytest

from proctor.record.schema import MODELS, json_schema, parse_record
from tests.cli.test_serve_flow import curl, free_port, start
from tests.helpers import FAKE_ENGINE_TOML, proctor, proctor_popen

EXIT_CODE = re.compile(r"^\d+( SIG[A-Z0-9]+| (timeout|stopped)( \d+( SIG[A-Z0-9]+)?)?)?\n$")


@pytest.fixture
def fake_engine(tmp_path: Path) -> int:
    """A proctor.toml in the test's working directory with the fake server's engine profile."""
    (tmp_path / "work" / "proctor.toml").write_text(FAKE_ENGINE_TOML)
    return free_port()


def _records(runs: Path) -> dict[str, dict[str, object]]:
    out = {}
    for path in runs.glob("*/record.json"):
        out[path.parent.name] = json.loads(path.read_text())
    return out


def _dead(pid: int) -> bool:
    return not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_flow_and_sweep_directories_carry_the_same_evidence(
    fake_engine: int,
    isolated_runs: Path,
) -> None:
    port = fake_engine
    flow = proctor(
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
        curl(port),
        "--json",
    )
    assert flow.returncode == 0, flow.stderr
    server = start(port)
    assert proctor("serve", "ready", server, "--timeout", "30s").returncode == 0
    sweep = proctor(
        "sweep",
        "--server",
        server,
        "--concurrency",
        "1,2",
        "--isl",
        "8",
        "--osl",
        "4",
        "--prompt-multiplier",
        "2",
        "--json",
    )
    assert sweep.returncode == 0, sweep.stderr
    assert proctor("serve", "stop", server).returncode == 0
    records = _records(isolated_runs)
    kinds = {str(r["kind"]) for r in records.values()}
    assert {"flow", "sweep", "server", "workload", "bench"} <= kinds, kinds
    schema = json_schema()
    for run_id, record in records.items():
        # One schema for every kind: the shared core plus what the kind adds.
        jsonschema.validate(record, schema)
        assert parse_record(record).kind == record["kind"]
        assert type(parse_record(record)) is MODELS[str(record["kind"])]
        run = isolated_runs / run_id
        assert EXIT_CODE.match((run / "exit_code").read_text()), (record["kind"], run_id)
        assert not list(run.glob(".exit_code.*")), "a temporary file of an atomic write is left"
        verified = proctor("runs", "verify", run_id, "--json")
        assert verified.returncode == 0, (record["kind"], verified.stdout, verified.stderr)
        assert json.loads(verified.stdout)["verified"] is True
    listed = {
        row["id"]: row
        for row in json.loads(proctor("runs", "list", "--json", "--limit", "0").stdout)
    }
    for run_id, record in records.items():
        if record["kind"] in ("flow", "sweep"):
            assert listed[run_id]["outcome"] == "ok" and listed[run_id]["exit_code"] == 0
            # What every run records (issue 19, section 5): the command, the source, the times.
            argv = record["argv"]
            assert isinstance(argv, list) and argv[:2] == ["proctor", record["kind"]], argv
            assert record["source"] and record["host"], record
            assert record["started_at"] and record["ended_at"], record
            assert isinstance(record["duration_s"], float) and record["duration_s"] >= 0


def test_sigterm_to_a_flow_stops_its_workload_run_too(
    fake_engine: int,
    isolated_runs: Path,
) -> None:
    port = fake_engine
    controller = sleeping_flow(port)
    deadline = time.monotonic() + 60
    flow: dict[str, object] = {}
    while time.monotonic() < deadline:
        flows = [r for r in _records(isolated_runs).values() if r.get("kind") == "flow"]
        if flows and flows[0].get("workload_run"):
            flow = flows[0]
            break
        time.sleep(0.1)
    assert flow, "the flow never started its workload"
    workload_dir = isolated_runs / str(flow["workload_run"])
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and "process" not in json.loads(
        (workload_dir / "record.json").read_text()
    ):
        time.sleep(0.05)
    controller.send_signal(signal.SIGTERM)
    assert controller.wait(timeout=120) == 130, controller.communicate()[1]
    records = _records(isolated_runs)
    workload = records[workload_dir.name]
    assert workload["outcome"] == "stopped", workload
    assert (workload_dir / "exit_code").exists()
    assert _dead(int(workload["process"]["pid"]))  # type: ignore[index]
    server = records[str(flow["server_run"])]
    assert server["outcome"] == "stopped"
    assert _dead(int(server["process"]["pid"]))  # type: ignore[index]
    flow_dir = isolated_runs / str(flow["run_id"])
    assert (flow_dir / "exit_code").read_text() == "130 stopped\n"
    assert records[flow_dir.name]["outcome"] == "stopped"  # interrupted is stopped, not failed
    teardown = [s for s in records[flow_dir.name]["steps"] if s["step"] == "teardown"]  # type: ignore[union-attr]
    assert set(teardown[0]["stopped_runs"]) == {workload_dir.name, server["run_id"]}
    assert proctor("runs", "verify", flow_dir.name).returncode == 0


def test_ctrl_c_of_a_foreground_bench_stops_its_run(
    fake_engine: int,
    isolated_runs: Path,
) -> None:
    server = start(fake_engine, "--ttft", "60")
    assert proctor("serve", "ready", server, "--timeout", "30s").returncode == 0
    before = set(isolated_runs.iterdir())
    controller = proctor_popen(
        "bench",
        "--server",
        server,
        "--isl",
        "8",
        "--osl",
        "4",
        "--concurrency",
        "2",
        "--name",
        "slow",
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not any(
        (p / "wrapper.pid").exists() for p in set(isolated_runs.iterdir()) - before
    ):
        time.sleep(0.01)
    controller.send_signal(signal.SIGINT)  # the moment the bench's wrapper exists
    assert controller.wait(timeout=60) == 130, controller.communicate()[1]
    [bench] = [p for p in set(isolated_runs.iterdir()) - before if p.is_dir()]
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not (bench / "exit_code").exists():
        time.sleep(0.05)
    record = json.loads((bench / "record.json").read_text())
    assert record["outcome"] == "stopped", record
    assert _dead(int(record["process"]["pid"]))
    assert proctor("serve", "stop", server).returncode == 0


def sleeping_flow(port: int, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """`proctor flow` on the fake engine at `port` with a workload that sleeps 300 s (to be
    stopped), answering in JSON."""
    return proctor_popen(
        "flow", "--engine", "fake", "--model", "m", "--port", str(port), "--poll", "1s",
        "--workload-cmd", "sleep 300", "--json", env=env,
    )  # fmt: skip

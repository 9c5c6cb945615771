"""Flow files that list workloads: run in order against one server, each its own run, drained
and recorded; a failure stops the list (or not, with continue_on_failure); one report."""

from __future__ import annotations

import json
from pathlib import Path

import psutil
import pytest

from tests.cli.test_serve_flow import curl, fake_engine  # noqa: F401
from tests.helpers import GSM8K_DATA as GSM8K
from tests.helpers import proctor, wait_for_flow_step


def flow_file(tmp_path: Path, port: int, workloads: str, extra: str = "") -> Path:
    path = tmp_path / "flow.toml"
    path.write_text(
        f"""
[flow]
engine = "fake"
model = "m"
port = {port}
poll = "1s"
extra = ["--ttft", "0.01"]
{extra}

{workloads}
"""
    )
    return path


def steps(flow: dict[str, object]) -> list[str]:
    return [f"{s['step']}{s.get('index', '')}" for s in flow["steps"]]  # type: ignore[attr-defined, index]


def test_gsm8k_then_bench_against_one_server(
    fake_engine: int,
    isolated_runs: Path,
    tmp_path: Path,
) -> None:
    port = fake_engine
    path = flow_file(
        tmp_path,
        port,
        f"""
[[flow.workload]]
eval = {{ task = "gsm8k", limit = 3, fewshot = 1, num_concurrent = 2, data = "{GSM8K}" }}

[[flow.workload]]
name = "bench-small"
bench = {{ isl = 16, osl = 8, concurrency = 2, num_prompts = 6, num_warmups = 0 }}
""",
        extra="stuck_polls = 60  # lm-eval's start-up sends nothing for seconds",
    )
    result = proctor(
        "flow", "--file", str(path), "--json", env={"HF_HOME": str(tmp_path / "hf")}, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    flow = json.loads(result.stdout)
    assert steps(flow) == [
        "stop",
        "start",
        "ready",
        "workload0",
        "drain0",
        "workload1",
        "drain1",
        "teardown",
    ]
    rows = flow["workload_runs"]
    assert [(r["name"], r["kind"], r["exit_code"]) for r in rows] == [
        ("gsm8k", "eval", 0),
        ("bench-small", "bench", 0),
    ]
    server = flow["server_run"]
    for row in rows:
        run = isolated_runs / row["run_id"]
        record = json.loads((run / "record.json").read_text())
        assert record["group"] == flow["run_id"] and record["server_run"] == server
        assert (run / "exit_code").read_text() == "0\n"
    gsm = json.loads((isolated_runs / rows[0]["run_id"] / "metrics.json").read_text())
    assert gsm["kind"] == "gsm8k" and gsm["metrics"]["n_samples"] == 3
    bench = json.loads((isolated_runs / rows[1]["run_id"] / "metrics.json").read_text())
    assert bench["metrics"]["completed"] == 6
    # The eval ran first: its run ended before the bench's started.
    first = json.loads((isolated_runs / rows[0]["run_id"] / "record.json").read_text())
    second = json.loads((isolated_runs / rows[1]["run_id"] / "record.json").read_text())
    assert first["ended_at"] <= second["created_at"]
    pid = json.loads((isolated_runs / server / "record.json").read_text())["process"]["pid"]
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE

    report = proctor("report", flow["run_id"], "--json")
    assert report.returncode == 0, report.stderr
    shown = json.loads(report.stdout)
    assert {r["run_id"] for r in rows} <= set(shown["runs"])
    html = Path(shown["path"]).read_text()
    assert "bench-small" in html and "gsm8k" in html


@pytest.mark.parametrize("go_on", [False, True], ids=["stop", "continue"])
def test_a_failing_workload_stops_the_list_unless_continue(
    fake_engine: int,
    isolated_runs: Path,
    tmp_path: Path,
    go_on: bool,
) -> None:
    port = fake_engine
    path = flow_file(
        tmp_path,
        port,
        f"""
[[flow.workload]]
cmd = ["bash", "-c", "exit 5"]

[[flow.workload]]
cmd = {json.dumps(["bash", "-c", curl(port)])}
""",
        extra=f"continue_on_failure = {str(go_on).lower()}",
    )
    result = proctor("flow", "--file", str(path), "--json")
    assert result.returncode == 3, result.stderr[-3000:]
    flow = json.loads(result.stdout)
    codes = [(r["index"], r["exit_code"]) for r in flow["workload_runs"]]
    if go_on:
        assert steps(flow) == [
            "stop",
            "start",
            "ready",
            "workload0",
            "drain0",
            "workload1",
            "drain1",
            "teardown",
        ]
        assert codes == [(0, 3), (1, 0)]
    else:
        assert steps(flow) == ["stop", "start", "ready", "workload0", "drain0", "teardown"]
        assert codes == [(0, 3)]
        log = (isolated_runs / flow["run_id"] / "flow.log").read_text()
        assert "1 later workload(s) not run" in log
    assert (isolated_runs / flow["run_id"] / "exit_code").read_text() == "3\n"


@pytest.mark.parametrize(
    ("kind", "options"),
    [("bench", "isl = 16, concurency = 2"), ("sweep", "concurrency = [1, 2], concurency = 3")],
)
def test_a_bad_workload_option_fails_before_any_server(
    kind: str,
    options: str,
    isolated_runs: Path,
    tmp_path: Path,
    fake_engine: int,
) -> None:
    path = flow_file(
        tmp_path,
        fake_engine,
        f"""
[[flow.workload]]
{kind} = {{ {options} }}
""",
    )
    result = proctor("flow", "--file", str(path))
    assert result.returncode == 64, result.stderr
    assert f"{kind} workload" in result.stderr and "concurency" in result.stderr
    assert not isolated_runs.exists() or not any(isolated_runs.iterdir())


def test_workload_cmd_flag_is_a_list_of_one(
    fake_engine: int,
    isolated_runs: Path,
    tmp_path: Path,
) -> None:
    port = fake_engine
    path = flow_file(
        tmp_path,
        port,
        """
[[flow.workload]]
cmd = ["bash", "-c", "exit 7"]
""",
    )
    result = proctor("flow", "--file", str(path), "--workload-cmd", curl(port), "--json")
    assert result.returncode == 0, result.stderr[-3000:]
    flow = json.loads(result.stdout)
    assert steps(flow) == ["stop", "start", "ready", "workload0", "drain0", "teardown"]
    assert flow["workload_runs"][0]["kind"] == "cmd"


def test_resume_goes_on_with_the_next_workload(
    fake_engine: int,
    isolated_runs: Path,
    tmp_path: Path,
) -> None:
    import signal

    from tests.helpers import proctor_popen

    port = fake_engine
    slow = tmp_path / "slow.sh"
    slow.write_text(f"sleep 4\n{curl(port)}\n")
    path = flow_file(
        tmp_path,
        port,
        f"""
[[flow.workload]]
cmd = ["bash", "{slow}"]

[[flow.workload]]
cmd = {json.dumps(["bash", "-c", curl(port)])}
""",
    )
    controller = proctor_popen("flow", "--file", str(path))
    flow_dir = wait_for_flow_step(isolated_runs, "drain")
    assert flow_dir is not None, "the flow never reached its first drain"
    # What --resume reads back: the typed job, its two listed workloads (each its own typed
    # job: a cmd is a CommandJob) and its settings.
    job = json.loads((flow_dir / "record.json").read_text())["job"]
    listed = [w["job"] for w in job["workloads"]]
    assert job["kind"] == "flow" and [w["kind"] for w in listed] == ["command", "command"]
    assert listed[0]["argv"] == ["bash", str(slow)]
    assert job["server"]["port"] == port and "options" not in job
    controller.send_signal(signal.SIGKILL)
    controller.wait(timeout=10)
    resumed = proctor("flow", "--resume", flow_dir.name)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    flow = json.loads((flow_dir / "record.json").read_text())
    assert [(r["index"], r["exit_code"]) for r in flow["workload_runs"]] == [(0, 0), (1, 0)]
    assert len([s for s in flow["steps"] if s["step"] == "workload"]) == 2  # none started twice
    servers = [
        p
        for p in isolated_runs.iterdir()
        if (p / "record.json").exists()
        and json.loads((p / "record.json").read_text()).get("kind") == "server"
    ]
    assert len(servers) == 1


OFFLINE_FAKE = """#!{py}
import os, sys, time
for i in range(3):
    sys.stdout.write(f"\\rProcessed prompts: {{i + 1}}/3"); sys.stdout.flush(); time.sleep(0.05)
print()
print("Throughput: 2.50 requests/s, 1234.50 total tokens/s, 617.25 output tokens/s", flush=True)
sys.exit(int(os.environ.get("FAKE_RC", "0")))
"""


@pytest.mark.parametrize("rc", [0, 3])
def test_offline_workload_runs_while_the_server_is_up(
    fake_engine: int,
    isolated_runs: Path,
    tmp_path: Path,
    rc: int,
) -> None:
    """[[flow.workload]] offline: an offline job as the workload's run (kind offline, in the
    flow's group), its output parsed (tokens/s in its metrics.json); a failing one fails the
    flow (3)."""
    import sys

    fake = tmp_path / "fake_offline"
    fake.write_text(OFFLINE_FAKE.format(py=sys.executable))
    fake.chmod(0o755)
    path = flow_file(
        tmp_path,
        fake_engine,
        f"""
[[flow.workload]]
name = "offline-fake"
env = ["FAKE_RC={rc}"]
offline = {{ engine = "vllm", cmd = true, min_free_disk = 0, args = ["{fake}"] }}
""",
    )
    result = proctor("flow", "--file", str(path), "--json", timeout=180)
    assert result.returncode == rc, result.stderr[-3000:]
    flow = json.loads(result.stdout)
    assert steps(flow) == ["stop", "start", "ready", "workload0", "drain0", "teardown"]
    (row,) = flow["workload_runs"]
    assert row["name"] == "offline-fake" and row["exit_code"] == rc
    workload = isolated_runs / row["run_id"]
    record = json.loads((workload / "record.json").read_text())
    assert record["group"] == flow["run_id"] and record["kind"] == "offline"
    assert row["kind"] == "offline"
    offline = [
        p
        for p in isolated_runs.iterdir()
        if (p / "record.json").is_file()
        and json.loads((p / "record.json").read_text()).get("kind") == "offline"
    ]
    assert offline == [workload], sorted(p.name for p in isolated_runs.iterdir())
    doc = json.loads((workload / "metrics.json").read_text())
    assert doc["kind"] == "offline" and doc["metrics"]["output_throughput"] == 617.25
    assert doc["engine"] == "vllm" and doc["command"] == [str(fake)]
    assert (workload / "exit_code").read_text() == f"{rc}\n"


@pytest.mark.parametrize(
    ("body", "said"),
    [
        ('{ engin = "vllm", cmd = true, args = ["x"] }', "engin"),
        ('{ engine = "vllm", tp = "two", model = "/m" }', "tp"),
        ('{ engine = "vllm" }', "model"),
        ('{ engine = "vllm", model = "/m", args = "--x" }', "args must be a list"),
    ],
)
def test_a_bad_offline_option_fails_before_any_server(
    fake_engine: int,
    isolated_runs: Path,
    tmp_path: Path,
    body: str,
    said: str,
) -> None:
    path = flow_file(
        tmp_path,
        fake_engine,
        f"""
[[flow.workload]]
offline = {body}
""",
    )
    result = proctor("flow", "--file", str(path))
    assert result.returncode == 64, result.stderr
    assert "offline" in result.stderr and said in result.stderr
    assert not isolated_runs.exists() or not any(isolated_runs.iterdir())


def test_sweep_workload_sends_its_dataset_at_every_point(
    fake_engine: int,
    isolated_runs: Path,
    tmp_path: Path,
) -> None:
    import hashlib

    prompts = tmp_path / "p.jsonl"
    prompts.write_text(
        "".join(json.dumps({"prompt": f"p {i}", "output_len": 3}) + "\n" for i in range(12))
    )
    path = flow_file(
        tmp_path,
        fake_engine,
        f"""
[[flow.workload]]
sweep = {{ concurrency = [1, 2], osl = 4, num_prompts = 4, dataset = "jsonl:{prompts}" }}
""",
    )
    result = proctor("flow", "--file", str(path), "--json", timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]
    sha = hashlib.sha256(prompts.read_bytes()).hexdigest()
    points = [p for p in isolated_runs.iterdir() if (p / "metrics.json").is_file()]
    assert len(points) == 2, sorted(p.name for p in isolated_runs.iterdir())
    for point in points:
        doc = json.loads((point / "metrics.json").read_text())
        assert doc["dataset"]["kind"] == "jsonl" and doc["dataset"]["sha256"] == sha

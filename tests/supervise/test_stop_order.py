"""When proctor stops a run, the run's command is told first: nothing it started outside its
process group (a flow's server, in a session of its own) dies before the command has had its
SIGTERM and its grace. So a monitor inside the command (a flow's drain) sees proctor's stop,
never a death that the same stop caused: proctor's own reason wins, every time, not by race."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import psutil

from tests.cli.test_serve_flow import fake_engine  # noqa: F401
from tests.helpers import proctor

COMMAND = """
import json, signal, subprocess, sys, time
out = sys.argv[1]
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"],
                         start_new_session=True)

def on_term(*_):
    # What a monitor in here sees once it is told to stop: is what it started still alive?
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and child.poll() is None:
        time.sleep(0.05)
    with open(out, "w") as fh:
        json.dump({"child": child.pid, "alive": child.poll() is None}, fh)
    sys.exit(0)

signal.signal(signal.SIGTERM, on_term)
with open(out + ".ready", "w") as fh:
    fh.write(str(child.pid))
while True:
    time.sleep(1)
"""


def _wait_for(path: Path, timeout: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists():
            return True
        time.sleep(0.05)
    return False


def test_a_stopped_run_is_told_before_what_it_started_outside_its_group_dies(
    isolated_runs: Path, tmp_path: Path
) -> None:
    script = tmp_path / "cmd.py"
    script.write_text(COMMAND)
    out = tmp_path / "seen.json"
    run_id = json.loads(
        proctor("run", "-d", "--json", "--", sys.executable, str(script), str(out)).stdout
    )["run_id"]
    assert _wait_for(Path(f"{out}.ready")), "the command never started its child"
    stopped = proctor("runs", "stop", run_id)
    assert stopped.returncode == 0, stopped.stderr
    seen = json.loads(out.read_text())
    assert seen["alive"], "the child outside the group died before its parent was done"
    # ...and the stop still ends it, after its parent.
    child = seen["child"]
    assert not psutil.pid_exists(child) or psutil.Process(child).status() == psutil.STATUS_ZOMBIE


def test_a_flow_under_a_stopped_run_ends_stopped_not_server_died(
    fake_engine: int,
    isolated_runs: Path,
) -> None:
    """The pod's shape, on this machine: a flow run by a supervised job (as the far step runs
    it), the job stopped (as a budget stop does). The flow tears its server down itself and
    ends 130 (interrupted); its drain never reports the server's death (3)."""
    port = fake_engine
    workload = f"bash -c 'while :; do curl -s http://127.0.0.1:{port}/health; sleep 0.2; done'"
    job = json.loads(
        proctor(
            "run",
            "-d",
            "--json",
            "--",
            sys.executable,
            "-m",
            "proctor.cli.main",
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
            "600",
            "--workload-cmd",
            workload,
        ).stdout
    )["run_id"]
    deadline = time.monotonic() + 120
    flow_dir = None
    while time.monotonic() < deadline and flow_dir is None:
        for path in isolated_runs.iterdir():
            record = path / "record.json"
            if record.exists() and '"kind": "flow"' in record.read_text():
                steps = json.loads(record.read_text()).get("steps", [])
                if any(s["step"] == "drain" for s in steps):
                    flow_dir = path
        time.sleep(0.1)
    assert flow_dir is not None, "the flow never reached its drain"
    stopped = proctor("runs", "stop", job)
    assert stopped.returncode == 0, stopped.stderr
    record = json.loads((flow_dir / "record.json").read_text())
    assert record["exit_code"] == 130, record["steps"]
    drain = next(s for s in record["steps"] if s["step"] == "drain")
    assert drain.get("exit_code") in (None, 130), drain
    assert (isolated_runs / job / "exit_code").exists()

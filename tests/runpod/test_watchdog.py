"""The on-pod watchdog as a real subprocess (system python3, stdlib only) against the emulator."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from proctor.targets.runpod.budget import Budget, watchdog_argv, watchdog_source
from tests.fixtures.runpod_emulator import RunpodEmulator
from tests.helpers import wait_for

PYTHON = shutil.which("python3") or sys.executable  # the pod has a plain python3, not our venv


def start_watchdog(
    tmp_path: Path, emulator: RunpodEmulator, pod_id: str, key: str, args: list[str]
) -> subprocess.Popen[str]:
    script = tmp_path / "watchdog.py"
    script.write_text(watchdog_source())  # what the controller uploads
    env = {
        "PATH": os.environ["PATH"],
        "RUNPOD_POD_ID": pod_id,
        "RUNPOD_API_KEY": key,
        "PROCTOR_RUNPOD_API_URL": emulator.base_url,
    }
    return subprocess.Popen(
        [PYTHON, str(script), "--poll", "0.1", "--retry", "0.1", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def test_time_budget_stops_the_pod(
    tmp_path: Path, emulator: RunpodEmulator, canary_key: str
) -> None:
    pod_id = emulator.add_pod({"gpuTypeIds": ["NVIDIA H200"]})
    state = tmp_path / "watchdog.json"
    started = time.time()
    argv = watchdog_argv(
        Budget(started_at=started, max_time_s=1.0), None, script="unused", state_file=str(state)
    )[2:]
    proc = start_watchdog(tmp_path, emulator, pod_id, canary_key, argv)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    assert emulator.pods[pod_id]["desiredStatus"] == "EXITED"
    assert [r.route for r in emulator.calls("POST")] == ["/pods/{podId}/stop"]
    # Not before the budget was spent (the request's own time: no race with a loaded machine).
    assert emulator.calls("POST")[0].at >= started + 1.0
    assert all(r.auth_ok for r in emulator.requests)
    assert json.loads(state.read_text())["state"] == "stopped"
    assert canary_key not in out and canary_key not in state.read_text()


def test_cost_budget_stops_the_pod(
    tmp_path: Path, emulator: RunpodEmulator, canary_key: str
) -> None:
    pod_id = emulator.add_pod({"gpuTypeIds": ["NVIDIA H200"]})
    # 3600 credits/hr and a budget of 1 credit: spent after one second
    argv = watchdog_argv(Budget(started_at=time.time(), max_cost=1.0), 3600.0, script="x")[2:]
    proc = start_watchdog(tmp_path, emulator, pod_id, canary_key, argv)
    wait_for(lambda: emulator.pods[pod_id]["desiredStatus"] == "EXITED", 60, "the pod stopped")
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0 and "cost budget" in out


def test_failing_stop_is_retried_then_reported(
    tmp_path: Path, emulator: RunpodEmulator, canary_key: str
) -> None:
    pod_id = emulator.add_pod({"gpuTypeIds": ["NVIDIA H200"]})
    emulator.stop_mode = "fail"
    proc = start_watchdog(
        tmp_path, emulator, pod_id, canary_key, ["--deadline", str(time.time()), "--attempts", "3"]
    )
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 3 and "HTTP 500" in out
    assert len(emulator.calls("POST", "/pods/{podId}/stop")) == 3


@pytest.mark.parametrize("env_missing", ["RUNPOD_POD_ID", "RUNPOD_API_KEY"])
def test_missing_env_exits_2(tmp_path: Path, env_missing: str) -> None:
    script = tmp_path / "watchdog.py"
    script.write_text(watchdog_source())
    env = {"PATH": os.environ["PATH"], "RUNPOD_POD_ID": "p", "RUNPOD_API_KEY": "k"}
    del env[env_missing]
    done = subprocess.run(
        [PYTHON, str(script), "--deadline", "1"],
        env=env,
        capture_output=True,
        text=True,
        timeout=20,
    )
    assert done.returncode == 2 and "must be set" in done.stderr

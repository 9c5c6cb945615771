"""`proctor pod` as a real subprocess against the emulator: exit codes, JSON, guards, no leak."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.runpod_emulator import RunpodEmulator

H200 = "NVIDIA H200"


def pod_cli(
    emulator: RunpodEmulator, *args: str, key: str | None, home: Path
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "RUNPOD_API_KEY"}
    env["HOME"] = str(home)
    if key is not None:
        env["RUNPOD_API_KEY"] = key
    return subprocess.run(
        [sys.executable, "-m", "proctor.cli.pod", *args, "--api-url", emulator.base_url],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture
def home(tmp_path: Path) -> Path:
    path = tmp_path / "clihome"
    path.mkdir()
    return path


def test_list_and_status_json(emulator: RunpodEmulator, canary_key: str, home: Path) -> None:
    pod_id = emulator.add_pod({"gpuTypeIds": [H200], "gpuCount": 2, "name": "bench"})
    done = pod_cli(emulator, "list", "--json", key=canary_key, home=home)
    assert done.returncode == 0, done.stderr
    (row,) = json.loads(done.stdout)["pods"]
    assert (row["pod_id"], row["gpu_count"], row["desired_status"]) == (pod_id, 2, "RUNNING")
    done = pod_cli(emulator, "status", pod_id, "--json", key=canary_key, home=home)
    assert done.returncode == 0 and json.loads(done.stdout)["gpu_type_id"] == H200
    for out in (done.stdout, done.stderr):
        assert canary_key not in out


def test_stop_verified(emulator: RunpodEmulator, canary_key: str, home: Path) -> None:
    pod_id = emulator.add_pod({"gpuTypeIds": [H200]})
    done = pod_cli(emulator, "stop", pod_id, "--json", key=canary_key, home=home)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["pods"][0] == {
        "pod_id": pod_id,
        "action": "stopped",
        "desired_status": "EXITED",
        "verified": True,
        "error": None,
    }
    assert emulator.pods[pod_id]["desiredStatus"] == "EXITED"


def test_failing_stop_exits_69(emulator: RunpodEmulator, canary_key: str, home: Path) -> None:
    pod_id = emulator.add_pod({"gpuTypeIds": [H200]})
    emulator.stop_mode = "ignore"
    done = pod_cli(emulator, "stop", pod_id, "--timeout", "1", key=canary_key, home=home)
    assert done.returncode == 69
    assert "cleanup failed" in done.stderr and pod_id in done.stderr


def test_terminate_without_flag_exits_77_and_sends_no_delete(
    emulator: RunpodEmulator, canary_key: str, home: Path
) -> None:
    pod_id = emulator.add_pod({"gpuTypeIds": [H200]})
    done = pod_cli(emulator, "terminate", pod_id, key=canary_key, home=home)
    assert done.returncode == 77
    assert "--allow-terminate" in done.stderr
    assert emulator.calls("DELETE") == [] and pod_id in emulator.pods
    done = pod_cli(emulator, "terminate", pod_id, "--allow-terminate", key=canary_key, home=home)
    assert done.returncode == 0, done.stderr
    assert pod_id not in emulator.pods and len(emulator.calls("DELETE")) == 1


def test_start_waits_for_ssh(emulator: RunpodEmulator, canary_key: str, home: Path) -> None:
    pod_id = emulator.add_pod({"gpuTypeIds": [H200]}, status="EXITED")
    done = pod_cli(emulator, "start", pod_id, "--wait-ssh", "--json", key=canary_key, home=home)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["desired_status"] == "RUNNING"
    assert out["ssh_port"] == emulator.pods[pod_id]["portMappings"]["22"]


def test_missing_key_exits_64(emulator: RunpodEmulator, home: Path) -> None:
    done = pod_cli(emulator, "list", key=None, home=home)
    assert done.returncode == 64 and "RUNPOD_API_KEY" in done.stderr
    assert emulator.requests == []


def test_wrong_key_exits_64_without_echoing_it(emulator: RunpodEmulator, home: Path) -> None:
    wrong = "rpa_WRONGKEY_0123456789abcdef"
    done = pod_cli(emulator, "list", key=wrong, home=home)
    assert done.returncode == 64 and "401" in done.stderr
    assert wrong not in done.stdout + done.stderr


def test_unknown_pod_exits_69(emulator: RunpodEmulator, canary_key: str, home: Path) -> None:
    done = pod_cli(emulator, "status", "nosuchpod", key=canary_key, home=home)
    assert done.returncode == 69 and "not found" in done.stderr

"""`proctor pod stop|terminate|start --timeout` reads as every other duration: nan, inf, a
negative or an over-long one is a usage error (64) before any request, never an endless wait
for a state the pod does not reach (here: a stop the API ignores)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fixtures.runpod_emulator import RunpodEmulator
from tests.runpod.test_cli_pod import H200, pod_cli


@pytest.fixture
def home(tmp_path: Path) -> Path:
    path = tmp_path / "clihome"
    path.mkdir()
    return path


@pytest.mark.parametrize("command", ["stop", "start", "terminate"])
@pytest.mark.parametrize("value", ["nan", "inf", "-5", "400d", "soon"])
def test_a_timeout_that_is_no_duration_is_refused_before_any_request(
    emulator: RunpodEmulator, canary_key: str, home: Path, command: str, value: str
) -> None:
    pod_id = emulator.add_pod({"gpuTypeIds": [H200]})
    emulator.stop_mode = "ignore"  # a stop that never takes: a nan deadline waited forever
    extra = ["--allow-terminate"] if command == "terminate" else []
    done = pod_cli(emulator, command, pod_id, "--timeout", value, *extra, key=canary_key, home=home)
    assert done.returncode == 64, done.stdout + done.stderr
    assert f"invalid --timeout '{value}'" in done.stderr
    assert emulator.calls("POST") == [] and emulator.calls("DELETE") == []


def test_a_duration_with_a_unit_is_read(
    emulator: RunpodEmulator, canary_key: str, home: Path
) -> None:
    pod_id = emulator.add_pod({"gpuTypeIds": [H200]})
    done = pod_cli(emulator, "stop", pod_id, "--timeout", "1m", key=canary_key, home=home)
    assert done.returncode == 0, done.stderr
    assert emulator.pods[pod_id]["desiredStatus"] == "EXITED"

"""The API key appears in no artifact: records, CLI output, errors, watchdog files and argv."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from proctor.errors import ProctorError
from proctor.targets.runpod.budget import Budget, watchdog_argv, watchdog_source
from proctor.targets.runpod.client import RunpodClient
from proctor.targets.runpod.pods import PodSpec, acquire, release
from proctor.targets.runpod.retry import Backoff
from proctor.targets.runpod.volumes import resolve_volume
from tests.fixtures.runpod_emulator import RunpodEmulator

FAST = Backoff(initial=0.01, factor=1.0, maximum=0.01)


def test_key_in_no_artifact(tmp_path: Path, emulator: RunpodEmulator, canary_key: str) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    emulator.add_volume("mxx", "EU-RO-1")
    client = RunpodClient(canary_key, emulator.base_url)
    volume = resolve_volume(client, project="mxx").volume
    spec = PodSpec(gpu_type="NVIDIA H200", image="img", env={"NOTE": "x"})
    got = acquire(
        client, spec, run_id="leak", volume=volume, deadline=time.time() + 20, backoff=FAST
    )
    budget = Budget(started_at=time.time(), max_time_s=3600)
    argv = watchdog_argv(budget, got[0].pod.costPerHr, script="/workspace/.proctor/watchdog.py")
    (run_dir / "watchdog.py").write_text(watchdog_source())
    errors: list[str] = []
    emulator.stop_mode = "fail"
    try:
        release(client, [a.pod.id for a in got], timeout_s=1, backoff=FAST)
    except ProctorError as error:
        errors.append(error.one_line())
        errors.append(repr(error))
    emulator.stop_mode = "ok"
    states = release(client, [a.pod.id for a in got], backoff=FAST)
    record = {
        "pods": [a.to_record() for a in got],
        "final": [s.to_record() for s in states],
        "watchdog_argv": argv,
        "errors": errors,
        "client": repr(client),
        "emulator_requests": [r.__dict__ for r in emulator.requests],
    }
    (run_dir / "record.json").write_text(json.dumps(record, default=str))
    env = {**os.environ, "RUNPOD_API_KEY": canary_key}
    for args in (["list", "--json"], ["status", got[0].pod.id], ["terminate", got[0].pod.id]):
        done = subprocess.run(
            [sys.executable, "-m", "proctor.cli.pod", *args, "--api-url", emulator.base_url],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        (run_dir / f"cli-{args[0]}.log").write_text(done.stdout + done.stderr)
    client.close()

    assert errors, "the failing stop must have been reported"
    files = [p for p in run_dir.rglob("*") if p.is_file()]
    assert len(files) == 5
    for path in files:
        assert canary_key not in path.read_text(), f"API key leaked into {path.name}"
    assert canary_key[-12:] not in json.dumps(record, default=str)


@pytest.mark.parametrize("status", [400, 401, 500])
def test_echoed_key_is_redacted_in_errors(
    emulator: RunpodEmulator, canary_key: str, status: int
) -> None:
    emulator.inject("GET", "/networkvolumes", status, f"bad key {canary_key}")
    with RunpodClient(canary_key, emulator.base_url) as client, pytest.raises(ProctorError) as e:
        client.list_network_volumes()
    assert canary_key not in e.value.one_line() and "<redacted>" in e.value.message

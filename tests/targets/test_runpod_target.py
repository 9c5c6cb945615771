"""`proctor run --target runpod` against the spec-checking emulator, pods mapped onto real SSH hosts."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.runpod_emulator import RunpodEmulator, running
from tests.helpers import proctor
from tests.infra.sshhosts import SshHostLab, ssh_hosts, ssh_hosts_factory
from tests.targets.conftest import host_flags

pytestmark = pytest.mark.sshhosts
__all__ = ["ssh_hosts", "ssh_hosts_factory"]

KEY = "rpa_CANARY0remote7d1f0c2e9b8a4f6e3d5c7b9a1e2f4d6c8b0a"
H200 = "NVIDIA H200"


@pytest.fixture
def pods(ssh_hosts: SshHostLab) -> Iterator[RunpodEmulator]:
    """An emulator whose pods are the namespace hosts, in turn."""
    hosts = itertools.cycle(ssh_hosts.hosts)

    def on_create(pod: dict[str, Any]) -> tuple[str, int]:
        host = next(hosts)
        return host.address, host.port

    yield from running(RunpodEmulator(api_key=KEY, on_create=on_create))


def _run(
    emulator: RunpodEmulator,
    lab: SshHostLab,
    project: Path,
    *extra: str,
    argv: tuple[str, ...] = ("sh", "job.sh", "pod", "2", "0"),
) -> Any:
    host = lab.hosts[0]
    return proctor(
        "run",
        "--target",
        "runpod",
        "--api-url",
        emulator.base_url,
        "--gpu-type",
        H200,
        "--image",
        "runpod/pytorch",
        *host_flags(host),
        "--json",
        *extra,
        "--",
        *argv,
        env={"RUNPOD_API_KEY": KEY},
        cwd=project,
        timeout=150,
    )


def _no_key_anywhere(*roots: Path) -> None:
    for root in roots:
        for path in root.rglob("*"):
            if path.is_file() and path.name != "env.sh":
                assert KEY.encode() not in path.read_bytes(), path


def test_create_run_stop_verified(
    pods: RunpodEmulator, ssh_hosts: SshHostLab, project: Path, isolated_runs: Path
) -> None:
    result = _run(pods, ssh_hosts, project)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["result_known"] and report["logs_verified"] and report["release_verified"]
    assert report["release"]["action"] == "stopped"
    assert report["target"]["kind"] == "runpod"
    pod = report["target"]["details"]["pod"]
    assert pod["gpu_count"] == 1 and pod["cost_per_hr"] and pod["volume_mount_path"]
    (pod_id,) = pods.pods
    assert pods.pods[pod_id]["desiredStatus"] == "EXITED"
    assert [r.body["gpuTypeIds"] for r in pods.calls("POST", "/pods")] == [[H200]]
    run = Path(report["local_dir"])
    assert (run / "exit_code").read_text().strip() == "0"
    record = json.loads((run / "record.json").read_text())
    assert record["pod"]["pod_id"] == pod_id
    _no_key_anywhere(isolated_runs, ssh_hosts.hosts[0].workspace)


def test_sold_out_exits_69(pods: RunpodEmulator, ssh_hosts: SshHostLab, project: Path) -> None:
    pods.sold_out.add(H200)
    result = _run(pods, ssh_hosts, project)
    assert result.returncode == 69, result.stderr
    assert "no longer any instances" in result.stderr
    assert KEY not in result.stderr + result.stdout


def test_terminate_without_flag_is_77_and_sends_nothing(
    pods: RunpodEmulator, ssh_hosts: SshHostLab, project: Path
) -> None:
    result = _run(pods, ssh_hosts, project, "--terminate")
    assert result.returncode == 77, result.stderr
    assert "--allow-terminate" in result.stderr
    assert pods.calls("DELETE") == [] and pods.calls("POST", "/pods") == []


def test_failing_stop_is_reported(
    pods: RunpodEmulator, ssh_hosts: SshHostLab, project: Path
) -> None:
    pods.stop_mode = "fail"
    result = _run(pods, ssh_hosts, project)
    assert result.returncode == 69, result.stderr
    report = json.loads(result.stdout)
    assert report["result_known"] and report["logs_verified"]
    assert report["release_verified"] is False
    assert any("cleanup" in u for u in report["unmet"])


@pytest.mark.slow
def test_two_pods_one_group_report(
    pods: RunpodEmulator, ssh_hosts: SshHostLab, project: Path, isolated_runs: Path
) -> None:
    result = _run(pods, ssh_hosts, project, "--pods", "2")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert len(report["runs"]) == 2 and report["all_known"] and report["all_verified"]
    assert report["all_released"]
    hosts = {r["target"]["host"] for r in report["runs"]}
    assert hosts == {h.address for h in ssh_hosts.hosts}
    assert all(p["desiredStatus"] == "EXITED" for p in pods.pods.values())
    assert (isolated_runs / ".groups" / f"{report['group']}.json").is_file()
    _no_key_anywhere(isolated_runs)


@pytest.mark.slow
def test_budget_watchdog_stops_the_pod(
    pods: RunpodEmulator, ssh_hosts: SshHostLab, project: Path
) -> None:
    host = ssh_hosts.hosts[0]
    # The pod's own environment: Runpod injects a pod-scoped key; here env.sh plays that part.
    (host.workspace / "env.sh").write_text(
        f"export RUNPOD_API_KEY={KEY}\nexport PROCTOR_RUNPOD_API_URL={pods.base_url}\n"
    )
    result = _run(
        pods, ssh_hosts, project, "--max-time", "4s", argv=("sh", "job.sh", "long", "40", "0")
    )
    assert result.returncode == 4, result.stderr
    stops = pods.calls("POST", "/pods/{podId}/stop")
    assert len(stops) >= 1
    state = json.loads(next((host.workspace / "proctor").glob("watchdog-*.json")).read_text())
    assert state, state
    assert all(p["desiredStatus"] == "EXITED" for p in pods.pods.values())

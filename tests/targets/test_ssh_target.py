"""The SSH target against real OpenSSH hosts in network namespaces."""

from __future__ import annotations

import io
import json
import os
import signal
import time
from pathlib import Path

import pytest

from proctor.errors import FaultDetected, TargetUnavailable
from proctor.source.archive import SourceMismatch
from proctor.source.identity import source_identity
from proctor.targets.base import JobSpec
from proctor.targets.remote.orchestrate import REMOTE_FILE, run_remote
from proctor.targets.ssh import SshOptions, SshTarget
from tests.helpers import TEST_PYTHON, only_run, proctor, proctor_popen
from tests.infra.sshhosts import SshHost, SshHostLab, ssh_hosts, ssh_hosts_factory
from tests.targets.conftest import ssh_flags, ssh_options
from tests.targets.far_commands import dead_port, run_unreachable

pytestmark = pytest.mark.sshhosts
__all__ = ["ssh_hosts", "ssh_hosts_factory"]


def _target(host: SshHost) -> SshTarget:
    return SshTarget(ssh_options(host, remote_python=TEST_PYTHON, reconnect_s=30))


def _wait(predicate: object, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return True
        time.sleep(0.1)
    return False


@pytest.mark.slow
def test_round_trip_survives_cut_and_killed_controller(
    lone_lab: SshHostLab, project: Path, isolated_runs: Path
) -> None:
    host = lone_lab.hosts[0]
    os.chdir(project)
    ctl = proctor_popen(
        "run",
        *ssh_flags(host),
        "--env",
        "API_TOKEN=tok-SECRET-42",
        "--",
        "sh",
        "job.sh",
        "rt",
        "16",
        "3",
    )
    assert _wait(lambda: any((d / REMOTE_FILE).exists() for d in isolated_runs.glob("2*")))
    run = only_run(isolated_runs)
    remote = json.loads((run / REMOTE_FILE).read_text())
    far = Path(remote["remote_dir"])
    assert far.is_relative_to(host.workspace / "proctor" / "runs")
    assert _wait(lambda: b"tick 1" in (far / remote["log"]).read_bytes())
    lone_lab.cut(host)
    time.sleep(1.0)
    ctl.send_signal(signal.SIGKILL)
    ctl.wait(10)
    assert not (far / "exit_code").exists()  # still running on the host, cable pulled
    lone_lab.restore(host)
    result = proctor("runs", "attach", run.name, timeout=90)
    assert result.returncode == 3, result.stderr
    assert "start rt" in result.stdout and "done rt" in result.stdout
    assert "result known:   yes" in result.stderr
    # Fetched, and verified against the far manifest.
    assert (run / "exit_code").read_text().strip() == "3"
    assert proctor("runs", "verify", run.name).returncode == 0
    completion = json.loads((run / ".completion.json").read_text())
    assert completion["logs_verified"] and completion["result_known"]
    assert completion["source"]["dirty"] is True
    record = json.loads((run / "record.json").read_text())
    assert record["target"]["kind"] == "ssh" and record["target"]["host"] == host.address
    assert record["source"]["dirty"] is True
    # The secret is in no file proctor wrote, here or there.
    for path in [*run.rglob("*"), *far.rglob("*")]:
        if path.is_file():
            assert b"tok-SECRET-42" not in path.read_bytes(), path


def test_tampered_remote_artifact_is_detected(
    ssh_hosts: SshHostLab, project: Path, tmp_path: Path
) -> None:
    host = ssh_hosts.hosts[0]
    target = _target(host)
    runs = tmp_path / "local-runs"
    try:
        job = JobSpec(argv=["sh", "job.sh", "x"])
        first = run_remote(target, source_identity(project), job, runs, io.BytesIO())
        assert first.logs_verified and first.exit_status() == 0
        far = host.workspace / "proctor" / "runs" / str(first.run_id)
        log = next(far.glob("*.log"))
        log.write_text(log.read_text() + "forged line\n")
        fetched = target.fetch(str(first.run_id), tmp_path / "again")
    finally:
        target.close()
    assert not fetched.verified and fetched.changed == [log.name]
    from proctor.targets.remote.orchestrate import Completion, apply_fetch

    c = Completion("r", "d", {}, {}, result_known=True, exit_code=0)
    apply_fetch(c, fetched)
    with pytest.raises(FaultDetected):
        c.exit_status()


def test_manifest_mismatch_refuses_to_run(ssh_hosts: SshHostLab, project: Path) -> None:
    host = ssh_hosts.hosts[0]
    target = _target(host)
    try:
        target.prepare()
        synced = target.sync_source(source_identity(project))
        assert synced.action == "shipped" and synced.verified
        (Path(synced.checkout) / "job.sh").write_text("echo evil\n")
        with pytest.raises(SourceMismatch) as info:
            target.start(JobSpec(argv=["sh", "job.sh"]))
    finally:
        target.close()
    assert info.value.exit_code == 69 and "job.sh" in info.value.message
    assert list((host.workspace / "proctor" / "runs").glob("2*")) == []


def test_reused_checkout_is_left_untouched(ssh_hosts: SshHostLab, project: Path) -> None:
    host = ssh_hosts.hosts[0]
    ident = source_identity(project)
    target = _target(host)
    try:
        target.prepare()
        assert target.sync_source(ident).action == "shipped"
        again = target.sync_source(ident)
        assert again.action == "reused" and again.verified
        checkout = Path(again.checkout)
        (checkout / "local-edit.txt").write_text("someone's work\n")
        before = {p: p.read_bytes() for p in checkout.rglob("*") if p.is_file()}
        report = target.sync_source(ident)
        assert not report.verified and report.untracked == ["local-edit.txt"]
        with pytest.raises(SourceMismatch):
            target.start(JobSpec(argv=["sh", "job.sh"]))
        after = {p: p.read_bytes() for p in checkout.rglob("*") if p.is_file()}
    finally:
        target.close()
    assert after == before


def test_keyed_run_attaches_remotely(ssh_hosts: SshHostLab, project: Path) -> None:
    host = ssh_hosts.hosts[1]
    target = _target(host)
    try:
        target.prepare()
        target.sync_source(source_identity(project))
        job = JobSpec(argv=["sh", "job.sh", "k", "6"], key="bench-1")
        first = target.start(job)
        second = target.start(job)
        assert not first.attached and second.attached and second.run_id == first.run_id
        assert target.stop(first.run_id)
        state = target.wait(first.run_id, timeout=30)
    finally:
        target.close()
    assert state.state == "finished" and state.outcome == "stopped"
    assert len(list((host.workspace / "proctor" / "runs").glob("2*"))) == 1


def test_unreachable_host_exits_69(project: Path, tmp_path: Path) -> None:
    port = dead_port()
    result = run_unreachable(port, project)
    assert result.returncode == 69, result.stderr
    assert f"127.0.0.1:{port}" in result.stderr and "reachable" in result.stderr
    try:
        target = SshTarget(SshOptions(host="127.0.0.1", port=port, insecure_accept_host_key=True))
        with pytest.raises(TargetUnavailable):
            target.prepare()
    finally:
        target.close()

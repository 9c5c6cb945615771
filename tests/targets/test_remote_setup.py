"""The far side's setup: the project setup script once per workspace, env.sh in every shell,
proctor's own venv, and bounded connection retries (give up on the same error; reconnect to a
host that comes back)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from proctor.errors import TargetUnavailable
from proctor.targets.remote.orchestrate import COMPLETION_FILE, REMOTE_FILE
from proctor.targets.ssh import SshTarget
from tests.helpers import TEST_PYTHON, only_run, proctor
from tests.infra.sshhosts import SshHost, SshHostLab, ssh_hosts, ssh_hosts_factory
from tests.targets.conftest import ssh_flags, ssh_options
from tests.targets.far_commands import dead_port, run_unreachable

pytestmark = pytest.mark.sshhosts
__all__ = ["ssh_hosts", "ssh_hosts_factory"]

BASE_PYTHON = TEST_PYTHON
SETUP = """#!/bin/bash
set -e
echo "setup ran in $(pwd)" >> "$SETUP_COUNT"
"""


def test_setup_runs_once_per_workspace_and_env_sh_is_sourced(
    ssh_hosts: SshHostLab, project: Path, isolated_runs: Path
) -> None:
    host = ssh_hosts.hosts[0]
    count = host.workspace / "setup-count"
    (host.workspace / "env.sh").write_text(
        f"export PROCTOR_TEST_MARK=from-env-sh\nexport SETUP_COUNT={count}\n"
    )
    (project / "scripts").mkdir()
    (project / "scripts" / "setup.sh").write_text(SETUP)
    (project / "proctor.toml").write_text('setup = "scripts/setup.sh"\n')
    argv = [*ssh_flags(host), "--", "sh", "-c", 'echo "mark=$PROCTOR_TEST_MARK"']
    seen = []
    for _ in range(2):
        result = proctor("run", *argv, cwd=project, timeout=120)
        assert result.returncode == 0, result.stderr
        assert "mark=from-env-sh" in result.stdout  # the job saw what env.sh exported
        runs = sorted(p for p in isolated_runs.iterdir() if p.is_dir() and p.name not in seen)
        seen.append(runs[-1].name)
        remote = json.loads((runs[-1] / REMOTE_FILE).read_text())
        assert remote["prepared"]["env_sh"] == str(host.workspace / "env.sh")
    first = json.loads((isolated_runs / seen[0] / REMOTE_FILE).read_text())["prepared"]["setup"]
    second = json.loads((isolated_runs / seen[1] / REMOTE_FILE).read_text())["prepared"]["setup"]
    assert (first, second) == ("ran", "already-done")
    assert len(count.read_text().splitlines()) == 1
    marker = host.workspace / "proctor" / "setup.done"
    assert "scripts/setup.sh" in marker.read_text()
    assert "far side:" in result.stderr and "setup already-done" in result.stderr


def test_far_venv_is_created_reported_and_reused(ssh_hosts: SshHostLab) -> None:
    host = ssh_hosts.hosts[1]
    venv = host.workspace / "proctor" / "venv"
    results = []
    for _ in range(2):
        target = SshTarget(ssh_options(host, venv_base=BASE_PYTHON))
        try:
            results.append(target.prepare())
        finally:
            target.close()
    first, second = results
    assert first.python == second.python == str(venv / "bin" / "python")
    assert first.proctor_path is None  # installed in the venv, not put on PYTHONPATH
    assert first.found["venv"]["action"] == "installed" and first.found["venv"]["created"]
    assert second.found["venv"]["action"] == "reused"
    assert first.found["base_python"] == BASE_PYTHON
    # The venv's own python imports the installed proctor, with nothing on PYTHONPATH.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import proctor; print(proctor.__file__)"],
        capture_output=True,
        text=True,
        env=env,
        cwd="/",
        check=True,
    )
    assert out.stdout.strip().startswith(str(venv))
    assert (venv / "bin" / "proctor").is_file()


def test_far_venv_without_dependencies_is_refused_with_the_reason(ssh_hosts: SshHostLab) -> None:
    host = ssh_hosts.hosts[0]
    bare = "/usr/bin/python3"  # Debian's python: no pydantic, no psutil
    if subprocess.run([bare, "-c", "import pydantic"], capture_output=True).returncode == 0:
        pytest.skip("system python has pydantic here")
    target = SshTarget(ssh_options(host, venv_base=bare))
    try:
        with pytest.raises(TargetUnavailable) as info:
            target.prepare()
    finally:
        target.close()
    assert info.value.exit_code == 69 and "pydantic" in info.value.message


def test_unreachable_host_gives_up_on_the_same_error_reported_once(project: Path) -> None:
    port = dead_port()
    t0 = time.monotonic()
    result = run_unreachable(port, project)
    elapsed = time.monotonic() - t0
    assert result.returncode == 69, result.stderr
    assert "2 attempt(s)" in result.stderr and "the same error twice" in result.stderr
    assert result.stderr.count(f"127.0.0.1', {port}") == 1  # the error, reported once
    assert elapsed < 30


def _ssh_links(pid: int, host: SshHost) -> set[tuple[str, int]]:
    """The local ends of `pid`'s established TCP connections to the host's SSH port."""
    return {
        (c.laddr.ip, c.laddr.port)
        for c in psutil.Process(pid).net_connections("tcp")
        if c.raddr
        and c.raddr.ip == host.address
        and c.raddr.port == host.port
        and c.status == psutil.CONN_ESTABLISHED
    }


@pytest.mark.slow
def test_host_cut_then_restored_is_reconnected(
    lone_lab: SshHostLab, project: Path, isolated_runs: Path
) -> None:
    host = lone_lab.hosts[0]
    ctl = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "proctor.cli.main",
            "run",
            *ssh_flags(host),
            "--json",
            "--",
            "sh",
            "job.sh",
            "rc",
            "24",
            "0",
        ],
        cwd=project,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    far_log = None
    while time.monotonic() < deadline and far_log is None:
        for d in isolated_runs.glob("2*"):
            if (d / REMOTE_FILE).exists():
                remote = json.loads((d / REMOTE_FILE).read_text())
                log = Path(remote["remote_dir"]) / remote["log"]
                if log.exists() and b"tick 1" in log.read_bytes():
                    far_log = log
        time.sleep(0.1)
    assert far_log is not None
    before = _ssh_links(ctl.pid, host)
    assert before, "the controller holds no SSH connection to the host"
    lone_lab.cut(host)
    time.sleep(6)  # long enough for keepalive to drop the connection and connects to time out
    # Restored only once the controller has dropped the connection it had (keepalive is
    # slower on a loaded machine): a link restored before that carries on, with no reconnect.
    deadline = time.monotonic() + 60
    while before & _ssh_links(ctl.pid, host):
        assert time.monotonic() < deadline, "the controller never noticed the cut"
        time.sleep(0.1)
    lone_lab.restore(host)
    out, err = ctl.communicate(timeout=120)
    assert ctl.returncode == 0, err
    completion = json.loads(out)
    assert completion["reconnects"] >= 1 and completion["logs_verified"]
    run = only_run(isolated_runs)
    assert json.loads((run / COMPLETION_FILE).read_text())["reconnects"] >= 1
    assert "done rc" in (run / remote["log"]).read_text()

"""Fixtures for remote-target tests: a dirty git project and CLI flags for a namespace host."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.helpers import TEST_PYTHON
from tests.infra.sshhosts import SshHost

JOB = """#!/bin/sh
echo "start $1"
i=0
while [ $i -lt "${2:-0}" ]; do echo "tick $i"; i=$((i+1)); sleep 0.5; done
echo "done $1"
exit "${3:-0}"
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A git project with a committed job script and an uncommitted change (dirty)."""
    repo = tmp_path / "project"
    repo.mkdir()
    (repo / "job.sh").write_text(JOB)
    git = ["git", "-c", "user.email=t@example.com", "-c", "user.name=t"]
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    subprocess.run([*git, "add", "."], cwd=repo, check=True)
    subprocess.run([*git, "commit", "-qm", "job"], cwd=repo, check=True)
    (repo / "notes.txt").write_text("uncommitted\n")
    return repo


def ssh_flags(host: SshHost) -> list[str]:
    return [
        "--target", f"ssh://{host.user}@{host.address}:{host.port}",
        "--identity-file", str(host.client_key),
        "--known-hosts", str(host.known_hosts),
        "--workspace", str(host.workspace),
        "--remote-python", TEST_PYTHON,
    ]  # fmt: skip

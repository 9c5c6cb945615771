"""Fixtures for remote-target tests: a dirty git project, CLI flags and SshOptions for a
namespace host, the Slurm cluster."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.fixtures.fake_openai_server import free_port
from tests.helpers import REPO, TEST_PYTHON, git_project
from tests.infra.slurmcluster import SlurmCluster, slurm_cluster, slurm_nodes
from tests.infra.sshhosts import SshHost, SshHostLab, ssh_hosts, ssh_hosts_factory

if TYPE_CHECKING:
    from proctor.targets.ssh import SshOptions

__all__ = ["slurm_cluster", "slurm_nodes", "ssh_hosts", "ssh_hosts_factory"]

JOB = """#!/bin/sh
echo "start $1"
i=0
while [ $i -lt "${2:-0}" ]; do echo "tick $i"; i=$((i+1)); sleep 0.5; done
echo "done $1"
exit "${3:-0}"
"""


@pytest.fixture
def cluster(slurm_cluster: SlurmCluster) -> SlurmCluster:
    """The Slurm cluster of the Slurm target tests (`slurm_nodes` nodes, 2 unless a module
    overrides it)."""
    return slurm_cluster


#: A workload for the fake engine: one completion on port $1, then `sleep $2`.
WORKLOAD_SH = (
    'curl -sS "http://127.0.0.1:$1/v1/completions" '
    '-d \'{"model": "m", "prompt": "hi", "max_tokens": 5}\'\n'
    'echo "workload done"\nsleep "${2:-0}"\n'
)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A git project with a committed job script and an uncommitted change (dirty)."""
    repo = git_project(tmp_path / "project", {"job.sh": JOB}, "job")
    (repo / "notes.txt").write_text("uncommitted\n")
    return repo


@pytest.fixture
def lone_lab(ssh_hosts_factory: Callable[[int], SshHostLab]) -> SshHostLab:
    """A lab of one host, for tests that cut its link."""
    return ssh_hosts_factory(1)


def ssh_flags(host: SshHost) -> list[str]:
    return ["--target", f"ssh://{host.user}@{host.address}:{host.port}", *host_flags(host)]


def host_flags(host: SshHost) -> list[str]:
    """How a command reaches `host` once its target names it: key, known hosts, workspace and
    the far side's base Python."""
    return [
        "--identity-file",
        str(host.client_key),
        "--known-hosts",
        str(host.known_hosts),
        "--workspace",
        str(host.workspace),
        "--remote-python",
        TEST_PYTHON,
    ]


def ssh_options(host: SshHost, **extra: object) -> SshOptions:
    """SshOptions that reach `host` (its key, known hosts and workspace), with `extra`."""
    from proctor.targets.ssh import SshOptions  # asyncssh: only for the tests that use it

    return SshOptions(
        host=host.address,
        user=host.user,
        port=host.port,
        identity_file=str(host.client_key),
        known_hosts=str(host.known_hosts),
        workspace=str(host.workspace),
        **extra,
    )  # type: ignore[arg-type]


@dataclass
class FarPlace:
    """Where a far-target test runs: a real SSH host (namespace) or `dir://NAME` (a second
    local directory through the same agent path, tests/infra/dirtarget.py)."""

    kind: str
    url: str
    workspace: Path
    remote_toml: str  # the [remote] settings that reach it, for a project's proctor.toml
    ssh: SshHost | None = None

    def port(self, wanted: int) -> int:
        """`wanted` in a host's own network namespace; a free port for a local directory."""
        if self.ssh is not None:
            return wanted
        return free_port()


@pytest.fixture(params=["ssh", "dir"])
def far_place(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> FarPlace:
    """The same test on ssh:// and on the test-only dir:// target (registered through
    PROCTOR_TARGETS, with no change in the CLI)."""
    if request.param == "ssh":
        host = request.getfixturevalue("ssh_hosts").hosts[0]
        toml = (
            f'identity_file = "{host.client_key}"\nknown_hosts = "{host.known_hosts}"\n'
            f'workspace = "{host.workspace}"\n'
        )
        return FarPlace(
            "ssh", f"ssh://{host.user}@{host.address}:{host.port}", host.workspace, toml, host
        )
    workspace = tmp_path / "far-dir"
    monkeypatch.setenv("PROCTOR_TARGETS", "tests.infra.dirtarget")
    path = os.environ.get("PYTHONPATH")
    monkeypatch.setenv("PYTHONPATH", str(REPO) + (os.pathsep + path if path else ""))
    return FarPlace("dir", "dir://gpu-box", workspace, f'workspace = "{workspace}"\n')

"""The target registry: URLs parse to typed options per kind, flags a kind does not take are
refused naming the kinds that do, capabilities are declared by the kinds and their targets, and
the far agent refuses a malformed request naming the field."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from proctor.errors import UsageError
from proctor.spec.config import ProjectConfig
from proctor.targets.base import FAR, INSPECT, PLAN, Target, capable
from proctor.targets.registry import (
    TargetContext,
    kinds,
    open_target,
    options_from_dict,
    target_options,
)
from tests.helpers import proctor


def _config(**tables: dict[str, object]) -> ProjectConfig:
    return ProjectConfig.model_validate(tables)


@pytest.mark.parametrize(
    ("url", "kind"),
    [
        ("local", "local"),
        ("ssh://me@gpu1:2222", "ssh"),
        ("runpod", "runpod"),
        ("runpod:abc,def?keep", "runpod"),
        ("runpod?max-cost=2.5", "runpod"),
        ("slurm://login", "slurm"),
        ("slurm", "slurm"),
    ],
)
def test_every_builtin_url_parses_to_its_kind(url: str, kind: str) -> None:
    spec = target_options(url, ProjectConfig())
    assert spec.kind == kind and spec.url == url
    # The typed options survive JSON, validated by the model of their kind.
    assert options_from_dict(json.loads(spec.model_dump_json())) == spec


def test_flags_win_over_the_remote_table() -> None:
    config = _config(remote={"identity_file": "/keys/a", "workspace": "/ws", "python": "py3"})
    spec = target_options("ssh://me@gpu1:2222", config, identity_file="/keys/b")
    data = spec.model_dump()
    assert data["host"] == "gpu1" and data["user"] == "me" and data["port"] == 2222
    assert data["identity_file"] == "/keys/b" and data["workspace"] == "/ws"
    assert data["remote_python"] == "py3"
    pod = target_options("runpod:p1?keep&max-cost=3", config, reuse_pods=["p0"], gpu_type="H100")
    assert pod.model_dump()["reuse_pods"] == ["p0", "p1"] and pod.model_dump()["keep"] is True
    assert pod.model_dump()["max_cost"] == 3.0 and pod.model_dump()["ssh"]["workspace"] == "/ws"


def test_a_flag_the_kind_does_not_take_names_the_kinds_that_do() -> None:
    with pytest.raises(UsageError) as info:
        target_options("local", ProjectConfig(), nodes=2)
    assert "--nodes" in info.value.message and "slurm://" in str(info.value.hint)
    with pytest.raises(UsageError) as info:
        target_options("ssh://h", ProjectConfig(), gpu_type="H100")
    assert "--gpu-type" in info.value.message and "runpod" in str(info.value.hint)


def test_unknown_or_malformed_targets_are_usage_errors() -> None:
    for url in ("gopher://x", "ssh://", "runpod?bogus", "slurm://a:b:c/path"):
        with pytest.raises(UsageError):
            target_options(url, ProjectConfig())


def test_built_targets_declare_the_capabilities_of_their_kind(tmp_path: Path) -> None:
    ctx = TargetContext(ProjectConfig(), runs_dir=tmp_path)
    built: list[Target] = [
        open_target(target_options("local"), ctx),
        open_target(target_options("ssh://me@127.0.0.1:9"), ctx),
    ]
    try:
        for target in built:
            assert isinstance(target, Target)
            assert target.capabilities == kinds()[target.kind].capabilities
        local, ssh = built
        assert capable(local, PLAN) is local and capable(ssh, PLAN) is None
        assert FAR in ssh.capabilities and FAR not in local.capabilities
    finally:
        for target in built:
            target.close()
    # INSPECT is declared exactly by the kinds whose registry entry can inspect a run.
    for kind in kinds().values():
        assert (INSPECT in kind.capabilities) == (kind.inspect_run is not None), kind.kind
    assert INSPECT in kinds()["slurm"].capabilities


def test_cli_unknown_target_and_workflow_on_a_kind_without_the_agent(isolated_runs: Path) -> None:
    bad = proctor("run", "--target", "gopher://x", "--", "true")
    assert bad.returncode == 64 and "ssh://user@host" in bad.stderr, bad.stderr
    # A kind without the far agent runs a self-contained command as one job (Slurm; detached
    # too: test_slurm_commands.py::test_detached_bench_on_slurm_is_waited_for_with_its_exit_code).
    # Flags of another kind are refused before anything starts.
    nodes = proctor("serve", "start", "--engine", "fake", "--model", "m", "--nodes", "2")
    assert nodes.returncode == 64 and "do not apply to a local target" in nodes.stderr
    dry = proctor(
        "run",
        "--target",
        "ssh://me@127.0.0.1:9",
        "--dry-run",
        "--env",
        "API_KEY=s3cr3t",
        "--",
        "echo",
        "hi",
    )
    assert dry.returncode == 0, dry.stderr
    view = json.loads(dry.stdout)
    assert view["target"]["kind"] == "ssh" and view["job"]["argv"] == ["echo", "hi"]
    assert "s3cr3t" not in dry.stdout and not list(isolated_runs.glob("2*"))


def test_the_agent_refuses_a_malformed_request_naming_the_field() -> None:
    agent = [sys.executable, "-m", "proctor.targets.remote.agent", "start"]
    proc = subprocess.run(
        agent,
        input=json.dumps({"runs_dir": "/x", "checkout": "/y"}),
        capture_output=True,
        text=True,
        check=False,
    )
    answer = json.loads(proc.stdout.strip().splitlines()[-1])
    assert proc.returncode == 64 and answer["type"] == "UsageError"
    assert "job" in answer["error"], answer


def test_target_help_names_slurm_where_it_applies() -> None:
    for command in (
        ["bench"],
        ["eval", "gsm8k"],
        ["sweep"],
        ["flow"],
        ["serve", "start"],
        ["serve", "ready"],
        ["serve", "stop"],
        ["drain"],
        ["inspect"],
    ):
        text = " ".join(proctor(*command, "--help", env={"COLUMNS": "200"}).stdout.split())
        # Click wraps help at 80 columns whatever COLUMNS says, and may break after a hyphen.
        text = re.sub(r"(?<=\w)- (?=\w)", "-", text)
        assert "slurm://[user@]login-host" in text, (command, text)
    start = " ".join(proctor("serve", "start", "--help", env={"COLUMNS": "200"}).stdout.split())
    assert "--nodes" in start and "--parallel" in start and "--wait" in start

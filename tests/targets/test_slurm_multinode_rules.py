"""Multi-node launches and SSH login options without a cluster: placeholders, launch choice,
the batch script's head discovery, the per-node role, the SSH record (paths, no secret)."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from proctor.errors import UsageError
from proctor.spec.config import ProjectConfig
from proctor.spec.profiles.loader import load_profiles
from proctor.spec.profiles.models import MultiNodeLaunch
from proctor.targets.slurm.node import apply_role, fill
from proctor.targets.slurm.options import SlurmFlags, resolve_slurm_options
from proctor.targets.slurm.script import RemoteLayout, render_script
from proctor.targets.slurm.serve import pick_launch


def test_fill_replaces_only_named_placeholders() -> None:
    args = ["--a", "{nodes}", "{head_address}:{rpc_port}", '{"json": 1}', "{unknown}"]
    out = fill(args, {"nodes": "2", "head_address": "10.0.0.1", "rpc_port": "99"})
    assert out == ["--a", "2", "10.0.0.1:99", '{"json": 1}', "{unknown}"]


def test_unknown_placeholder_in_a_profile_is_rejected_with_its_name() -> None:
    with pytest.raises(ValidationError, match=re.escape("unknown placeholder {rank}")):
        MultiNodeLaunch(worker_args=["--node-rank", "{rank}"])


def test_builtin_launches_and_choice() -> None:
    profiles = load_profiles({})
    vllm, sglang = profiles.engine("vllm"), profiles.engine("sglang")
    assert pick_launch(vllm, None, 2) is vllm.multinode["dp"]  # the first is the default
    assert "--headless" in pick_launch(vllm, "pp", 2).worker_args
    assert pick_launch(sglang, None, 4).tp_per_node is False
    assert pick_launch(vllm, None, 1).head_args == []  # one node: plain launch
    with pytest.raises(UsageError, match="no multi-node launch 'ep'"):
        pick_launch(vllm, "ep", 2)
    with pytest.raises(UsageError, match="no multi-node launch in its profile"):
        pick_launch(profiles.engine("transformers"), None, 2)


def test_batch_script_finds_the_head_and_writes_head_json(tmp_path: Path) -> None:
    options = resolve_slurm_options(SlurmFlags(target="slurm://local", nodes=2), ProjectConfig())
    layout = RemoteLayout(str(tmp_path), "r1")
    script = render_script(options, layout, "j", "/w", pythonpath="/lib/p", multinode={})
    assert "export PYTHONPATH=/lib/p${PYTHONPATH:+:$PYTHONPATH}" in script
    # Run just the head-discovery lines with a stand-in scontrol on PATH.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "scontrol"
    fake.write_text(
        '#!/bin/sh\nif [ "$2" = hostnames ]; then printf "gpu7\\ngpu8\\n"; '
        'else echo "NodeName=gpu7 Arch=x86_64 NodeAddr=10.1.2.7 NodeHostName=gpu7"; fi\n'
    )
    fake.chmod(0o755)
    lines = [ln for ln in script.splitlines() if "PROCTOR_HEAD" in ln or "head.json" in ln]
    os.makedirs(layout.run_dir)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURM_JOB_NODELIST": "x"}
    subprocess.run(["bash", "-c", "\n".join(lines)], env=env, check=True, capture_output=True)
    assert json.loads(Path(layout.head_file).read_text()) == {
        "node": "gpu7",
        "address": "10.1.2.7",
    }


def test_apply_role_picks_worker_argv_and_fills_node_values(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    plan: dict[str, Any] = {
        "multinode": {
            "head": ["srv", "--masked"],
            "worker": ["srv", "{node_rank}@{head_address}"],
            "env_names": ["MASTER"],
        }
    }
    monkeypatch.setenv("SLURM_NODEID", "3")
    monkeypatch.setenv("PROCTOR_HEAD_ADDR", "10.0.0.9")
    monkeypatch.setenv("PROCTOR_HEAD_NODE", "n1")
    monkeypatch.setenv("MASTER", "{head_address}:1")
    # apply_role sets it in this process: through monkeypatch it is gone after the test, so no
    # later test's subprocess inherits it.
    monkeypatch.setenv("PROCTOR_WRAPPER_ARGV", "")
    monkeypatch.setenv(
        "PROCTOR_MULTINODE_ARGV",
        json.dumps(
            {"head": ["srv", "secret"], "worker": ["srv", "{node_rank}@{head_address}", "s"]}
        ),
    )
    role = apply_role(plan)
    assert role is not None and role["role"] == "worker" and role["node_rank"] == 3
    assert json.loads(os.environ["PROCTOR_WRAPPER_ARGV"]) == ["srv", "3@10.0.0.9", "s"]
    assert plan["argv"] == ["srv", "3@10.0.0.9"] and os.environ["MASTER"] == "10.0.0.9:1"
    assert "PROCTOR_MULTINODE_ARGV" not in os.environ
    assert apply_role({}) is None


def test_ssh_login_options_record_paths_and_config_defaults(tmp_path: Path) -> None:
    config = ProjectConfig.model_validate(
        {"slurm": {"target": "slurm://bob@login:2200", "identity_file": "~/.ssh/k", "nodes": 4}}
    )
    options = resolve_slurm_options(SlurmFlags(known_hosts=str(tmp_path / "kh")), config)
    assert options.nodes == 4 and options.python == "python3"
    assert options.ssh == {
        "host": "login",
        "user": "bob",
        "port": 2200,
        "identity_file": "~/.ssh/k",
        "known_hosts": str(tmp_path / "kh"),
        "insecure_accept_host_key": False,
        "jump": None,
        "env_sh": None,
    }
    local = resolve_slurm_options(SlurmFlags(target="slurm://local"), ProjectConfig())
    assert local.ssh == {}

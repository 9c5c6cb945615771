"""`proctor flow --target slurm://local`: the flow runs as one Slurm job on a node (a real
controller and slurmd), its steps inside the job's run directory, through the same registry
dispatch as `--target ssh://`; the group run comes back verified and the exit code is the
flow's."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import psutil
import pytest

from tests.helpers import FAKE_ENGINE_TOML, proctor
from tests.infra.slurmcluster import SlurmCluster, free_port
from tests.targets.far_commands import assert_in_no_file, fake_engine

pytestmark = pytest.mark.slurm

STEPS = ["stop", "start", "ready", "workload", "drain", "teardown"]
CLIENT = """
import json, sys, urllib.request
body = json.dumps({"model": "m", "prompt": "hi", "max_tokens": 5}).encode()
req = urllib.request.Request(sys.argv[1] + "/v1/completions", body,
                             {"Content-Type": "application/json"})
urllib.request.urlopen(req, timeout=10).read()
print("workload done")
"""


@pytest.fixture
def slurm_nodes() -> int:
    """One node is enough for a flow (the `cluster` fixture reads this)."""
    return 1


def _work(tmp_path: Path) -> Path:
    """The project: the fake engine, the Slurm workspace under `tmp_path`."""
    work = tmp_path / "project"
    work.mkdir()
    (work / "proctor.toml").write_text(
        f'[slurm]\nworkspace = "{tmp_path / "ws"}"\n\n{FAKE_ENGINE_TOML}'
    )
    return work


def test_flow_on_a_slurm_node_runs_every_step_and_comes_back_verified(
    cluster: SlurmCluster, tmp_path: Path, isolated_runs: Path
) -> None:
    work = _work(tmp_path)
    (work / "client.py").write_text(CLIENT)
    port = free_port()
    result = fake_engine(
        "flow",
        "slurm://local",
        *("--port", str(port), "--poll", "1s", "--env", "HF_TOKEN=hf_slurm_CANARY"),
        *("--workload-cmd", f"{sys.executable} client.py http://127.0.0.1:{port}", "--json"),
        cwd=work,
        env={"SLURM_CONF": str(cluster.conf)},
        timeout=240,
    )
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    completion = data["completion"]
    assert completion["result_known"] and completion["logs_verified"], completion["unmet"]
    assert completion["target"]["kind"] == "slurm"
    flow = data["flow"]
    assert [s["step"] for s in flow["steps"]] == STEPS
    group = Path(completion["local_dir"])
    assert group.parent == isolated_runs
    records = [json.loads(p.read_text()) for p in group.glob("**/steps/*/record.json")]
    (server,) = [r for r in records if r["kind"] == "server"]
    assert server["outcome"] == "stopped" and not psutil.pid_exists(server["process"]["pid"])
    assert "workload done" in "".join(p.read_text() for p in group.glob("**/steps/*/*.log"))
    assert proctor("runs", "verify", group.name).returncode == 0
    assert_in_no_file("hf_slurm_CANARY", group, tmp_path / "ws")
    assert "hf_slurm_CANARY" not in result.stdout + result.stderr


def test_a_flow_file_and_its_dataset_travel_to_the_slurm_workspace(
    cluster: SlurmCluster, tmp_path: Path, isolated_runs: Path
) -> None:
    """`flow --file F --target slurm://`: with no agent, the dataset the flow file's bench
    names is put into the shared workspace through the login host and read back, the flow job
    naming that copy; the bench on the node reads it."""
    import hashlib

    work = _work(tmp_path)
    (tmp_path / "data").mkdir()
    prompts = tmp_path / "data" / "p.jsonl"
    prompts.write_text(
        "".join(json.dumps({"prompt": f"slurm flow {i}", "output_len": 3}) + "\n" for i in range(8))
    )
    sha = hashlib.sha256(prompts.read_bytes()).hexdigest()
    flow_file = tmp_path / "bench-flow.toml"
    flow_file.write_text(
        "[[flow.workload]]\nbench = { osl = 4, concurrency = 2, num_prompts = 4, "
        'num_warmups = 0, dataset = "jsonl:../data/p.jsonl" }\n'
    )
    result = fake_engine(
        "flow",
        "slurm://local",
        *("--port", str(free_port()), "--poll", "1s", "--file", str(flow_file), "--json"),
        cwd=work,
        env={"SLURM_CONF": str(cluster.conf)},
        timeout=240,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    group = Path(json.loads(result.stdout)["completion"]["local_dir"])
    docs = [json.loads(p.read_text()) for p in group.glob("**/steps/*/metrics.json")]
    (bench,) = [d for d in docs if d.get("schema") == "proctor.bench.metrics"]
    far_copy = f"{tmp_path / 'ws'}/proctor/data/{sha}/p.jsonl"
    assert bench["dataset"]["sha256"] == sha and bench["dataset"]["path"] == far_copy
    # The flow file is read here: its flow job travels, naming the far copy (not the file).
    assert not list((tmp_path / "ws" / "proctor" / "data").glob("*/bench-flow.toml"))

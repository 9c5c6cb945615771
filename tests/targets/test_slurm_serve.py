"""The server workflow on a real two-node Slurm allocation, with the fake OpenAI server as the
engine: `proctor slurm serve` (head + worker per the profile's multi-node launch), then the
ordinary `serve ready`, `drain` (with a workload), `inspect` (stacks taken on both nodes) and
`serve stop` (scancel, verified)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.helpers import proctor, record
from tests.infra.slurmcluster import SlurmCluster, free_port

pytestmark = pytest.mark.slurm

FAKE = Path(__file__).resolve().parents[1] / "fixtures" / "fake_openai_server.py"

CLIENT = """
import json, sys, time, urllib.request
url = sys.argv[1]
for i in range(12):
    body = json.dumps({"model": "m", "prompt": "hello there", "max_tokens": 8}).encode()
    req = urllib.request.Request(url + "/v1/completions", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.status == 200
    time.sleep(0.1)
print("client done")
"""


def fake_engine_toml(work: Path) -> None:
    # The worker's args move it to {rpc_port} (argparse: last --port wins), because both test
    # "nodes" share 127.0.0.1; its model name shows the placeholders filled on the node.
    (work / "proctor.toml").write_text(
        f"""
[engines.fake]
launchers = [{{ command = ["{sys.executable}", "{FAKE}"], model_arg = "--model" }}]
ready_endpoints = ["/health"]
metrics_path = "/metrics"
startup_fault_patterns = ["CUDA out of memory"]
runtime_fault_patterns = ["Memory access fault by GPU"]
progress_metrics = ["vllm:generation_tokens"]
running_metrics = ["vllm:num_requests_running"]
server_patterns = ["fake_openai_server"]
[engines.fake.multinode.dp]
description = "fake data parallel"
head_args = ["--stats-interval", "0.5"]
worker_args = ["--port", "{{rpc_port}}", "--model", "rank{{node_rank}}-of-{{nodes}}@{{head_address}}"]
"""
    )


def cli(
    cluster: SlurmCluster, *args: str, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return proctor(*args, env={"SLURM_CONF": str(cluster.conf)}, timeout=timeout)


def listening(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def test_two_node_server_ready_drain_stop(
    cluster: SlurmCluster, tmp_path: Path, isolated_runs: Path
) -> None:
    fake_engine_toml(Path.cwd())
    port, rpc = free_port(), free_port()
    ws = tmp_path / "ws"
    started = cli(
        cluster,
        "slurm",
        "serve",
        "--target",
        "slurm://local",
        "--workspace",
        str(ws),
        "--engine",
        "fake",
        "--model",
        "m",
        "--nodes",
        "2",
        "--port",
        str(port),
        "--rpc-port",
        str(rpc),
        "--wait",
        "60s",
        "--json",
    )
    assert started.returncode == 0, started.stderr
    info = json.loads(started.stdout)
    run_id, group = info["run_id"], Path(info["dir"])
    assert info["head"] == {"node": "n1", "address": "127.0.0.1"}
    rec = record(group)
    assert rec["kind"] == "server" and rec["target"]["kind"] == "slurm"
    assert rec["server"]["host"] == "127.0.0.1" and rec["server"]["head_node"] == "n1"
    assert rec["server"]["multinode"]["parallel"] == "dp"

    ready = cli(cluster, "serve", "ready", run_id, "--timeout", "60s")
    assert ready.returncode == 0, ready.stderr
    assert listening(port)
    deadline = time.monotonic() + 60  # the worker is not part of the head's readiness
    while not listening(rpc):
        log = (group / rec["log"]).read_text()
        assert time.monotonic() < deadline, f"worker not listening on {rpc}: {log[-2000:]}"
        time.sleep(0.1)

    client = cli(
        cluster,
        "run",
        "--detach",
        "--json",
        "--name",
        "client",
        "--",
        sys.executable,
        "-c",
        CLIENT,
        f"http://127.0.0.1:{port}",
    )
    assert client.returncode == 0, client.stderr
    client_id = json.loads(client.stdout)["run_id"]
    drain = cli(
        cluster,
        "drain",
        run_id,
        "--client",
        client_id,
        "--poll",
        "1s",
        "--max",
        "90s",
        "--json",
        timeout=150,
    )
    assert drain.returncode == 0, drain.stdout + drain.stderr
    assert "client done" in (isolated_runs / client_id / "client.log").read_text()

    remote_nodes = ws / "proctor" / "runs" / run_id / "nodes"
    wrappers = [json.loads((remote_nodes / n / "wrapper.pid").read_text()) for n in ("n1", "n2")]

    # inspect: every node's engine, where it runs (one overlapping srun step in the job).
    inspect = cli(cluster, "inspect", run_id, "--timeout", "30s", "--json", timeout=150)
    assert inspect.returncode == 0, inspect.stdout + inspect.stderr
    rows = json.loads(inspect.stdout)
    for node, marker in (("n1", "--stats-interval"), ("n2", "rank1-of-2@127.0.0.1")):
        engine = record(remote_nodes / node)["process"]["pid"]
        (spy,) = [
            r for r in rows if r["node"] == node and r["tool"] == "py-spy" and r["pid"] == engine
        ]
        dump = group / "inspect" / node / f"{engine}-pyspy.txt"
        assert spy["path"] == str(dump) and spy["error"] is None, spy
        assert marker in dump.read_text(), dump.read_text()
    # --pid: only those pids, on the node where each is a process of the run.
    worker = record(remote_nodes / "n2")["process"]["pid"]
    only = cli(
        cluster, "inspect", run_id, "--pid", str(worker), "--timeout", "30s", "--json", timeout=150
    )
    assert only.returncode == 0, only.stdout + only.stderr
    found = [r for r in json.loads(only.stdout) if r["pid"] is not None]
    assert found and {(r["node"], r["pid"]) for r in found} == {("n2", worker)}, found
    stranger = cli(cluster, "inspect", run_id, "--pid", "1", "--timeout", "30s", timeout=150)
    assert stranger.returncode == 64, stranger.stdout + stranger.stderr
    assert "no pid of 1" in stranger.stderr
    stop = cli(cluster, "serve", "stop", run_id, "--json", timeout=150)
    assert stop.returncode == 0, stop.stderr
    assert json.loads(stop.stdout)[0]["was_running"] is True
    rec = record(group)
    assert rec["outcome"] == "stopped" and rec["slurm"]["state"] == "CANCELLED"
    assert cluster.job_info(info["job_id"])["JobState"] == "CANCELLED"
    for node, role in (("n1", "head"), ("n2", "worker")):
        node_dir = group / "nodes" / node
        assert rec["nodes"][node]["verified"] is True, rec["nodes"][node]
        node_rec = record(node_dir)
        assert node_rec["multinode"]["role"] == role
        assert (node_dir / "exit_code").exists()
    worker_argv = record(group / "nodes" / "n2")["argv"]
    assert "rank1-of-2@127.0.0.1" in worker_argv and str(rpc) in worker_argv
    assert "[n1] " in (group / rec["log"]).read_text()
    # Nothing is left: no wrapper, no engine, no listener, no job.
    deadline = time.monotonic() + 60  # a bound on a hang only
    while time.monotonic() < deadline and (listening(port) or listening(rpc)):
        time.sleep(0.1)
    assert not listening(port) and not listening(rpc)
    for w in wrappers:
        alive = psutil.pid_exists(w["pid"]) and psutil.Process(w["pid"]).status() != "zombie"
        assert not alive or psutil.Process(w["pid"]).create_time() != w["create_time"]
    assert not cluster.run("squeue", "-h").stdout.strip()
    again = cli(cluster, "serve", "stop", run_id)
    assert again.returncode == 0  # idempotent
    # The stacks taken while it ran are part of the group's verified evidence.
    verify = cli(cluster, "runs", "verify", run_id)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert "inspect/n2/" in (group / "manifest.sha256").read_text()
    gone = cli(cluster, "inspect", run_id)
    assert gone.returncode == 64, gone.stdout + gone.stderr


def test_engine_without_multinode_launch_is_refused(
    cluster: SlurmCluster, tmp_path: Path, isolated_runs: Path
) -> None:
    result = cli(
        cluster,
        "slurm",
        "serve",
        "--target",
        "slurm://local",
        "--workspace",
        str(tmp_path / "ws"),
        "--engine",
        "transformers",
        "--model",
        "m",
        "--nodes",
        "2",
    )
    assert result.returncode == 64, result.stderr
    assert "no multi-node launch" in result.stderr
    assert not cluster.run("squeue", "-h").stdout.strip()  # nothing was submitted

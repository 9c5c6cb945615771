"""`proctor run --target slurm://...`: on the login node itself, and over SSH to a login
host in a network namespace (it shares this machine's filesystem, so the workspace is
shared with the compute nodes as on a real cluster; it reaches slurmctld at the veth
gateway address, since 127.0.0.1 there is its own loopback)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from tests.helpers import FAKE_ENGINE_TOML, TEST_PYTHON, only_run, proctor, record
from tests.infra.slurmcluster import SlurmCluster, files_holding, free_port
from tests.infra.sshhosts import SshHostLab
from tests.targets.far_commands import slurm_serve_start

pytestmark = pytest.mark.slurm
SECRET = "tok-9f3a1c77e2"
FAR_SECRET = "hf-far-login-3b8e01d4c9"
LOCAL_SECRET = "rp-local-shell-7c2d9a"


def test_run_target_slurm_local_passes_the_node_status_through(
    cluster: SlurmCluster, tmp_path: Path, isolated_runs: Path
) -> None:
    env = {"SLURM_CONF": str(cluster.conf)}
    result = proctor(
        "run",
        "--target",
        "slurm://local",
        "--workspace",
        str(tmp_path / "ws"),
        "--nodes",
        "2",
        "--time",
        "5m",
        "--",
        "sh",
        "-c",
        'echo "on $SLURMD_NODENAME"; exit 3',
        cwd=Path.cwd(),
        env=env,
        timeout=150,
    )
    assert result.returncode == 3, result.stderr
    assert "[n1] on n1" in result.stdout and "[n2] on n2" in result.stdout
    rec = record(only_run(isolated_runs))
    assert rec["kind"] == "slurm" and rec["outcome"] == "failed"
    assert rec["slurm"]["requested"]["time_minutes"] == {"value": 5, "origin": "flag"}
    assert rec["slurm"]["time_limit"] in ("00:05:00", "5")
    # Slurm flags without a Slurm target are a usage error, before anything runs.
    bad = proctor("run", "--nodes", "2", "--", "true", cwd=Path.cwd(), env=env)
    assert bad.returncode == 64 and "slurm://" in bad.stderr


def test_run_over_ssh_login_host_ships_source_and_fetches_nodes(
    cluster: SlurmCluster,
    lone_lab: SshHostLab,
    project: Path,
    tmp_path: Path,
    isolated_runs: Path,
) -> None:
    host = lone_lab.hosts[0]
    # The login host's view of the cluster: the controller at the veth gateway.
    conf = cluster.conf.read_text().replace(
        "SlurmctldHost=localhost", f"SlurmctldHost=localhost({host.gateway})"
    )
    login_conf = tmp_path / "login-slurm.conf"
    login_conf.write_text(conf)
    ws = tmp_path / "shared-ws"
    ws.mkdir()
    # A secret the login host's shell exports (a far env.sh, ~/.bashrc): the far sbatch would
    # export it and slurmctld save it; it reaches the job through the 0600 job-env file.
    (ws / "env.sh").write_text(f"export SLURM_CONF={login_conf}\nexport HF_TOKEN={FAR_SECRET}\n")
    far_hash = hashlib.sha256(FAR_SECRET.encode()).hexdigest()
    result = proctor(
        "run",
        "--target",
        f"slurm://{host.user}@{host.address}:{host.port}",
        "--identity-file",
        str(host.client_key),
        "--known-hosts",
        str(host.known_hosts),
        "--workspace",
        str(ws),
        "--remote-python",
        TEST_PYTHON,
        "--nodes",
        "2",
        "--name",
        "job",
        "--env",
        f"API_TOKEN={SECRET}",
        "--json",
        "--",
        "sh",
        "-c",
        'sh job.sh "$SLURMD_NODENAME" 2 0 && test -n "$API_TOKEN" && '
        f'test "$(printf %s "$HF_TOKEN" | sha256sum | cut -c1-64)" = {far_hash}',
        cwd=project,
        timeout=150,
        # The controller side has no Slurm: all over SSH. Its own exported secrets stay here.
        env={"SLURM_CONF": "/nonexistent", "RUNPOD_API_KEY": LOCAL_SECRET},
    )
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout[result.stdout.index("{\n") :])
    assert out["outcome"] == "ok"
    group = only_run(isolated_runs)
    rec = record(group)
    assert rec["target"]["login"] == f"slurm://{host.user}@{host.address}:{host.port}"
    assert rec["slurm"]["state"] == "COMPLETED" and rec["slurm"]["nodes"] == ["n1", "n2"]
    sync = rec["source_sync"]
    assert sync["kind"] == "shipped" and sync["verified"] and rec["source"]["dirty"]
    checkout = Path(sync["checkout"])
    assert checkout == ws / "proctor" / "src" / sync["source_id"]
    assert (checkout / "notes.txt").read_text() == "uncommitted\n"
    script = (group / "job.sbatch").read_text()
    assert f"export PYTHONPATH={ws}/proctor/lib/" in script  # proctor shipped over SSH
    for node in ("n1", "n2"):
        assert rec["nodes"][node]["verified"] and rec["nodes"][node]["exit_code"] == 0
        log = (group / "nodes" / node / "job.log").read_text()
        assert f"start {node}" in log and f"done {node}" in log
    verify = proctor("runs", "verify", group.name, cwd=Path.cwd())
    assert verify.returncode == 0, verify.stdout + verify.stderr
    roots = [group, ws / "proctor" / "runs", cluster.base]
    assert files_holding(roots, [SECRET, FAR_SECRET, LOCAL_SECRET]) == []
    meta = json.loads((group / "slurm.json").read_text())
    assert meta["login"]["identity_file"] == str(host.client_key)  # a path, never a key


def test_inspect_server_over_ssh_login_host(
    cluster: SlurmCluster,
    lone_lab: SshHostLab,
    project: Path,
    tmp_path: Path,
    isolated_runs: Path,
) -> None:
    """`proctor inspect RUN` of a server started through an SSH login host: the overlapping
    step, proctor's shipped package on the nodes and the answers all go over the login."""
    host = lone_lab.hosts[0]
    # srun (unlike sbatch) talks to the nodes' slurmd itself, and they call it back: from the
    # login host's namespace, the nodes too are at the gateway.
    conf = (
        cluster.conf.read_text()
        .replace("SlurmctldHost=localhost", f"SlurmctldHost=localhost({host.gateway})")
        .replace("NodeAddr=127.0.0.1", f"NodeAddr={host.gateway}")
    )
    login_conf = tmp_path / "login-slurm.conf"
    login_conf.write_text(conf)
    ws = tmp_path / "shared-ws"
    ws.mkdir()
    (ws / "env.sh").write_text(f"export SLURM_CONF={login_conf}\n")
    # serve start takes no SSH flags: [slurm] names the key, host keys, workspace and python.
    (project / "proctor.toml").write_text(
        f'[slurm]\nidentity_file = "{host.client_key}"\nknown_hosts = "{host.known_hosts}"\n'
        f'workspace = "{ws}"\npython = "{TEST_PYTHON}"\n\n{FAKE_ENGINE_TOML}'
    )
    env = {"SLURM_CONF": "/nonexistent"}  # the controller side has no Slurm: all over SSH
    login = f"slurm://{host.user}@{host.address}:{host.port}"
    info = slurm_serve_start(login, free_port(), cwd=project, env=env, timeout=150)
    run_id, group = info["run_id"], Path(info["dir"])
    try:
        inspect = proctor(
            "inspect", run_id, "--timeout", "30s", "--json", cwd=project, env=env, timeout=150
        )
        assert inspect.returncode == 0, inspect.stdout + inspect.stderr
        rows = json.loads(inspect.stdout)
        remote = Path(json.loads((group / "slurm.json").read_text())["remote_run_dir"])
        engine = record(remote / "nodes" / "n1")["process"]["pid"]
        (spy,) = [r for r in rows if r["tool"] == "py-spy" and r["pid"] == engine]
        assert spy["node"] == "n1" and spy["error"] is None, spy
        assert "fake_openai_server" in Path(spy["path"]).read_text()
        assert Path(spy["path"]).parent == group / "inspect" / "n1"
    finally:
        stop = proctor("serve", "stop", run_id, "--json", cwd=project, env=env, timeout=150)
    assert stop.returncode == 0, stop.stderr
    assert not cluster.run("squeue", "-h").stdout.strip()

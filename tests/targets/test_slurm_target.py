"""The Slurm target end to end against a real controller and two real slurmd nodes.

Every run goes through the CLI in a subprocess (`python -m proctor.cli.main slurm run ...`),
submits with sbatch, runs the supervising wrapper on each node through srun, and is checked
through the files it leaves and the exit codes it returns.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
from pathlib import Path

import psutil
import pytest

from tests.helpers import git_project, only_run, proctor, record, wait_for
from tests.infra.slurmcluster import SlurmCluster, files_holding, unavailable_reason

pytestmark = pytest.mark.slurm


def slurm_env(cluster: SlurmCluster) -> dict[str, str]:
    return {"SLURM_CONF": str(cluster.conf)}


def submit(
    cluster: SlurmCluster, ws: Path, *args: str, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return proctor(
        "slurm",
        "run",
        "--target",
        "slurm://local",
        "--workspace",
        str(ws),
        *args,
        cwd=cwd,
        env=slurm_env(cluster),
    )


def start_on_two_nodes(cluster: SlurmCluster, ws: Path, name: str, script: str) -> Path:
    """Submit `sh -c script` detached on both nodes; its group run directory, once both nodes
    printed "started"."""
    started = submit(
        cluster, ws, "-N", "2", "--detach", "--json", "--name", name, "--", "sh", "-c", script
    )
    assert started.returncode == 0, started.stderr
    group = Path(json.loads(started.stdout)["dir"])
    wait_for(lambda: (group / f"{name}.log").read_text().count("started") == 2, 90, "both nodes")
    return group


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A small git project with a committed script and one untracked (dirty) file."""
    root = tmp_path / "project"
    (root / "tools").mkdir(parents=True)
    script = root / "tools" / "work.sh"
    script.write_text(
        '#!/bin/sh\necho "node=$SLURMD_NODENAME pwd=$(pwd)"\n'
        'test -n "$API_TOKEN" || exit 9\ncat ../notes.txt\n'
    )
    script.chmod(0o755)
    git_project(root)
    (root / "notes.txt").write_text("untracked-notes\n")
    return root


def test_two_node_run_ships_source_and_fetches_verified_node_records(
    cluster: SlurmCluster, repo: Path, tmp_path: Path, isolated_runs: Path
) -> None:
    ws = tmp_path / "ws"
    result = submit(
        cluster,
        ws,
        "--nodes",
        "2",
        "--name",
        "work",
        "--env",
        "API_TOKEN=s3cr3t-token-value",
        "--",
        "./work.sh",
        cwd=repo / "tools",
    )
    assert result.returncode == 0, result.stderr
    group = only_run(isolated_runs)
    rec = record(group)
    assert rec["kind"] == "slurm" and rec["outcome"] == "ok"
    assert (group / "exit_code").read_text() == "0\n"
    slurm = rec["slurm"]
    assert rec["target"]["job_id"] == slurm["job_id"] > 0
    assert slurm["state"] == "COMPLETED" and slurm["node_list"] == "n[1-2]"
    assert slurm["nodes"] == ["n1", "n2"] and slurm["elapsed_s"] is not None
    assert {s["step"]: s["exit_code"] for s in slurm["steps"]} == {"batch": "0:0", "0": "0"}
    # The exact source was shipped (dirty tree: working tree incl. untracked) and ran there.
    sync = rec["source_sync"]
    assert sync["kind"] == "shipped" and sync["source_id"] == rec["source"]["source_id"]
    assert sync["verified"] and sync["dirty"] and "working-tree" in sync["summary"]
    checkout = Path(sync["checkout"])
    assert checkout == ws / "proctor" / "src" / sync["source_id"]
    assert (checkout / "notes.txt").read_text() == "untracked-notes\n"
    for node in ("n1", "n2"):
        node_dir = group / "nodes" / node
        assert rec["nodes"][node]["verified"] is True and rec["nodes"][node]["exit_code"] == 0
        assert (node_dir / "exit_code").read_text() == "0\n"
        log = (node_dir / "work.log").read_text()
        assert f"node={node} pwd={checkout}/tools" in log and "untracked-notes" in log
        node_rec = record(node_dir)
        assert node_rec["outcome"] == "ok" and node_rec["group"] == group.name
        assert node_rec["target"]["node"] == node
        assert node_rec["target"]["slurm_job_id"] == str(slurm["job_id"])
        verify = proctor("runs", "verify", str(node_dir), "--json")
        assert verify.returncode == 0 and json.loads(verify.stdout)["verified"], verify.stdout
    # The group log has every node's lines, prefixed; it is what the controller printed.
    group_log = (group / "work.log").read_text()
    assert f"[n1] node=n1 pwd={checkout}/tools" in group_log
    assert f"[n2] node=n2 pwd={checkout}/tools" in group_log
    assert group_log in result.stdout
    # The group itself verifies, and the secret is in no file proctor wrote.
    verify = proctor("runs", "verify", group.name)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    # Nor in Slurm's own files: sbatch's environment is saved by slurmctld (StateSaveLocation),
    # so the secret travels in a 0600 file of the run's workspace, removed when the job ends.
    assert files_holding([group, ws, cluster.base], ["s3cr3t-token-value"]) == []


def test_secrets_exported_in_the_shell_reach_the_job_but_not_slurms_saved_environment(
    cluster: SlurmCluster, tmp_path: Path, isolated_runs: Path
) -> None:
    """sbatch exports its whole environment and slurmctld saves it on disk: a secret exported
    in the shell that runs proctor goes to the job through the 0600 job-env file instead."""
    ws = tmp_path / "ws"
    token = f"hf-exported-{os.getpid()}-{tmp_path.name}-value"
    aws = f"aws-exported-{os.getpid()}-{tmp_path.name}-value"
    overridden = f"overridden-{os.getpid()}-{tmp_path.name}-value"
    exported = {"HF_TOKEN": token, "AWS_SECRET_ACCESS_KEY": aws, "API_TOKEN": overridden}
    script = " ".join(
        f'printf "sha-of-{name} %s\\n" "$(printf %s "${name}" | sha256sum)";' for name in exported
    )
    result = proctor(
        "slurm",
        "run",
        "--target",
        "slurm://local",
        "--workspace",
        str(ws),
        "--name",
        "secrets",
        "--env",
        "API_TOKEN=given-by-env-flag",
        "--",
        "sh",
        "-c",
        script,
        env={**slurm_env(cluster), **exported},
    )
    assert result.returncode == 0, result.stderr
    group = only_run(isolated_runs)
    log = (group / "secrets.log").read_text()
    # The job saw the exported values, unchanged; an --env value wins over an exported one.
    seen = {**exported, "API_TOKEN": "given-by-env-flag"}
    for name, value in seen.items():
        # (No NAME=VALUE in the log: proctor would mask it by name.)
        assert f"sha-of-{name} {hashlib.sha256(value.encode()).hexdigest()}" in log, log
    assert not (ws / "proctor" / "runs" / group.name / ".job-env.json").exists()
    assert files_holding([group, ws, cluster.base], [token, aws, overridden]) == []


def test_one_failing_node_fails_the_run_with_its_status(
    cluster: SlurmCluster, tmp_path: Path, isolated_runs: Path
) -> None:
    result = submit(
        cluster,
        tmp_path / "ws",
        "-N",
        "2",
        "--json",
        "--",
        "sh",
        "-c",
        'echo "on $SLURMD_NODENAME"; test "$SLURMD_NODENAME" = n1 || exit 3',
    )
    assert result.returncode == 3, result.stderr
    out = json.loads(result.stdout[result.stdout.index("{\n") :])
    assert out["outcome"] == "failed" and out["exit"]["code"] == 3
    group = only_run(isolated_runs)
    rec = record(group)
    assert rec["nodes"]["n1"]["exit_code"] == 0 and rec["nodes"]["n2"]["exit_code"] == 3
    assert rec["nodes"]["n2"]["outcome"] == "failed" and "n2" in rec["reason"]
    assert rec["slurm"]["state"] == "FAILED"
    assert {s["step"]: s["exit_code"] for s in rec["slurm"]["steps"]}["0"] == "3"
    assert rec["exit"]["decided_by"] == "command"


def test_runs_stop_scancels_the_job_and_records_stopped(
    cluster: SlurmCluster, tmp_path: Path, isolated_runs: Path
) -> None:
    ws = tmp_path / "ws"
    group = start_on_two_nodes(cluster, ws, "long", "echo started; exec sleep 300")
    remote_nodes = ws / "proctor" / "runs" / group.name / "nodes"
    wrappers = [
        json.loads((remote_nodes / n / "wrapper.pid").read_text())["pid"] for n in ("n1", "n2")
    ]
    assert record(group)["outcome"] == "running"
    stop = proctor("runs", "stop", group.name, "--json", timeout=90)
    assert stop.returncode == 0, stop.stderr
    assert json.loads(stop.stdout)["outcome"] == "stopped"
    rec = record(group)
    assert rec["outcome"] == "stopped" and rec["slurm"]["state"] == "CANCELLED"
    assert "scancel" in rec["reason"]
    assert any(e["event"] == "stop" for e in rec["events"])
    for node in ("n1", "n2"):
        # scancel's SIGTERM reaches the node's wrapper and its command: 130 (the wrapper
        # recorded the stop) or 143 (the command's death came first); never 0.
        assert rec["nodes"][node]["exit_code"] in (130, 143) and rec["nodes"][node]["verified"]
    assert cluster.job_info(rec["slurm"]["job_id"])["JobState"] == "CANCELLED"
    wait_for(
        lambda: (
            not any(
                psutil.pid_exists(p) and psutil.Process(p).status() != "zombie" for p in wrappers
            )
        ),
        60,
        "node wrappers to exit",
    )
    wait = proctor("runs", "wait", group.name)
    assert wait.returncode == 130  # like a local run stopped: never 0 (docs/runs.md)
    assert (group / "exit_code").read_text().startswith("130 stopped ")
    again = proctor("runs", "stop", group.name)
    assert again.returncode == 0 and "not running" in again.stderr  # idempotent


class QuickNodeFailCluster(SlurmCluster):
    """slurmctld declares a silent node down after 5 s instead of 30 s."""

    def _write_files(self) -> None:
        super()._write_files()
        text = self.conf.read_text().replace("SlurmdTimeout=30", "SlurmdTimeout=5")
        self.conf.write_text(text)


def _kill_orphans(remote_node_dir: Path) -> None:
    """slurmstepd and the wrapper outlive a killed slurmd: stop them by pid (test cleanup)."""
    try:
        pid = json.loads((remote_node_dir / "wrapper.pid").read_text())["pid"]
        wrapper = psutil.Process(pid)
        stepd = wrapper.parent()
        wrapper.send_signal(signal.SIGTERM)
        wrapper.wait(15)
        if stepd is not None and "slurmstepd" in " ".join(stepd.cmdline()):
            stepd.kill()
            stepd.wait(5)
    except (psutil.NoSuchProcess, FileNotFoundError, psutil.TimeoutExpired):
        pass


def test_killed_node_daemon_is_a_failure_on_that_node(tmp_path: Path, isolated_runs: Path) -> None:
    if reason := unavailable_reason():
        pytest.skip(f"Slurm test cluster: {reason}")
    cluster = QuickNodeFailCluster(tmp_path / "slurm", nodes=2)
    cluster.start()
    ws = tmp_path / "ws"
    group = tmp_path / "not-started"
    try:
        group = start_on_two_nodes(cluster, ws, "nf", "echo started; sleep 120")
        os.kill(cluster._procs["slurmd-n2"].pid, signal.SIGKILL)  # n2's slurmd, mid-job
        wait = proctor("runs", "wait", group.name, timeout=100)
        assert wait.returncode == 2, wait.stderr  # a fault: never success
        rec = record(group)
        assert rec["outcome"] == "failed" and rec["slurm"]["state"] == "NODE_FAIL"
        assert "NODE_FAIL" in rec["reason"] and "n2" in rec["reason"]
        n2 = rec["nodes"]["n2"]
        assert (
            n2["outcome"] == "failed" and n2["exit_code"] is None and "NODE_FAIL" in n2["problem"]
        )
        assert not (group / "nodes" / "n2" / "exit_code").exists()
        # Slurm stopped the surviving node: 130 (its wrapper recorded the stop) or 143.
        assert rec["nodes"]["n1"]["exit_code"] in (130, 143)
        assert cluster.node_states()["n2"].startswith("down")
    finally:
        _kill_orphans(ws / "proctor" / "runs" / group.name / "nodes" / "n2")
        cluster.stop()


def test_sbatch_refusal_is_a_usage_error_and_leaves_a_record(
    cluster: SlurmCluster, tmp_path: Path, isolated_runs: Path
) -> None:
    result = submit(cluster, tmp_path / "ws", "--partition", "nosuch", "--", "true")
    assert result.returncode == 64, result.stderr
    assert "invalid partition" in result.stderr.lower() and "sinfo" in result.stderr
    group = only_run(isolated_runs)
    rec = record(group)
    assert rec["outcome"] == "failed" and "partition" in rec["error"].lower()
    # An ended run with the code the user got, not one of unknown status.
    assert (group / "exit_code").read_text() == "64\n"
    shown = proctor("runs", "show", group.name, "--json")
    assert shown.returncode == 0 and json.loads(shown.stdout)["outcome"] == "failed", shown.stdout


def test_status_lists_the_nodes(cluster: SlurmCluster) -> None:
    result = proctor("slurm", "status", "--json", env=slurm_env(cluster))
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)
    assert {r["node"]: r["state"] for r in rows} == {"n1": "idle", "n2": "idle"}


@pytest.mark.slow
def test_job_past_its_slurm_time_limit_is_a_timeout_with_slurms_reason(
    cluster: SlurmCluster, tmp_path: Path, isolated_runs: Path
) -> None:
    # Slurm's minimum limit is one minute and it checks every 30 s: this takes ~90 s.
    result = submit(
        cluster, tmp_path / "ws", "-N", "2", "--time", "1", "--name", "t", "--", "sleep", "300"
    )
    assert result.returncode == 4, result.stderr
    rec = record(only_run(isolated_runs))
    assert rec["outcome"] == "timeout" and rec["slurm"]["state"] == "TIMEOUT"
    assert "TIMEOUT" in rec["reason"] and "time limit" in rec["reason"]
    assert rec["slurm"]["time_limit"] in ("00:01:00", "1")
    assert 60 <= rec["slurm"]["elapsed_s"] <= 150
    for node in ("n1", "n2"):
        assert rec["nodes"][node]["exit_code"] not in (None, 0)
        assert rec["nodes"][node]["verified"]


def test_target_protocol_start_status_follow_fetch(
    cluster: SlurmCluster, tmp_path: Path, isolated_runs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import io

    from proctor.spec.config import ProjectConfig
    from proctor.targets.base import JobSpec, Target
    from proctor.targets.slurm import SlurmFlags, SlurmTarget, resolve_slurm_options

    monkeypatch.setenv("SLURM_CONF", str(cluster.conf))
    flags = SlurmFlags(target="slurm://local", nodes=2, workspace=str(tmp_path / "ws"))
    target = SlurmTarget(resolve_slurm_options(flags, ProjectConfig()), runs_dir=isolated_runs)
    assert isinstance(target, Target)
    assert target.describe().kind == "slurm" and target.prepare().workspace == str(tmp_path / "ws")
    started = target.start(JobSpec(argv=["sh", "-c", "echo via-protocol"], name="proto"))
    out = io.BytesIO()
    status = target.follow(started.run_id, out)
    assert status.done and status.exit_code == 0 and status.outcome == "ok"
    assert out.getvalue().count(b"via-protocol") == 2
    fetched = target.fetch(started.run_id, tmp_path / "copy")
    assert fetched.verified and "record.json" in fetched.files
    assert target.stop(started.run_id) is False  # finished: nothing to stop
    assert target.release().action == "none"

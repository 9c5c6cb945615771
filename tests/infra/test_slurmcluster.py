"""The real Slurm test cluster: nodes idle, multi-node jobs run, outcomes are readable."""

from __future__ import annotations

import time
from pathlib import Path

import psutil
import pytest

from tests.infra.slurmcluster import SlurmCluster, require_cluster, slurm_cluster, slurm_nodes
from tests.infra.sshhosts import zombie_or_gone

pytestmark = pytest.mark.slurm
__all__ = ["slurm_cluster", "slurm_nodes"]  # fixtures, imported for use here


def test_nodes_idle_in_sinfo(slurm_cluster: SlurmCluster) -> None:
    assert slurm_cluster.node_states() == {"n1": "idle", "n2": "idle"}
    out = slurm_cluster.run("sinfo", "-h", "-o", "%P %D %t").stdout.split()
    assert out == ["debug*", "2", "idle"]


def test_two_node_job_completes_and_outcome_is_recorded(slurm_cluster: SlurmCluster) -> None:
    script = "srun hostname; srun sh -c 'echo node=$SLURMD_NODENAME'"
    job = slurm_cluster.sbatch("-N2", "-o", "job-%j.out", "--wrap", script)
    info = slurm_cluster.wait_job(job)
    assert info["JobState"] == "COMPLETED" and info["ExitCode"] == "0:0"
    assert info["NumNodes"] == "2" and info["NodeList"] == "n[1-2]"
    lines = Path(info["StdOut"]).read_text().split()
    assert len([x for x in lines if not x.startswith("node=")]) == 2  # one hostname per node
    assert sorted(x for x in lines if x.startswith("node=")) == ["node=n1", "node=n2"]
    (rec,) = [r for r in slurm_cluster.jobcomp_records() if r.get("JobId") == str(job)]
    assert rec["JobState"] == "COMPLETED" and rec["NodeCnt"] == "2"
    assert rec["ExitCode"] == "0:0"


def test_failed_and_cancelled_outcomes(slurm_cluster: SlurmCluster) -> None:
    failed = slurm_cluster.sbatch("--wrap", "exit 3")
    info = slurm_cluster.wait_job(failed)
    assert info["JobState"] == "FAILED" and info["ExitCode"] == "3:0"
    long = slurm_cluster.sbatch("--wrap", "sleep 300")
    slurm_cluster.run("scancel", str(long))
    assert slurm_cluster.wait_job(long)["JobState"] == "CANCELLED"
    states = {r["JobId"]: r["JobState"] for r in slurm_cluster.jobcomp_records()}
    assert states[str(failed)] == "FAILED" and states[str(long)] == "CANCELLED"


def test_stop_cancels_jobs_and_leaves_no_daemon(tmp_path: Path) -> None:
    cluster = require_cluster(tmp_path / "slurm", 2)
    pid_file = tmp_path / "job.pid"
    try:
        job = cluster.sbatch("--wrap", f"echo $$ > {pid_file}; exec sleep 300")
        deadline = time.monotonic() + 30
        while not (pid_file.exists() and pid_file.read_text().strip()):
            assert time.monotonic() < deadline, cluster.job_info(job).get("JobState")
            time.sleep(0.05)
        job_pid = int(pid_file.read_text())
        # The pid is written just before the exec: wait for the exec to land.
        while psutil.Process(job_pid).cmdline() != ["sleep", "300"]:
            assert time.monotonic() < deadline, psutil.Process(job_pid).cmdline()
            time.sleep(0.05)
        daemons = cluster.pids()
    finally:
        cluster.stop()
    assert all(zombie_or_gone(pid) for pid in [job_pid, *daemons])
    cluster.stop()  # idempotent

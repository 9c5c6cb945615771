"""Ctrl-C of proctor at the worst moments of a `--target slurm://` command, on a real cluster:
while `serve start` waits for a pending job, while a `bench` job runs. The command ends 130,
nothing is left pending or running in Slurm, and the records say stopped, not ok. Also: a
server cancelled from outside, which `serve ready` reports at once, and a bad bench flag refused
before any job is submitted. One cluster for the module.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import FAKE_ENGINE_TOML, proctor, record
from tests.infra.slurmcluster import SlurmCluster, free_port, require_cluster
from tests.targets.far_commands import fake_args, slurm_serve_start
from tests.workloads.conftest import FakeProcess

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(300)]

TARGET = "slurm://local"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    cluster = require_cluster(tmp_path_factory.mktemp("slurm"), 1)
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def work(tmp_path: Path, cluster: SlurmCluster) -> Iterator[Path]:
    work = tmp_path / "project"
    work.mkdir()
    (work / "proctor.toml").write_text(
        f'[slurm]\nworkspace = "{tmp_path / "ws"}"\n\n{FAKE_ENGINE_TOML}'
    )
    yield work
    cluster.run("scancel", "--user", str(os.getuid()), check=False)  # the next test's queue
    wait_for(lambda: not queue(cluster), 60, "an empty queue")


def queue(cluster: SlurmCluster) -> list[tuple[str, str, str]]:
    """(job id, state, name) of every job in the queue."""
    out = cluster.run("squeue", "-h", "-o", "%i %T %j").stdout
    return [tuple(line.split(maxsplit=2)) for line in out.splitlines() if line.strip()]  # type: ignore[misc]


def wait_for(ok: object, timeout: float, what: str) -> None:
    assert callable(ok)
    deadline = time.monotonic() + timeout
    while not ok():
        assert time.monotonic() < deadline, f"no {what} in {timeout:.0f}s"
        time.sleep(0.2)


def start(cluster: SlurmCluster, work: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "proctor.cli.main", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=work,
        env={**os.environ, "SLURM_CONF": str(cluster.conf), "COLUMNS": "200"},
    )


def slow_bench_on_slurm(
    cluster: SlurmCluster, work: Path, slow: FakeProcess, *extra: str
) -> subprocess.Popen[str]:
    """`bench --target slurm` against a server slow enough (~10 s) to act on the job meanwhile."""
    slow.wait_for("Application startup complete.")
    return start(
        cluster,
        work,
        "bench",
        "--target",
        TARGET,
        "--base-url",
        slow.base_url,
        "--model",
        "fake-model",
        "--isl",
        "8",
        "--osl",
        "200",
        "--num-prompts",
        "20",
        "--num-warmups",
        "0",
        "--concurrency",
        "2",
        "--min-requests",
        "1",
        "--min-window",
        "0",
        *extra,
    )


def test_ctrl_c_while_serve_start_waits_for_a_pending_job_cancels_it(
    cluster: SlurmCluster, work: Path, isolated_runs: Path
) -> None:
    # The node's CPUs are taken: the server's job pends.
    blocker = cluster.sbatch("--wrap", "sleep 300", "-c", str(cluster.cpus_per_node))
    wait_for(lambda: "RUNNING" in {s for _, s, _ in queue(cluster)}, 30, "running blocker")
    serve = start(
        cluster,
        work,
        *fake_args(
            "serve start", TARGET, "--port", str(free_port()), "--nodes", "1", "--wait", "120s"
        ),
    )
    wait_for(lambda: any(s == "PENDING" for _, s, _ in queue(cluster)), 60, "pending server")
    serve.send_signal(signal.SIGINT)
    _, err = serve.communicate(timeout=90)
    assert serve.returncode == 130, err
    assert "stopped on interrupt" in err and "cancelled" in err, err
    assert [j for j, _, _ in queue(cluster)] == [str(blocker)]  # the server's job is gone
    (run,) = [p for p in isolated_runs.iterdir() if p.is_dir() and p.name[0].isdigit()]
    rec = record(run)
    assert rec["kind"] == "server" and rec["outcome"] == "stopped", rec
    assert (run / "exit_code").is_file()


def test_ctrl_c_during_a_bench_job_cancels_it_and_exits_130(
    cluster: SlurmCluster, work: Path, isolated_runs: Path
) -> None:
    slow = FakeProcess(["--no-access-log", "--itl", "0.05"])  # ~10 s a request
    try:
        bench = slow_bench_on_slurm(cluster, work, slow)
        wait_for(lambda: any(s == "RUNNING" for _, s, _ in queue(cluster)), 90, "bench job")
        wait_for(lambda: slow.running() == 2, 90, "the bench on the node sending")
        bench.send_signal(signal.SIGINT)
        _, err = bench.communicate(timeout=120)
    finally:
        slow.kill()
    assert bench.returncode == 130, err
    assert "stopped on interrupt" in err, err
    assert not queue(cluster)
    (job,) = [p for p in isolated_runs.iterdir() if p.is_dir() and p.name[0].isdigit()]
    rec = record(job)
    assert rec["outcome"] == "stopped" and rec["slurm"]["state"] == "CANCELLED", rec
    (child,) = job.glob("nodes/*/steps/*/record.json")
    assert json.loads(child.read_text())["outcome"] != "ok"


def test_a_bench_job_cancelled_outside_is_recorded_so_with_its_step_s_exit(
    cluster: SlurmCluster, work: Path, isolated_runs: Path
) -> None:
    slow = FakeProcess(["--no-access-log", "--itl", "0.05"])
    try:
        bench = slow_bench_on_slurm(cluster, work, slow, "--json")
        wait_for(lambda: any(s == "RUNNING" for _, s, _ in queue(cluster)), 90, "bench job")
        wait_for(lambda: slow.running() == 2, 90, "the bench on the node sending")
        ((job_id, _, _),) = queue(cluster)
        cluster.run("scancel", job_id)
        out, err = bench.communicate(timeout=120)
    finally:
        slow.kill()
    assert bench.returncode == 130, err  # the bench on the node was interrupted
    data = json.loads(out)
    assert data["completion"]["outcome"] == "stopped", data["completion"]
    # The summary says it was not this proctor that stopped it.
    assert "cancelled outside proctor" in (data["completion"]["stopped_by"] or ""), data
    assert data["completion"]["limit"] is None, data["completion"]
    (child,) = data["children"]
    # The step's exit_code file says "130 stopped 143 SIGTERM": stopped (130), not null, not 0.
    assert child["outcome"] == "stopped" and child["exit_code"] == 130, child
    rec = record(Path(data["completion"]["local_dir"]))
    assert "cancelled outside proctor" in rec["reason"], rec


def test_a_step_killed_on_the_node_is_unknown_not_running(
    cluster: SlurmCluster, work: Path, isolated_runs: Path, tmp_path: Path
) -> None:
    slow = FakeProcess(["--no-access-log", "--itl", "0.05"])
    try:
        bench = slow_bench_on_slurm(cluster, work, slow, "--json")
        steps = tmp_path / "ws" / "proctor" / "runs"

        def pid_files() -> list[Path]:
            return list(steps.glob("*/nodes/*/steps/*/wrapper.pid"))

        wait_for(lambda: bool(pid_files()), 90, "the bench step's wrapper")
        wait_for(lambda: slow.running() == 2, 90, "the bench on the node sending")
        # The step's wrapper and its command die at once, as on an OOM kill: no exit status.
        ref = json.loads(pid_files()[0].read_text())
        os.killpg(ref["pgid"], signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            os.kill(ref["pid"], signal.SIGKILL)
        out, err = bench.communicate(timeout=120)
    finally:
        slow.kill()
    data = json.loads(out)
    (child,) = data["children"]
    assert child["outcome"] == "unknown" and child["exit_code"] is None, child
    assert bench.returncode != 0, err


def test_serve_ready_on_a_server_cancelled_outside_says_so_at_once(
    cluster: SlurmCluster, work: Path, isolated_runs: Path
) -> None:
    env = {"SLURM_CONF": str(cluster.conf)}
    info = slurm_serve_start(TARGET, free_port(), cwd=work, env=env, timeout=120)
    cluster.run("scancel", str(info["job_id"]))
    wait_for(lambda: not queue(cluster), 60, "cancelled job")
    t0 = time.monotonic()
    ready = proctor(
        "serve",
        "ready",
        info["run_id"],
        "--target",
        TARGET,
        "--timeout",
        "120s",
        cwd=work,
        env=env,
        timeout=150,
    )
    assert time.monotonic() - t0 < 30, "ready waited for its timeout"
    assert ready.returncode == 3 and "server exited" in ready.stderr, ready.stderr
    rec = record(Path(info["dir"]))
    assert rec["outcome"] == "stopped" and "cancelled outside proctor" in rec["reason"], rec


def test_a_bad_bench_flag_is_refused_before_a_job_is_submitted(
    cluster: SlurmCluster, work: Path, isolated_runs: Path
) -> None:
    bad = proctor(
        "bench",
        "--target",
        TARGET,
        "--workers",
        "2",
        "--concurrency",
        "1",
        "--base-url",
        "http://127.0.0.1:9",
        "--model",
        "m",
        cwd=work,
        env={"SLURM_CONF": str(cluster.conf)},
        timeout=60,
    )
    assert bad.returncode == 64, bad.stdout + bad.stderr
    assert "workers must not exceed concurrency" in bad.stderr, bad.stderr
    assert not queue(cluster) and not isolated_runs.exists()  # nothing was submitted

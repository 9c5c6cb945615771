"""Every `--target` command on a real Slurm cluster (controller + slurmd on 127.0.0.1), with the
fake OpenAI server as the engine: `serve start --target slurm://local` starts the server on an
allocation (the same path as `proctor slurm serve`), `serve ready|stop` and `drain` with the
same --target act on its local group run, and `bench --target slurm://local` runs as one job on
a node, followed, verified, its bench run found and indexed locally, its exit code the bench's.
"""

from __future__ import annotations

import hashlib
import json
import math
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.answer_key_server import answer_key_server
from tests.helpers import FAKE_ENGINE_TOML, proctor, record
from tests.infra.engines import gsm8k_data_dir
from tests.infra.slurmcluster import SlurmCluster, free_port
from tests.targets.far_commands import at_server, slurm_serve_start

pytestmark = pytest.mark.slurm

TARGET = "slurm://local"
SMALL = [
    "--isl",
    "8",
    "--osl",
    "4",
    "--num-prompts",
    "6",
    "--num-warmups",
    "0",
    "--concurrency",
    "2",
    "--min-requests",
    "1",
    "--min-window",
    "0",
]


@pytest.fixture
def slurm_nodes() -> int:
    """One node: a server, a bench job, each on it (the `cluster` fixture reads this)."""
    return 1


@pytest.fixture
def work(tmp_path: Path) -> Path:
    work = tmp_path / "project"
    work.mkdir()
    # [slurm] nodes = 2 on a one-node cluster: a self-contained command still takes one node.
    (work / "proctor.toml").write_text(
        f'[slurm]\nworkspace = "{tmp_path / "ws"}"\nnodes = 2\n\n{FAKE_ENGINE_TOML}'
    )
    return work


def _bench_at(
    base_url: str, *extra: str, cwd: Path, env: dict[str, str], timeout: float
) -> subprocess.CompletedProcess[str]:
    """`bench --target slurm://local --base-url URL --model m SMALL... EXTRA...`."""
    return proctor(
        *("bench", "--target", TARGET, "--base-url", base_url, "--model", "m", *SMALL, *extra),
        cwd=cwd,
        env=env,
        timeout=timeout,
    )


def test_serve_start_ready_bench_drain_stop_on_slurm(
    cluster: SlurmCluster, work: Path, isolated_runs: Path
) -> None:
    env = {"SLURM_CONF": str(cluster.conf)}
    port = free_port()
    info = slurm_serve_start(TARGET, port, cwd=work, env=env, timeout=120)
    run_id, group = info["run_id"], Path(info["dir"])
    assert group.parent == isolated_runs and info["job_id"] and info["head"]["node"] == "n1"
    assert info["url"] == f"http://127.0.0.1:{port}"
    rec = record(group)
    assert rec["kind"] == "server" and rec["target"]["kind"] == "slurm"
    try:
        ready = proctor(
            "serve",
            "ready",
            run_id,
            "--target",
            TARGET,
            "--timeout",
            "60s",
            cwd=work,
            env=env,
            timeout=120,
        )
        assert ready.returncode == 0, ready.stderr

        # bench: one Slurm job on the node against the Slurm-started server (its URL and
        # model from the server's local record).
        bench = at_server(
            "bench",
            TARGET,
            run_id,
            *SMALL,
            "--json",
            cwd=work,
            env=env,
            timeout=180,
        )
        assert bench.returncode == 0, bench.stdout + bench.stderr
        data = json.loads(bench.stdout)
        completion = data["completion"]
        assert completion["target"]["kind"] == "slurm"
        assert completion["result_known"] and completion["logs_verified"], completion["unmet"]
        job_dir = Path(completion["local_dir"])
        assert job_dir.parent == isolated_runs
        bench_id = data["answer"]["run_id"]
        (child,) = [c for c in data["children"] if c["run_id"] == bench_id]
        assert child["verified"] and child["exit_code"] == 0 and child["outcome"] == "ok"
        assert data["answer"]["verdict"]["ok"] is True, data["answer"]
        (bench_dir,) = job_dir.glob(f"**/steps/{bench_id}")
        assert (bench_dir / "metrics.json").is_file()
        assert proctor("runs", "verify", job_dir.name).returncode == 0
        with sqlite3.connect(isolated_runs / "proctor.sqlite") as db:
            kinds = dict(db.execute("SELECT id, kind FROM runs").fetchall())
        assert kinds.get(bench_id) == "bench", kinds

        # sweep: the sweep and its points inside one job, each verified.
        sweep = at_server(
            "sweep",
            TARGET,
            run_id,
            *("--concurrency", "1,2", "--isl", "8", "--osl", "4", "--num-prompts", "4", "--json"),
            cwd=work,
            env=env,
            timeout=180,
        )
        assert sweep.returncode == 0, sweep.stdout + sweep.stderr
        swept = json.loads(sweep.stdout)
        assert [p["exit_code"] for p in swept["answer"]["points"]] == [0, 0]
        inside = {c["run_id"] for c in swept["children"] if c["verified"]}
        assert {
            swept["answer"]["sweep"],
            *(p["run_id"] for p in swept["answer"]["points"]),
        } <= inside

        # drain: the bench job was this server's client (a local run: the group's record).
        drain = proctor(
            "drain",
            run_id,
            "--target",
            TARGET,
            "--client",
            job_dir.name,
            "--poll",
            "1s",
            "--max",
            "60s",
            "--startup-max",
            "30s",
            cwd=work,
            env=env,
            timeout=120,
        )
        assert drain.returncode == 0, drain.stdout + drain.stderr
        # inspect: the engine's processes are on the node, so the stacks are taken there (an
        # overlapping srun step in the live job) and land in the local group run, per node.
        inspect = proctor(
            "inspect",
            run_id,
            "--target",
            TARGET,
            "--timeout",
            "30s",
            "--json",
            cwd=work,
            env=env,
            timeout=150,
        )
        assert inspect.returncode == 0, inspect.stdout + inspect.stderr
        rows = json.loads(inspect.stdout)
        remote = Path(json.loads((group / "slurm.json").read_text())["remote_run_dir"])
        engine_pid = record(remote / "nodes" / "n1")["process"]["pid"]
        spy = [r for r in rows if r["tool"] == "py-spy" and r["pid"] == engine_pid]
        assert spy and {r["node"] for r in rows} == {"n1"}, rows
        (row,) = spy
        dump = group / "inspect" / "n1" / f"{engine_pid}-pyspy.txt"
        assert row["path"] == str(dump) and dump.is_file()
        text = dump.read_text()
        assert text.startswith("$ ") and f"--pid {engine_pid}" in text.splitlines()[0]
        assert row["error"] is None and "fake_openai_server" in text, text
        # Without --target, the run's record says it ran on Slurm: the same inspection.
        again = proctor("inspect", run_id, "--timeout", "30s", cwd=work, env=env, timeout=150)
        assert again.returncode == 0 and "'node': 'n1'" in again.stdout, again.stderr
        # --pid names processes of the run on its nodes: pid 1 is none of them.
        pid = proctor("inspect", run_id, "--pid", "1", cwd=work, env=env)
        assert pid.returncode == 64 and "no pid of 1" in pid.stderr, pid.stderr

    finally:
        stop = proctor(
            "serve", "stop", run_id, "--target", TARGET, "--json", cwd=work, env=env, timeout=150
        )
    assert stop.returncode == 0, stop.stderr
    assert json.loads(stop.stdout)[0]["was_running"] is True
    rec = record(group)
    assert rec["outcome"] == "stopped" and rec["slurm"]["state"] == "CANCELLED"
    assert not cluster.run("squeue", "-h").stdout.strip()


def test_failing_bench_on_slurm_returns_its_own_exit_code(
    cluster: SlurmCluster, work: Path, isolated_runs: Path
) -> None:
    env = {"SLURM_CONF": str(cluster.conf)}
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    bench = _bench_at(dead, cwd=work, env=env, timeout=180)
    assert bench.returncode == 69, bench.stdout + bench.stderr
    (job_dir,) = [p for p in isolated_runs.iterdir() if (p / "slurm.json").is_file()]
    assert (job_dir / "exit_code").read_text().strip() == "69"

    # A local run named with --target slurm: refused, naming the kind it ran on.
    local = proctor("run", "--name", "plain", "--", sys.executable, "-c", "pass", cwd=work)
    assert local.returncode == 0, local.stderr
    plain = [
        p
        for p in isolated_runs.iterdir()
        if p.name != job_dir.name and p.is_dir() and (p / "record.json").is_file()
    ]
    (plain_dir,) = [p for p in plain if record(p).get("kind") != "slurm"]
    stop = proctor("serve", "stop", plain_dir.name, "--target", TARGET, cwd=work, env=env)
    assert stop.returncode == 64, stop.stderr
    assert "ran on a local target, not slurm" in stop.stderr
    # Without a RUN it would pick any live server of the runs dir, of any kind: refused.
    mine = proctor("serve", "stop", "--mine", "--target", TARGET, cwd=work, env=env)
    assert mine.returncode == 64 and "name the run" in mine.stderr, mine.stderr

    # A partition the cluster does not have: a clear error, nothing left queued.
    bad = proctor(
        "serve",
        "start",
        "--target",
        TARGET,
        "--partition",
        "nosuchpart",
        "-N",
        "1",
        "--engine",
        "fake",
        "--model",
        "m",
        "--port",
        str(free_port()),
        "--wait",
        "30s",
        cwd=work,
        env=env,
        timeout=120,
    )
    assert bad.returncode == 64, bad.stderr
    assert "invalid partition" in bad.stderr.lower() and "sinfo" in bad.stderr, bad.stderr
    assert not cluster.run("squeue", "-h").stdout.strip()


def test_detached_bench_on_slurm_is_waited_for_with_its_exit_code(
    cluster: SlurmCluster, work: Path, isolated_runs: Path
) -> None:
    """`bench --detach --target slurm://`: submitted, its run id printed, exit 0 at once;
    `runs wait RUN` returns the bench's own code, its metrics local, verified and indexed."""
    from tests.fixtures.fake_openai_server import FakeServer

    env = {"SLURM_CONF": str(cluster.conf)}
    with FakeServer() as srv:
        started = _bench_at(srv.base_url, "--detach", cwd=work, env=env, timeout=120)
        assert started.returncode == 0, started.stdout + started.stderr
        run_id = started.stdout.strip()
        job_dir = isolated_runs / run_id
        assert (job_dir / "slurm.json").is_file() and f"runs wait {run_id}" in started.stderr
        wait = proctor("runs", "wait", run_id, cwd=work, env=env, timeout=180)
        assert wait.returncode == 0, wait.stdout + wait.stderr
    assert record(job_dir)["outcome"] == "ok"
    (metrics,) = job_dir.glob("nodes/*/steps/*/metrics.json")
    bench_dir = metrics.parent
    bench = record(bench_dir)
    assert bench["kind"] == "bench" and bench["outcome"] == "ok"
    assert json.loads(metrics.read_text())["verdict"]["ok"] is True
    for run in (str(bench_dir), run_id):
        verify = proctor("runs", "verify", run, "--json", cwd=work)
        assert verify.returncode == 0 and json.loads(verify.stdout)["verified"], verify.stdout
    with sqlite3.connect(isolated_runs / "proctor.sqlite") as db:
        kinds = dict(db.execute("SELECT id, kind FROM runs").fetchall())
    assert kinds.get(bench_dir.name) == "bench", kinds
    logs = proctor("runs", "logs", run_id, cwd=work)
    assert logs.returncode == 0 and "[n1]" in logs.stdout, logs.stdout + logs.stderr

    # A bench that fails (nothing listens): `runs attach` follows it and returns its own 69.
    dead = f"http://127.0.0.1:{free_port()}"
    failing = _bench_at(dead, "--detach", "--json", cwd=work, env=env, timeout=120)
    assert failing.returncode == 0, failing.stdout + failing.stderr
    completion = json.loads(failing.stdout)["completion"]
    assert completion["detached"] and completion["target"]["kind"] == "slurm"
    attach = proctor("runs", "attach", completion["run_id"], cwd=work, env=env, timeout=180)
    assert attach.returncode == 69, attach.stdout + attach.stderr
    assert "[n1]" in attach.stdout, attach.stdout


def test_eval_gsm8k_on_slurm_scores_known_answers(
    cluster: SlurmCluster, work: Path, isolated_runs: Path, tmp_path: Path
) -> None:
    """`eval gsm8k --target slurm://local`: lm-eval on a node, offline from the repo's GSM8K
    subset, against a loopback server answering from the answer key (known scores)."""
    env = {"SLURM_CONF": str(cluster.conf), "HF_HOME": str(tmp_path / "hf")}
    with answer_key_server(gsm8k_data_dir()) as server:
        ran = proctor(
            "eval",
            "gsm8k",
            "--target",
            TARGET,
            "--base-url",
            server.base_url,
            "--model",
            "m1",
            "--fewshot",
            "3",
            "--limit",
            "5",
            "--num-concurrent",
            "2",
            "--data",
            str(gsm8k_data_dir()),
            "--json",
            cwd=work,
            env=env,
            timeout=240,
        )
        assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
        assert len(server.requests) == 5
    data = json.loads(ran.stdout)
    completion = data["completion"]
    assert completion["target"]["kind"] == "slurm" and completion["exit_code"] == 0
    assert completion["result_known"] and completion["logs_verified"], completion["unmet"]
    eval_id = data["answer"]["run_id"]
    (child,) = [c for c in data["children"] if c["run_id"] == eval_id]
    assert child["verified"] and child["exit_code"] == 0 and child["outcome"] == "ok"
    # Test docs 0..4: right {0, 3}, flexible-only {1, 4}, wrong {2}.
    metrics = data["answer"]["metrics"]
    assert metrics["n_samples"] == 5
    # The node scored the copy shipped into the shared workspace, not the repo's folder.
    shipped = data["answer"]["data"]
    assert shipped["path"].startswith(f"{tmp_path / 'ws'}/proctor/data/{shipped['sha256']}/")
    assert (
        shipped["files"]["test.jsonl"]
        == hashlib.sha256((gsm8k_data_dir() / "test.jsonl").read_bytes()).hexdigest()
    )
    assert math.isclose(metrics["exact_match_flexible_extract"], 0.8)
    assert math.isclose(metrics["exact_match_strict_match"], 0.4)
    (eval_dir,) = Path(completion["local_dir"]).glob(f"**/steps/{eval_id}")
    assert record(eval_dir)["kind"] == "eval" and list(
        (eval_dir / "lm_eval").rglob("results_*.json")
    )
    with sqlite3.connect(isolated_runs / "proctor.sqlite") as db:
        kinds = dict(db.execute("SELECT id, kind FROM runs").fetchall())
    assert kinds.get(eval_id) == "eval", kinds


def test_bench_on_slurm_reads_the_shipped_dataset(
    cluster: SlurmCluster, work: Path, isolated_runs: Path, tmp_path: Path
) -> None:
    """The dataset file is stored content-addressed in the shared workspace, checked there
    by sha256; the bench on the node reads that copy (metrics.json says which bytes)."""
    import hashlib

    from tests.fixtures.fake_openai_server import FakeServer

    env = {"SLURM_CONF": str(cluster.conf)}
    data = tmp_path / "data"
    data.mkdir()
    prompts = data / "p.jsonl"
    prompts.write_text(
        "".join(
            json.dumps({"prompt": f"slurm prompt {i}", "output_len": 3}) + "\n" for i in range(10)
        )
    )
    sha = hashlib.sha256(prompts.read_bytes()).hexdigest()
    with FakeServer() as srv:
        bench = _bench_at(
            srv.base_url,
            *("--dataset", "jsonl:../data/p.jsonl", "--json"),
            cwd=work,
            env=env,
            timeout=180,
        )
    assert bench.returncode == 0, bench.stdout + bench.stderr
    answer = json.loads(bench.stdout)["answer"]
    far_copy = f"{tmp_path / 'ws'}/proctor/data/{sha}/p.jsonl"
    assert answer["dataset"]["sha256"] == sha and answer["dataset"]["path"] == far_copy
    assert Path(far_copy).read_bytes() == prompts.read_bytes()

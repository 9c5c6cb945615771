"""The node's share of `proctor inspect` on a Slurm run, without a cluster: the task srun starts
on a node (`python -m proctor.targets.slurm.nodeinspect`) finds the engine from the node's own
record, takes its workers' stacks as a local inspect does, and leaves one answer file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

ENGINE = """
import multiprocessing, time
def worker_marker():
    time.sleep(120)
if __name__ == "__main__":
    multiprocessing.Process(target=worker_marker, daemon=True).start()
    time.sleep(120)
"""


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[psutil.Process]:
    path = tmp_path / "engine.py"
    path.write_text(ENGINE)
    proc = subprocess.Popen([sys.executable, str(path)])
    root = psutil.Process(proc.pid)
    deadline = time.monotonic() + 20
    while not root.children() and time.monotonic() < deadline:
        time.sleep(0.05)
    yield root
    for child in root.children(recursive=True):
        child.kill()
    proc.kill()
    proc.wait()


def node_inspect(run: Path, out: Path, *patterns: str) -> dict[str, object]:
    env = {**os.environ, "SLURMD_NODENAME": "nx"}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "proctor.targets.slurm.nodeinspect",
            str(run),
            str(out),
            "30",
            *patterns,
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    answer: dict[str, object] = json.loads((out / "nx.json").read_text())
    return answer


def test_node_task_takes_the_engines_worker_stacks(tmp_path: Path, engine: psutil.Process) -> None:
    run = tmp_path / "remote-run"
    node = run / "nodes" / "nx"
    node.mkdir(parents=True)
    process = {"pid": engine.pid, "create_time": engine.create_time(), "pgid": engine.pid}
    (node / "record.json").write_text(json.dumps({"kind": "slurm-node", "process": process}))
    (worker,) = engine.children()
    answer = node_inspect(run, tmp_path / "out", "multiprocessing")
    assert answer["node"] == "nx" and answer["error"] is None and answer["exit"] == 0
    rows = answer["rows"]
    assert isinstance(rows, list) and isinstance(answer["files"], dict)
    spied = {r["pid"] for r in rows if r["tool"] == "py-spy"}
    assert spied == {engine.pid, worker.pid}, rows  # the engine and the process it spawned
    text = answer["files"][f"{worker.pid}-pyspy.txt"]
    assert "worker_marker" in text, text
    assert engine.is_running() and worker.is_running()  # inspection kills nothing


def test_node_task_without_a_live_engine_says_so(tmp_path: Path) -> None:
    run = tmp_path / "remote-run"
    node = run / "nodes" / "nx"
    node.mkdir(parents=True)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    process = {"pid": gone.pid, "create_time": time.time() - 5, "pgid": gone.pid}
    (node / "record.json").write_text(json.dumps({"kind": "slurm-node", "process": process}))
    answer = node_inspect(run, tmp_path / "out")
    assert answer["rows"] == [] and answer["exit"] == 64
    assert "no live process" in str(answer["error"])

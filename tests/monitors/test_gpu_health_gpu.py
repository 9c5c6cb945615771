"""On the GPU machine: the GPU preflight through the real CLI on a real GPU (issue 24 §4).

Another process holding real GPU memory refuses a run (69, recorded, nothing started);
--allow-unhealthy-gpu runs it anyway; a healthy run records the preflight, the counters after
and the change; a bench (a client of a server) records the processes without judging them and
gets the "gpu" validity check; CUDA_VISIBLE_DEVICES="" leaves no GPU, which passes.
With PROCTOR_GPU_CAPTURE_DIR set, the raw NVML answers of each situation are written there
(tests/data/gpu/*.json: the recorded answers the CPU tests replay)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from proctor.monitors.gpu_health import NvmlHealthReader, capture
from proctor.store.db import Store
from tests.fixtures.fake_openai_server import FakeServer
from tests.helpers import only_run, proctor

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(600)]

HOLD_GIB = 2

HOLDER = f"""
import sys, time, torch
x = torch.empty({HOLD_GIB} * 2**30, dtype=torch.uint8, device="cuda")
x.fill_(1); torch.cuda.synchronize()
open(sys.argv[1], "w").write("held")
time.sleep(600)
"""

LOAD = """
import time, torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
end = time.monotonic() + float(__import__("sys").argv[1])
n = 0
while time.monotonic() < end:
    for _ in range(20):
        a @ b
    torch.cuda.synchronize(); n += 20
print("products", n, flush=True)
"""


def save_capture(name: str, *, probe: bool = True) -> None:
    where = os.environ.get("PROCTOR_GPU_CAPTURE_DIR")
    if not where:
        return
    data = capture(NvmlHealthReader(), os.environ, probe=probe)
    data["situation"] = name
    Path(where, f"{name}.json").write_text(json.dumps(data, indent=1) + "\n")


@pytest.fixture
def holder(nvidia: None, tmp_path: Path) -> Iterator[int]:
    marker = tmp_path / "held"
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(marker)])
    deadline = time.monotonic() + 120
    while not marker.exists():
        assert proc.poll() is None, "the holder died"
        assert time.monotonic() < deadline, "the holder never held its memory"
        time.sleep(0.2)
    time.sleep(1)  # NVML lists the process once its context exists
    yield proc.pid
    proc.kill()
    proc.wait()


def test_another_process_holding_memory_refuses_the_run(holder: int, isolated_runs: Path) -> None:
    save_capture("held")
    refused = proctor("run", "--name", "refused", "--", "true", timeout=300)
    print("FIGURE refused stderr:", refused.stderr.strip().replace("\n", " | "))
    assert refused.returncode == 69, refused.stderr
    assert "gpu health: FAILED" in refused.stderr and f"pid {holder}" in refused.stderr
    assert "--allow-unhealthy-gpu" in refused.stderr
    run = only_run(isolated_runs)
    record = json.loads((run / "record.json").read_text())
    assert record["outcome"] == "failed" and record["exit"]["code"] == 69
    assert (run / "exit_code").read_text().split()[0] == "69"
    assert record.get("started_at") is None  # refused before anything ran
    health = record["gpu_health"]
    assert health["status"] == "failed" and health["allowed"] is False
    held = {p["pid"]: p["memory_mib"] for d in health["devices"] for p in d["processes"]}
    assert held[holder] >= HOLD_GIB * 1024, held

    allowed = proctor(
        "run", "--name", "allowed", "--allow-unhealthy-gpu", "--json", "--", "true", timeout=300
    )
    assert allowed.returncode == 0, allowed.stderr
    doc = json.loads(allowed.stdout)
    assert doc["gpu_health"]["status"] == "failed" and doc["gpu_health"]["allowed"] is True
    record = json.loads((Path(doc["dir"]) / "record.json").read_text())
    assert record["outcome"] == "ok"
    assert record["gpu_health_after"]["mode"] == "counters"
    assert record["gpu_health_change"] is not None
    shown = proctor("runs", "show", doc["run_id"])
    assert "FAILED" in shown.stdout and "--allow-unhealthy-gpu" in shown.stdout, shown.stdout


def test_healthy_run_records_before_after_and_change(nvidia: None, isolated_runs: Path) -> None:
    save_capture("idle")
    seconds = 20
    result = proctor(
        "run", "--name", "matmul", "--", sys.executable, "-c", LOAD, str(seconds), timeout=300
    )
    assert result.returncode == 0, result.stderr
    assert "gpu health: ok" in result.stderr, result.stderr
    run = only_run(isolated_runs)
    record = json.loads((run / "record.json").read_text())
    health = record["gpu_health"]
    assert health["ok"] is True and health["mode"] == "full"
    assert health["devices"] and all(d["probe"]["ok"] for d in health["devices"])
    change = record["gpu_health_change"]
    assert change is not None and change["window_s"] >= seconds
    # A healthy GPU: time at the power limit is said (notes), never a fault.
    assert change["ok"] is True, change
    save_capture("after-load", probe=False)
    print(
        "FIGURE healthy:",
        [ln for ln in result.stderr.splitlines() if "gpu health" in ln],
        "change:",
        json.dumps(change),
        "probe:",
        [d["probe"] for d in health["devices"]],
        "xid:",
        health.get("xid_source"),
        health.get("xid_note"),
    )
    with Store(isolated_runs / "proctor.sqlite") as store:
        metrics = {m["name"]: m["value"] for m in store.metrics(run.name)}
    assert metrics["gpu_healthy"] == 1.0 and "gpu_throttle_power_s" in metrics


def test_bench_records_the_server_processes_and_judges_the_change(
    holder: int, isolated_runs: Path
) -> None:
    with FakeServer() as srv:
        result = proctor(
            "bench",
            "--base-url",
            srv.base_url,
            "--isl",
            "8",
            "--osl",
            "4",
            "--concurrency",
            "2",
            "--num-prompts",
            "10",
            "--num-warmups",
            "1",
            timeout=300,
        )
    assert result.returncode == 0, result.stderr
    run = only_run(isolated_runs)
    record = json.loads((run / "record.json").read_text())
    health = record["gpu_health"]
    assert health["mode"] == "counters" and health["ok"] is True, health
    pids = {p["pid"] for d in health["devices"] for p in d["processes"]}
    assert holder in pids
    doc = json.loads((run / "metrics.json").read_text())
    assert "gpu" in doc["validity"]["checks"], doc["validity"]
    print("FIGURE bench gpu check:", doc["validity"]["checks"]["gpu"])


def test_no_visible_gpu_passes(nvidia: None, isolated_runs: Path) -> None:
    result = proctor("run", "--", "true", env={"CUDA_VISIBLE_DEVICES": ""})
    assert result.returncode == 0, result.stderr
    record = json.loads((only_run(isolated_runs) / "record.json").read_text())
    assert record["gpu_health"]["status"] == "no GPU", record["gpu_health"]
    assert "gpu health: no GPU" in result.stderr

"""On the GPU machine: a supervised run's gpu.csv agrees with nvidia-smi while a torch program
holds a known amount of memory, names that program's pid, and returns to the idle baseline."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import only_run, proctor_popen

pytestmark = pytest.mark.gpu

HOLD_GIB = float(os.environ.get("PROCTOR_GPU_TEST_GIB", "20"))

PROGRAM = f"""
import sys, time, torch
x = torch.empty(int({HOLD_GIB} * 2**30), dtype=torch.uint8, device="cuda")
x.fill_(1); torch.cuda.synchronize()
print("HOLDING", flush=True)
time.sleep(12)
print("RELEASING", flush=True)
"""


def _smi_used_mib() -> float:
    out = subprocess.run(
        ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits", "-i", "0"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return float(out.strip().splitlines()[0])


def test_gpu_csv_matches_nvidia_smi_and_names_the_pid(nvidia: None, isolated_runs: Path) -> None:
    idle = _smi_used_mib()
    controller = proctor_popen(
        "run", "--gpu-sample", "1", "--name", "hold", "--", sys.executable, "-c", PROGRAM
    )
    deadline = time.monotonic() + 120
    log = None
    while time.monotonic() < deadline:
        logs = list(isolated_runs.glob("*/hold.log")) if isolated_runs.exists() else []
        if logs and "HOLDING" in logs[0].read_text():
            log = logs[0]
            break
        time.sleep(0.2)
    assert log is not None, "the torch program never held its memory"
    time.sleep(2.5)  # at least two samples while holding
    smi_holding = [_smi_used_mib() for _ in range(3)]
    _out, err = controller.communicate(timeout=120)
    assert controller.returncode == 0, err
    run = only_run(isolated_runs)
    record = json.loads((run / "record.json").read_text())
    pid = record["process"]["pid"]
    rows = list(csv.DictReader((run / "gpu.csv").open()))
    assert rows, "no GPU samples written"
    holding = [r for r in rows if r["index"] == "0" and f"{pid}:" in r["processes"]]
    assert holding, f"no sample names pid {pid}: {rows[:3]}"
    smi = sorted(smi_holding)[1]
    best = min(holding, key=lambda r: abs(float(r["memory_used_mib"]) - smi))
    used = float(best["memory_used_mib"])
    print(
        f"FIGURE idle_smi={idle:.0f}MiB holding_smi={smi:.0f}MiB gpu_csv={used:.0f}MiB "
        f"diff={(used - smi) / smi * 100:+.2f}% hold={HOLD_GIB}GiB"
    )
    assert abs(used - smi) <= 0.01 * smi
    proc_mib = dict(
        (int(p.split(":")[0]), float(p.split(":")[1])) for p in best["processes"].split(";") if p
    )
    assert proc_mib[pid] >= HOLD_GIB * 1024 * 0.99
    last = [r for r in rows if r["index"] == "0"][-1]
    assert f"{pid}:" not in last["processes"]
    assert abs(float(last["memory_used_mib"]) - idle) <= max(0.01 * smi, 64), (last, idle)
    peaks = {p["index"]: p for p in record["gpu_peaks"]}
    assert peaks[0]["memory_used_mib"] >= HOLD_GIB * 1024
    print(
        f"FIGURE final_csv={float(last['memory_used_mib']):.0f}MiB peak={peaks[0]['memory_used_mib']:.0f}MiB "
        f"samples={record['gpu_sampling']['samples']}"
    )

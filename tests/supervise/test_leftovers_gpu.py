"""On the GPU machine: a command that exits 0 and leaves a child holding 6 GiB of real GPU
memory. The wrapper stops the child, says so with its pid and the memory it held, and the
record keeps the same (issue 19 §5). The stand-in version runs everywhere:
tests/supervise/test_leftovers.py."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import psutil
import pytest

from tests.helpers import only_run, proctor

pytestmark = pytest.mark.gpu

HOLD_GIB = 6

CHILD = f"""
import time, torch
x = torch.empty({HOLD_GIB} * 2**30, dtype=torch.uint8, device="cuda")
x.fill_(1); torch.cuda.synchronize()
open(__import__("sys").argv[1], "w").write("held")
time.sleep(300)
"""

PARENT = """
import os, subprocess, sys, time
marker = sys.argv[1]
child = subprocess.Popen([sys.executable, "-c", sys.argv[2], marker])
open(marker + ".pid", "w").write(str(child.pid))
deadline = time.monotonic() + 120
while not os.path.exists(marker) and time.monotonic() < deadline:
    time.sleep(0.2)
time.sleep(4)  # at least one GPU sample names the child while it holds the memory
print("parent exits 0, child still holding", flush=True)
"""


def test_leftover_holding_real_gpu_memory_is_said_and_recorded(
    nvidia: None, isolated_runs: Path, tmp_path: Path
) -> None:
    marker = tmp_path / "held"
    result = proctor(
        "run",
        "--gpu-sample",
        "1",
        "--name",
        "leaves-gpu",
        "--",
        sys.executable,
        "-c",
        PARENT,
        str(marker),
        CHILD,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert marker.exists(), "the child never held its memory"
    pid = int(Path(str(marker) + ".pid").read_text())
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    run = only_run(isolated_runs)
    record = json.loads((run / "record.json").read_text())
    assert record["outcome"] == "ok" and record["leftovers_killed"] >= 1
    [left] = [e for e in record["leftovers"] if e["pid"] == pid]
    held = left["gpu_memory_mib"]
    print(
        f"FIGURE leftover pid={pid} gpu_memory_mib={held} hold={HOLD_GIB}GiB "
        f"line={[ln for ln in result.stderr.splitlines() if 'left' in ln]}"
    )
    assert held is not None and held >= HOLD_GIB * 1024, left
    assert f"pid {pid} (" in result.stderr and f"holding {held:.0f} MiB of GPU memory" in (
        result.stderr
    ), result.stderr

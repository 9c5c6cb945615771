"""A command that exits 0 but leaves a process holding GPU memory: the run is still "ok", and
proctor says what it stopped (pid, command, GPU memory held) on the terminal, in the record
and in `runs show`.

The GPU is a stand-in `nvidia-smi` first on PATH (as in tests/report/runs.py): it reports one
GPU, and as its compute apps the pid the test's command writes into a file, holding 6 GiB.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import psutil

from tests.helpers import only_run, proctor

FAKE_SMI = """#!{py}
import os, sys
args = " ".join(sys.argv[1:])
if "--query-gpu" in args:
    print("0, GPU-11111111-aaaa, NVIDIA H200, 6656, 143771, 40, 570.1")
elif "--query-compute-apps" in args:
    try:
        pid = open(os.environ["FAKE_GPU_APP"]).read().strip()
    except OSError:
        pid = ""
    if pid:
        print(f"GPU-11111111-aaaa, {{pid}}, 6144")
else:
    sys.exit(2)
"""


def _env(tmp_path: Path) -> tuple[dict[str, str], Path]:
    tools = tmp_path / "tools"
    tools.mkdir()
    smi = tools / "nvidia-smi"
    smi.write_text(FAKE_SMI.format(py=sys.executable))
    smi.chmod(0o755)
    app = tmp_path / "gpu-app.pid"
    env = {"PATH": f"{tools}{os.pathsep}{os.environ['PATH']}", "FAKE_GPU_APP": str(app)}
    return env, app


def test_leftover_holding_gpu_memory_is_printed_and_recorded(
    isolated_runs: Path, tmp_path: Path
) -> None:
    env, app = _env(tmp_path)
    # The command starts a child that outlives it (`sleep 300`), names it as the GPU's
    # compute app, and exits 0 at once.
    script = f'sleep 300 & echo "$!" > {app}; exit 0'
    result = proctor(
        "run", "--gpu-sample", "0.5", "--name", "leaves", "--", "sh", "-c", script, env=env
    )
    assert result.returncode == 0, result.stderr
    pid = int(app.read_text().strip())
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE

    # The terminal says what proctor stopped.
    assert "left 1 process(es) running" in result.stderr, result.stderr
    assert f"pid {pid} (sleep 300) holding 6144 MiB of GPU memory" in result.stderr

    run = only_run(isolated_runs)
    record = json.loads((run / "record.json").read_text())
    assert record["outcome"] == "ok"
    assert record["leftovers_killed"] == 1
    [left] = record["leftovers"]
    assert left["pid"] == pid
    assert left["name"] == "sleep"
    assert left["cmdline"] == "sleep 300"
    assert left["gpu_memory_mib"] == 6144.0
    assert left["signal"] == "SIGTERM" and left["survived"] is False
    assert any(
        e.get("event") == "leftovers" or e.get("name") == "leftovers"
        for e in record.get("events", [])
    )

    shown = proctor("runs", "show", run.name)
    assert shown.returncode == 0, shown.stderr
    assert f"pid {pid} (sleep 300) holding 6144 MiB of GPU memory" in shown.stdout


def test_no_gpu_says_memory_not_known_and_clean_run_says_nothing(
    isolated_runs: Path, tmp_path: Path
) -> None:
    # The shell waits a moment before it exits: its background child must have become
    # `sleep` (exec) by then, or the leftover is named by its fork, `sh -c ...` (a race).
    left = proctor("run", "--gpu-sample", "0", "--", "sh", "-c", "sleep 300 & sleep 0.5")
    assert left.returncode == 0, left.stderr
    assert "(sleep 300), GPU memory not known, SIGTERM" in left.stderr, left.stderr
    clean = proctor("run", "--", "true")
    assert clean.returncode == 0
    assert "left" not in clean.stderr, clean.stderr


def test_a_leftover_with_a_multiline_command_is_said_on_one_line(
    isolated_runs: Path, tmp_path: Path
) -> None:
    """Seen on the H200: a leftover started as `python -c SCRIPT` cut the notice at the
    script's first newline."""
    child = "import time\ntime.sleep(300)\n"
    script = f"import subprocess, sys; subprocess.Popen([sys.executable, '-c', {child!r}])"
    result = proctor("run", "--gpu-sample", "0", "--", sys.executable, "-c", script)
    assert result.returncode == 0, result.stderr
    [said] = [line for line in result.stderr.splitlines() if "left 1 process(es)" in line]
    assert "import time time.sleep(300)" in said and said.rstrip().endswith("SIGTERM"), said

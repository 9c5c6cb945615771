"""Helpers for tests: run the real CLI as a subprocess, find run directories."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent

#: The interpreter running the tests (the project's venv): the namespace test hosts share this
#: filesystem, so it is also the far side's base Python. Never a path of one machine.
TEST_PYTHON = sys.executable


#: A 50-line subset of each GSM8K split (MIT; tests/data/gsm8k/SOURCE.md), so every clone has it.
GSM8K_DATA = REPO / "tests" / "data" / "gsm8k"


def proctor(
    *args: str,
    env: dict[str, str] | None = None,
    timeout: float = 120,
    cwd: Path | None = None,
    check: bool = False,
) -> subprocess.CompletedProcess[str]:
    """Run the real CLI in a subprocess, as a user would."""
    full_env = {**os.environ, **(env or {}), "COLUMNS": "200"}
    result = subprocess.run(
        [sys.executable, "-m", "proctor.cli.main", *args],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=timeout,
        cwd=cwd,
    )
    if check and result.returncode != 0:
        raise AssertionError(
            f"proctor {' '.join(args)} exited {result.returncode}\n{result.stdout}\n{result.stderr}"
        )
    return result


def as_from_a_shell() -> None:
    """In a child before exec: Ctrl-C's signal as an interactive shell leaves it for a command
    it runs (default, not blocked). A suite started in the background (`cmd &` from a script)
    inherits SIGINT ignored, and Python then never raises KeyboardInterrupt: a test of Ctrl-C
    would test the launcher's shell, not proctor."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})


def proctor_popen(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "proctor.cli.main", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {}), "COLUMNS": "200"},
        preexec_fn=as_from_a_shell,
    )


def only_run(runs: Path) -> Path:
    dirs = [p for p in runs.iterdir() if p.is_dir() and not p.name.startswith(".")]
    assert len(dirs) == 1, dirs
    return dirs[0]


def git_project(root: Path, files: dict[str, str] | None = None, message: str = "init") -> Path:
    """`root` as a git repository with one commit of everything in it, after writing `files`
    (relative path -> text)."""
    for rel, text in (files or {}).items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    git = ["git", "-C", str(root), "-c", "user.email=t@example.com", "-c", "user.name=t"]
    for args in (["init", "-q"], ["add", "."], ["commit", "-qm", message]):
        subprocess.run([*git, *args], check=True, capture_output=True)
    return root


def record(run_dir: Path) -> dict[str, Any]:
    """The run directory's record.json, as written."""
    data: dict[str, Any] = json.loads((run_dir / "record.json").read_text())
    return data


def wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll `predicate` until it holds; fail the test naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


FAKE_SERVER = REPO / "tests/fixtures/fake_openai_server.py"

# An engine profile for the fault-injecting fake server, for a test's proctor.toml.
FAKE_ENGINE_TOML = f"""[engines.fake]
description = "fault-injection fake server"
launchers = [{{ command = ["{sys.executable}", "{FAKE_SERVER}"], model_arg = "--model" }}]
port_arg = "--port"
host_arg = "--host"
ready_endpoints = ["/health"]
metrics_path = "/metrics"
startup_fault_patterns = ["CUDA out of memory", "Memory access fault by GPU"]
runtime_fault_patterns = ["Memory access fault by GPU"]
progress_metrics = ["vllm:generation_tokens"]
running_metrics = ["vllm:num_requests_running"]
progress_markers = ['"POST /v1/completions HTTP/1\\\\.1" 200']
server_patterns = ["fake_openai_server"]
worker_patterns = ["multiprocessing"]
"""


def log_tails(runs: Path, lines: int = 40) -> str:
    """The last lines of every log under `runs` (a failed flow's evidence in its assertion)."""
    out = []
    for log in sorted(runs.rglob("*.log")):
        text = log.read_text(errors="replace").splitlines()[-lines:]
        out.append(f"--- {log.relative_to(runs)}\n" + "\n".join(text))
    return "\n".join(out)


def wait_for_flow_step(runs: Path, step: str, timeout: float = 60.0) -> Path | None:
    """The directory of the flow under `runs` once its record shows `step` begun; None after
    `timeout` (a flow's controller killed there is what resume tests need)."""
    import json
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for rec in runs.glob("*/record.json") if runs.exists() else []:
            data = json.loads(rec.read_text())
            if data.get("kind") == "flow" and any(s["step"] == step for s in data["steps"]):
                return rec.parent
        time.sleep(0.1)
    return None

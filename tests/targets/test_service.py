"""The supervised-run service: every command follows, waits and ends through one library
module, over the Target protocol, with real runs (wrapper processes, run directories)."""

from __future__ import annotations

import ast
import io
import json
import os
import signal
import time
from pathlib import Path
from typing import IO

import pytest

from proctor.errors import ExitCode, ResultUnknown
from proctor.spec.config import ProjectConfig
from proctor.spec.plan import RunFlags, resolve_run_plan
from proctor.supervise.launch import start_run
from proctor.targets.base import RunStatus
from proctor.targets.local import LocalTarget
from proctor.targets.service import SupervisedRun, exit_for_state
from tests.helpers import REPO

TAIL = {
    "Interrupts",
    "_Interrupts",
    "guard_start",
    "exit_for_state",
    "summary_line",
    "start_held",
    "SupervisedRun",
}


def test_no_cli_module_holds_or_borrows_the_follow_tail() -> None:
    """The follow/wait/interrupt tail lives once, in proctor.targets.service: no CLI module
    defines it, and none imports it from another CLI module."""
    for path in sorted((REPO / "src/proctor/cli").glob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                assert node.name not in TAIL, f"{path.name} defines {node.name}"
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("proctor.cli"):
                borrowed = {a.name for a in node.names} & TAIL
                assert not borrowed, f"{path.name} imports {borrowed} from {node.module}"


class CountingTarget(LocalTarget):
    """The local target, noting which protocol methods the service called."""

    def __init__(self, runs_dir: Path) -> None:
        super().__init__(runs_dir, config=ProjectConfig())
        self.calls: list[str] = []

    def status(self, run_id: str) -> RunStatus:
        self.calls.append("status")
        return super().status(run_id)

    def follow(
        self, run_id: str, out: IO[bytes], *, offset: int = 0, until_done: bool = True
    ) -> RunStatus:
        self.calls.append("follow")
        return super().follow(run_id, out, offset=offset, until_done=until_done)


def _start(tmp_path: Path, *argv: str):  # type: ignore[no-untyped-def]
    flags = RunFlags(
        argv=list(argv), runs_dir=str(tmp_path / "runs"), gpu_sample=0, cwd=str(tmp_path)
    )
    return start_run(resolve_run_plan(flags, ProjectConfig(), environ={})).run


def test_a_run_is_followed_and_ended_through_its_target(tmp_path: Path) -> None:
    run = _start(tmp_path, "bash", "-c", "echo out; exit 3")
    target = CountingTarget(run.path.parent)
    supervised = SupervisedRun(run, target)
    out = io.BytesIO()
    state = supervised.follow_to_end(out)
    assert out.getvalue() == b"out\n"
    assert target.calls[0] == "follow" and "status" in target.calls
    assert state.state == "finished" and state.exit is not None and state.exit.code == 3
    assert not state.wrapper_alive, "the wait must outlast the wrapper's final record"
    assert json.loads(run.record_path.read_text())["outcome"] == "failed"
    assert (run.path / "manifest.sha256").exists()
    assert supervised.exit_code(state) == 3
    assert "failed, exit 3" in supervised.summary(state)


def test_a_run_whose_supervisor_died_ends_unknown(tmp_path: Path) -> None:
    run = _start(tmp_path, "sleep", "300")
    deadline = time.monotonic() + 30
    while json.loads(run.record_path.read_text()).get("process") is None:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    wrapper = json.loads(run.wrapper_pid_path.read_text())
    os.killpg(wrapper["pgid"], signal.SIGKILL)  # the wrapper and its command, no status written
    state = SupervisedRun(run).wait(timeout=30)
    assert state.state == "unknown" and state.exit is None
    with pytest.raises(ResultUnknown) as caught:
        exit_for_state(run, state)
    assert caught.value.exit_code == int(ExitCode.UNKNOWN) == 6


def test_guard_start_off_the_main_thread_installs_nothing_and_does_not_fail() -> None:
    """A library caller's thread (serve start, bench on Slurm guard their start): no handler,
    no ValueError from signal.signal."""
    import threading

    from proctor.targets.service import guard_start

    errors: list[BaseException] = []

    def body() -> None:
        try:
            guard_start().__exit__()
        except BaseException as error:  # the test reports any
            errors.append(error)

    before = signal.getsignal(signal.SIGINT)
    t = threading.Thread(target=body)
    t.start()
    t.join(10)
    assert not errors and signal.getsignal(signal.SIGINT) is before

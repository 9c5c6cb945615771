"""No false "unknown": hundreds of short runs under CPU hogs on every core, while readers poll.

"unknown" means the exit status is missing and can no longer come. Every run here ends with
status 0, so a single "unknown" from any reader at any moment (while a run is starting, while
its wrapper writes its pid file, just after it has exited) is a false one. The readers are the
ones users have: run_state (runs show/list), follow to the end (proctor run, runs attach), wait
(runs wait), and the real CLI for a few of them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from proctor.record.rundir import RunDir, is_run_id
from proctor.record.status import run_state
from proctor.spec.config import ProjectConfig
from proctor.spec.plan import RunFlags, resolve_run_plan
from proctor.supervise.launch import start_run
from proctor.targets.service import SupervisedRun, exit_for_state
from tests.helpers import proctor

RUNS = 160  # through the library: started, then followed or waited
CLI_RUNS = 3  # each: `proctor run` foreground, and `run -d` + `runs wait` + `runs attach`
HOG_LIMIT_S = 240  # a hog ends by itself after this, whatever happens to the test

COMMANDS = (["true"], ["sh", "-c", "echo out; echo err >&2"], ["sleep", "0.05"], ["sh", "-c", ":"])


@pytest.fixture
def cpu_hogs() -> Iterator[None]:
    """One busy process per core for the length of the test, bounded, and killed after it."""
    code = (
        f"import time\nend = time.monotonic() + {HOG_LIMIT_S}\nwhile time.monotonic() < end: pass\n"
    )
    hogs = [subprocess.Popen([sys.executable, "-c", code]) for _ in range(os.cpu_count() or 2)]
    try:
        yield
    finally:
        for hog in hogs:
            hog.kill()
        for hog in hogs:
            hog.wait(timeout=30)


class Poller(threading.Thread):
    """Reads the state of every run directory, over and over, and keeps any "unknown"."""

    def __init__(self, runs: Path) -> None:
        super().__init__(daemon=True)
        self.runs = runs
        self.stop = threading.Event()
        self.unknown: list[tuple[str, str]] = []
        self.reads = 0

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                names = [e.name for e in os.scandir(self.runs) if is_run_id(e.name)]
            except FileNotFoundError:
                names = []
            for name in names:
                state = run_state(RunDir(self.runs / name))
                self.reads += 1
                if state.state == "unknown":
                    self.unknown.append((name, repr(state)))


def _one(runs: Path, i: int) -> tuple[str, str, int | None]:
    """Start one run and read its end as proctor run (follow) or runs wait (wait) does."""
    flags = RunFlags(
        argv=COMMANDS[i % len(COMMANDS)], runs_dir=str(runs), detach=True, gpu_sample=0
    )
    started = start_run(resolve_run_plan(flags, ProjectConfig(), environ={}))
    supervised = SupervisedRun(started.run)
    with open(os.devnull, "wb") as devnull:
        state = supervised.follow_to_end(devnull) if i % 2 else supervised.wait()
    try:
        code: int | None = exit_for_state(started.run, state)
    except Exception as error:  # reported with the run
        return started.run.run_id, f"{state!r}: {error}", None
    return started.run.run_id, state.state, code


def test_no_false_unknown_under_load(isolated_runs: Path, cpu_hogs: None) -> None:
    poller = Poller(isolated_runs)
    poller.start()
    began = time.monotonic()
    try:
        with ThreadPoolExecutor(max_workers=6) as pool:
            cli = pool.submit(_cli_runs)
            results = list(pool.map(lambda i: _one(isolated_runs, i), range(RUNS)))
            cli_results = cli.result()
    finally:
        poller.stop.set()
        poller.join(timeout=30)
    took = time.monotonic() - began
    wrong = [r for r in results if r[1:] != ("finished", 0)]
    assert not wrong, wrong[:5]
    assert not [r for r in cli_results if r[1:] != (0, 0, 0)], cli_results
    assert poller.reads > RUNS, poller.reads  # the poller really read while runs went on
    assert not poller.unknown, poller.unknown[:5]
    for run in isolated_runs.iterdir():
        if is_run_id(run.name):
            assert (run / "exit_code").read_text().split()[0] == "0", run
    print(f"{RUNS + 2 * CLI_RUNS} runs in {took:.1f}s, {poller.reads} state reads, no unknown")


def _cli_runs() -> list[tuple[str, int, int, int]]:
    """The real CLI: a foreground run, and a detached one read by `runs wait` and `runs attach`."""
    out = []
    for _ in range(CLI_RUNS):
        fore = proctor("run", "--", "true", timeout=300)
        detached = proctor("run", "-d", "--json", "--", "sh", "-c", "echo hi", timeout=300)
        assert detached.returncode == 0, detached.stderr
        run_id = json.loads(detached.stdout)["run_id"]
        waited = proctor("runs", "wait", run_id, timeout=300)
        attached = proctor("runs", "attach", run_id, timeout=300)
        out.append((run_id, fore.returncode, waited.returncode, attached.returncode))
    return out

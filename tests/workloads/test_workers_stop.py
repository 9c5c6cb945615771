"""`--workers N` when things go wrong: Ctrl-C or SIGTERM of the load generator, a worker killed,
the load generator itself killed. Every worker is gone at once, the exit code says what
happened, and the scratch directory with the pickled requests is removed."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from tests.workloads.conftest import FakeProcess

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def slow(fake_process: Callable[..., FakeProcess]) -> FakeProcess:
    """A server that takes 20 s per request, so the bench is mid-run when it is hit."""
    p = fake_process("--no-access-log", "--itl", "0.1")
    p.wait_for("Application startup complete.")
    return p


@pytest.fixture
def scratch(tmp_path: Path) -> Path:
    """TMPDIR of the load generator: where its scratch directory goes."""
    path = tmp_path / "tmp"
    path.mkdir()
    return path


@pytest.fixture
def loadgen(slow: FakeProcess, scratch: Path, tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    """Two workers on 40 requests of 200 tokens (about 20 s each), started and sending."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "proctor.workloads.loadgen",
            "--port",
            str(slow.port),
            "--output-dir",
            str(tmp_path / "out"),
            "--isl",
            "16",
            "--osl",
            "200",
            "--workers",
            "2",
            "--concurrency",
            "4",
            "--num-prompts",
            "40",
            "--num-warmups",
            "0",
            "--no-progress",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "TMPDIR": str(scratch)},
        start_new_session=True,
    )
    try:
        yield proc
    finally:
        for pid in [proc.pid, *(c.pid for c in _children(proc.pid))]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        proc.communicate(timeout=30)


def _children(pid: int) -> list[psutil.Process]:
    try:
        return list(psutil.Process(pid).children(recursive=True))
    except psutil.NoSuchProcess:
        return []


def workers_of(proc: subprocess.Popen[str], server: FakeProcess) -> list[psutil.Process]:
    """The two spawned workers (not multiprocessing's resource tracker), once the measured
    requests are in flight: the server has all 4 running (a fixed pause is too short on a
    loaded machine)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        found = [c for c in _children(proc.pid) if "spawn_main" in " ".join(c.cmdline())]
        if len(found) == 2 and server.running() >= 4:
            return found
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.1)
    raise AssertionError(f"the workers did not start sending (running: {server.running()})")


def gone(procs: list[psutil.Process], within: float) -> bool:
    _, alive = psutil.wait_procs(procs, timeout=within)
    return not alive


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupt_stops_every_worker_at_once_and_exits_130(
    loadgen: subprocess.Popen[str], slow: FakeProcess, scratch: Path, sig: signal.Signals
) -> None:
    workers = workers_of(loadgen, slow)
    hit = time.monotonic()
    loadgen.send_signal(sig)  # the load generator only, as the run wrapper or a kill does
    _, err = loadgen.communicate(timeout=60)
    took = time.monotonic() - hit
    assert loadgen.returncode == 130, err
    # A request takes 20 s: well under that, the workers did not finish theirs (slack for load).
    assert took < 10, f"{took:.1f}s: the workers kept sending after the interrupt"
    assert gone(workers, within=10)
    assert "Traceback" not in err
    assert not list(scratch.iterdir())  # the pickled requests are removed


def test_ctrl_c_to_the_whole_group_prints_no_worker_tracebacks(
    loadgen: subprocess.Popen[str], slow: FakeProcess, scratch: Path
) -> None:
    workers = workers_of(loadgen, slow)
    os.killpg(loadgen.pid, signal.SIGINT)  # a terminal's Ctrl-C reaches every process
    _, err = loadgen.communicate(timeout=60)
    assert loadgen.returncode == 130, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert gone(workers, within=10)
    assert not list(scratch.iterdir())


def test_more_stops_do_not_cut_the_cleanup_short(
    loadgen: subprocess.Popen[str], slow: FakeProcess, scratch: Path
) -> None:
    """As on Slurm: scancel signals every process of the step, then the run wrapper signals
    the load generator again; here a burst of SIGTERMs until it is gone."""
    workers = workers_of(loadgen, slow)
    os.killpg(loadgen.pid, signal.SIGTERM)
    while loadgen.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            loadgen.send_signal(signal.SIGTERM)
        time.sleep(0.001)
    loadgen.communicate(timeout=60)
    assert gone(workers, within=10)
    assert not list(scratch.iterdir())  # the pickled requests are removed all the same


def test_a_killed_worker_fails_the_bench_at_once_and_names_the_signal(
    loadgen: subprocess.Popen[str], slow: FakeProcess, scratch: Path
) -> None:
    workers = workers_of(loadgen, slow)
    hit = time.monotonic()
    workers[0].kill()
    _, err = loadgen.communicate(timeout=60)
    took = time.monotonic() - hit
    assert loadgen.returncode == 3, err
    assert "died (killed by SIGKILL)" in err and "--workers 1" in err, err
    assert took < 10, f"{took:.1f}s: the other worker kept sending after one died"
    assert gone(workers, within=10)
    assert not list(scratch.iterdir())


def test_workers_leave_when_the_load_generator_is_killed(
    loadgen: subprocess.Popen[str], slow: FakeProcess
) -> None:
    workers = workers_of(loadgen, slow)
    loadgen.kill()  # no handler runs: the workers must notice by themselves
    loadgen.wait(10)
    assert gone(workers, within=10), "orphaned workers kept running"

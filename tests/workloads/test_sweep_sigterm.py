"""SIGTERM back to back at a concurrency sweep's controller: one stop, ended to its record.

At a time limit a supervised command gets SIGTERM twice, milliseconds apart (the wrapper's
deadline guard, then its kill ladder; supervise/sigterm.py). The sweep's first SIGTERM stops
its running point; the later ones must not cut that stop, the summary or the record's end
short (tests/workloads/test_offline.py has the same test for an offline runner).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import psutil

from tests.cli.test_serve_flow import fake_engine, start  # noqa: F401
from tests.helpers import proctor, proctor_popen


def _records(runs: Path) -> dict[str, dict[str, object]]:
    out = {}
    for path in runs.glob("*/record.json"):
        with contextlib.suppress(json.JSONDecodeError):  # a write in progress: read next time
            out[path.parent.name] = json.loads(path.read_text())
    return out


def _dead(pid: int) -> bool:
    return not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def _group_gone(pgid: int) -> bool:
    """No live process in the group (a zombie waiting for its reaper is not running)."""
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error, ProcessLookupError):
            if os.getpgid(proc.pid) == pgid and proc.status() != psutil.STATUS_ZOMBIE:
                return False
    return True


def sigterms_until_ended(controller: subprocess.Popen[str], runs: Path, kind: str) -> int:
    """SIGTERM at a controller as its wrapper's time limit sends it: twice back to back, then
    again every few ms while it stops, until its run of `kind` has its exit_code (the ending
    written) or the controller is gone; its exit status. Signals that come before Python runs
    the handler are one, hence the repeats: the later ones must find the stop under way."""
    deadline = time.monotonic() + 120
    os.kill(controller.pid, signal.SIGTERM)
    os.kill(controller.pid, signal.SIGTERM)
    while controller.poll() is None and time.monotonic() < deadline:
        if any(
            (runs / k / "exit_code").exists()
            for k, r in _records(runs).items()
            if r["kind"] == kind
        ):
            break
        time.sleep(0.005)
        with contextlib.suppress(ProcessLookupError):
            os.kill(controller.pid, signal.SIGTERM)
    code = controller.wait(timeout=120)
    # Once its ending is written the controller restores the default handler: a SIGTERM that
    # lands after that ends the process, not the run (its record is complete).
    assert code in (130, -signal.SIGTERM), (code, controller.communicate()[1][-3000:])
    return code


def _sweep(server: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return proctor_popen(
        "sweep",
        "--server",
        server,
        "--concurrency",
        "1,2",
        "--isl",
        "8",
        "--osl",
        "4",
        "--num-prompts",
        "2",
        "--name",
        "held",
        env=env,
    )


def _stop_when(controller: subprocess.Popen[str], runs: Path, ready: Callable[[], bool]) -> None:
    """SIGTERM at the sweep's controller once `ready()`, until its ending is written."""
    try:
        deadline = time.monotonic() + 60
        while not ready():
            assert controller.poll() is None, controller.communicate()
            assert time.monotonic() < deadline, "the sweep never started its first point"
            time.sleep(0.02)
        sigterms_until_ended(controller, runs, "sweep")
    finally:
        controller.kill()
        controller.communicate()


def _assert_one_stop(runs: Path) -> None:
    """The sweep ended stopped with its summary; its one point was stopped, ended and is gone,
    and no later point started."""
    records = _records(runs)
    [sweep_id] = [k for k, r in records.items() if r["kind"] == "sweep"]
    sweep_dir = runs / sweep_id
    assert records[sweep_id]["outcome"] == "stopped", records[sweep_id]
    assert (sweep_dir / "exit_code").read_text() == "130 stopped\n"
    for name in ("summary.json", "summary.csv", "summary.txt"):
        assert (sweep_dir / name).is_file(), name
    [bench] = [r for r in records.values() if r["kind"] == "bench"]
    assert bench["outcome"] == "stopped", bench
    assert (runs / str(bench["run_id"]) / "exit_code").exists()
    process = bench["process"]
    assert isinstance(process, dict)
    assert _dead(int(process["pid"])) and _group_gone(int(process["pgid"]))
    assert proctor("runs", "verify", sweep_id).returncode == 0


def test_later_sigterms_do_not_cut_a_sweeps_stop_short(
    fake_engine: int,
    isolated_runs: Path,
) -> None:
    server = start(fake_engine, "--ttft", "60")  # the first point waits on its first token
    try:
        assert proctor("serve", "ready", server, "--timeout", "30s").returncode == 0

        def point_running() -> bool:
            # The point's first request has reached the server: the sweep waits on its point.
            logs = (isolated_runs / server).glob("serve-*.log")
            return any('"POST /v1/completions' in log.read_text() for log in logs)

        _stop_when(_sweep(server), isolated_runs, point_running)
    finally:
        proctor("serve", "stop", server, timeout=120)
    _assert_one_stop(isolated_runs)


# Loaded by the sweep's controller through PYTHONPATH: its point's wrapper is started, then the
# controller is held 2 s before it waits for it (a loaded machine), and the test stops it there.
SLOW_START = """
import os, sys, time
from pathlib import Path

if sys.argv[1:2] == ["sweep"]:
    from proctor.supervise import launch

    _start_run = launch.start_run

    def _slow(*args, **kwargs):
        started = _start_run(*args, **kwargs)
        Path(os.environ["SLOW_START_MARK"]).write_text(started.run.run_id)
        time.sleep(2)
        return started

    launch.start_run = _slow
"""


def test_a_stop_while_a_point_starts_stops_that_point_too(
    fake_engine: int,
    isolated_runs: Path,
    tmp_path: Path,
) -> None:
    # The point's wrapper runs, but its controller is not yet waiting for it: a SIGTERM then
    # used to end the sweep "stopped" and leave the point running on.
    inject = tmp_path / "inject"
    inject.mkdir()
    (inject / "sitecustomize.py").write_text(SLOW_START, encoding="utf-8")
    mark = tmp_path / "started"
    env = {
        "PYTHONPATH": os.pathsep.join(filter(None, [str(inject), os.environ.get("PYTHONPATH")])),
        "SLOW_START_MARK": str(mark),
    }
    server = start(fake_engine, "--ttft", "60")
    try:
        assert proctor("serve", "ready", server, "--timeout", "30s").returncode == 0
        _stop_when(_sweep(server, env), isolated_runs, mark.exists)
    finally:
        proctor("serve", "stop", server, timeout=120)
    _assert_one_stop(isolated_runs)

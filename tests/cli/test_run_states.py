"""Run states as readers see them (issue 19, section 1): a stopped or timed-out run is never a
success, the exit status is the exit_code file's, a run directory nobody holds is unknown
(never "starting" for ever), and a flow is a live run while its controller runs it."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.cli.test_flow_evidence import fake_engine  # noqa: F401 - a fixture
from tests.helpers import git_project, only_run, proctor, proctor_popen, wait_for

TRAP_0 = "trap 'exit 0' TERM; sleep 30 & wait"


def test_a_time_limit_is_never_read_as_success_even_when_the_command_exits_0(
    isolated_runs: Path,
) -> None:
    result = proctor("run", "--timeout", "1s", "--", "sh", "-c", TRAP_0)
    assert result.returncode == 4, result.stderr
    run = only_run(isolated_runs)
    assert (run / "exit_code").read_text() == "4 timeout 0\n"
    record = json.loads((run / "record.json").read_text())
    assert record["exit"] == {
        "code": 4,
        "signal": None,
        "decided_by": "proctor",
        "reason": "timeout",
        "command": {"code": 0, "signal": None},
    }
    assert proctor("runs", "wait", run.name).returncode == 4
    assert proctor("runs", "attach", run.name).returncode == 4
    shown = json.loads(proctor("runs", "show", run.name, "--json").stdout)
    assert (shown["outcome"], shown["exit"]["code"]) == ("timeout", 4)


def test_a_stopped_run_exits_130_for_every_reader(isolated_runs: Path) -> None:
    started = proctor("run", "-d", "--json", "--", "sh", "-c", TRAP_0)
    run_id = json.loads(started.stdout)["run_id"]
    run = isolated_runs / run_id
    wait_for(lambda: "process" in json.loads((run / "record.json").read_text()), 60, "the command")
    stopped = proctor("runs", "stop", run_id, "--json")
    assert stopped.returncode == 0, stopped.stderr
    assert json.loads(stopped.stdout)["outcome"] == "stopped"
    assert (run / "exit_code").read_text() == "130 stopped 0\n"
    assert proctor("runs", "wait", run_id).returncode == 130
    assert proctor("runs", "attach", run_id).returncode == 130


def test_the_old_exit_code_form_of_a_timed_out_run_is_still_not_success(
    isolated_runs: Path,
) -> None:
    assert proctor("run", "--timeout", "1s", "--", "sh", "-c", TRAP_0).returncode == 4
    run = only_run(isolated_runs)
    (run / "exit_code").write_text("0\n")  # what proctor wrote before the form said why
    assert proctor("runs", "wait", run.name).returncode == 4
    shown = json.loads(proctor("runs", "show", run.name, "--json").stdout)
    assert shown["outcome"] == "timeout"


@pytest.mark.parametrize("text", ["256\n", "-256\n", "999 SIGTERM\n", "ok\n"])
def test_an_exit_code_outside_0_255_is_unknown(isolated_runs: Path, text: str) -> None:
    assert proctor("run", "--", "true").returncode == 0
    run = only_run(isolated_runs)
    (run / "exit_code").write_text(text)
    assert proctor("runs", "wait", run.name).returncode == 6
    shown = json.loads(proctor("runs", "show", run.name, "--json").stdout)
    assert (shown["state"], shown["outcome"]) == ("unknown", "unknown")


def test_list_and_show_believe_the_exit_code_file_not_the_record(isolated_runs: Path) -> None:
    assert proctor("run", "--", "true").returncode == 0
    run = only_run(isolated_runs)
    (run / "exit_code").write_text("1\n")  # the record still says ok, exit 0
    assert proctor("runs", "wait", run.name).returncode == 1
    shown = json.loads(proctor("runs", "show", run.name, "--json").stdout)
    assert (shown["outcome"], shown["exit"]["code"]) == ("failed", 1)
    (row,) = json.loads(proctor("runs", "list", "--json").stdout)
    assert (row["outcome"], row["exit_code"]) == ("failed", 1)


_HALF_STARTED = """
import os, signal, sys, time
from pathlib import Path
from typing import Any
from proctor.record.recorder import Recorder
rec = Recorder.create(Path(sys.argv[1]))
rec.run.write_json("plan.json", {"argv": ["sleep", "1"], "log": "x.log"})
print(rec.run.run_id, flush=True)
if sys.argv[2] == "die":
    os.kill(os.getpid(), signal.SIGKILL)
time.sleep(300)
"""


def _half_started(runs: Path, how: str) -> tuple[subprocess.Popen[str], str]:
    """A run directory holding only plan.json, as a controller interrupted while starting a
    run leaves it: its owner either alive ("hold") or killed ("die")."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _HALF_STARTED, str(runs), how], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    return proc, proc.stdout.readline().strip()


def test_a_run_directory_nobody_holds_is_unknown_not_starting(isolated_runs: Path) -> None:
    proc, run_id = _half_started(isolated_runs, "die")
    proc.wait(timeout=60)
    assert sorted(p.name for p in (isolated_runs / run_id).iterdir()) == [
        ".owner.lock",
        "plan.json",
    ]
    shown = json.loads(proctor("runs", "show", run_id, "--json").stdout)
    assert shown["state"] == "unknown"
    assert proctor("runs", "wait", run_id, timeout=60).returncode == 6
    stopped = proctor("runs", "stop", run_id, timeout=60)
    assert stopped.returncode == 0, stopped.stderr
    assert "no process of it is alive" in stopped.stderr


def test_a_starting_run_has_a_live_owner_and_is_unknown_once_it_is_gone(
    isolated_runs: Path,
) -> None:
    proc, run_id = _half_started(isolated_runs, "hold")
    try:
        shown = json.loads(proctor("runs", "show", run_id, "--json").stdout)
        assert shown["state"] == "starting"
        assert proctor("runs", "wait", run_id, "--timeout", "1s").returncode == 4  # still going
    finally:
        proc.kill()
        proc.wait(timeout=30)
    assert proctor("runs", "wait", run_id, timeout=60).returncode == 6


def test_time_limit_counts_from_the_command_start(isolated_runs: Path) -> None:
    result = proctor("run", "--timeout", "0.01", "--", "sleep", "0.5")
    assert result.returncode == 4, result.stderr
    assert (only_run(isolated_runs) / "exit_code").read_text().startswith("4 timeout ")


# Loaded by every Python process of the run (the wrapper included) through PYTHONPATH: the
# wrapper's "running" record write takes 3 s, as an fsync on a loaded disk can.
SLOW_RECORD = """
import time
from proctor.record import recorder

_update = recorder.Recorder.update

def _slow(self, *args, **fields):
    if fields.get("outcome") == "running":
        time.sleep(3)
    return _update(self, *args, **fields)

recorder.Recorder.update = _slow
"""


def test_time_limit_holds_while_the_wrapper_is_busy_recording(
    isolated_runs: Path, tmp_path: Path
) -> None:
    # The command would finish (and leave its mark) at 1 s, inside the wrapper's 3 s record
    # write; a limit of 0.2 s must stop it before that, not read it as done in time.
    inject = tmp_path / "inject"
    inject.mkdir()
    (inject / "sitecustomize.py").write_text(SLOW_RECORD, encoding="utf-8")
    mark = tmp_path / "finished"
    result = proctor(
        "run",
        "--timeout",
        "0.2",
        "--",
        "sh",
        "-c",
        f"sleep 1; touch {mark}",
        env={"PYTHONPATH": f"{inject}:{sys.path[0]}"},
    )
    assert result.returncode == 4, result.stderr
    time.sleep(1.5)  # long after the command would have marked its end
    assert not mark.exists()
    run = only_run(isolated_runs)
    assert (run / "exit_code").read_text().startswith("4 timeout ")
    events = [e["event"] for e in json.loads((run / "record.json").read_text())["events"]]
    assert "timeout" in events


def _detached_sleep(isolated_runs: Path, env: dict[str, str]) -> tuple[Path, Any, Any]:
    """A detached `proctor run -- sleep 30`: its run directory, its wrapper and its command
    (psutil processes), once both are up."""
    import psutil

    started = proctor("run", "-d", "--json", "--", "sleep", "30", env=env)
    assert started.returncode == 0, started.stderr
    run = isolated_runs / json.loads(started.stdout)["run_id"]
    wait_for(lambda: (run / "wrapper.pid").exists(), 60, "the wrapper")
    wrapper = psutil.Process(json.loads((run / "wrapper.pid").read_text())["pid"])
    wait_for(lambda: bool(wrapper.children()), 60, "the command")
    (command,) = wrapper.children()
    return run, wrapper, command


def test_a_stop_that_reaches_the_command_and_the_wrapper_together_is_a_stop(
    isolated_runs: Path, tmp_path: Path
) -> None:
    """Slurm's scancel signals every process of a step at once: the command dies of its SIGTERM
    and the wrapper's own SIGTERM waits behind it. Held here deterministically: both signals are
    sent while the wrapper is busy in a 3 s record write, so it finds the command gone and the
    stop pending together. The run was stopped (130, `130 stopped 143 SIGTERM`), never a
    failure of the command's own (CI under load read 'failed')."""
    import os
    import signal

    import psutil

    inject = tmp_path / "inject"
    inject.mkdir()
    (inject / "sitecustomize.py").write_text(SLOW_RECORD, encoding="utf-8")
    env = {"PYTHONPATH": f"{inject}:{sys.path[0]}"}
    run, wrapper, command = _detached_sleep(isolated_runs, env)
    os.kill(command.pid, signal.SIGTERM)
    # Dead, a zombie until the wrapper (asleep in its record write) reaps it: then its signal.
    wait_for(lambda: command.status() == psutil.STATUS_ZOMBIE, 10, "the command's death")
    os.kill(wrapper.pid, signal.SIGTERM)
    waited = proctor("runs", "wait", run.name, "--timeout", "60s", env=env, timeout=90)
    assert waited.returncode == 130, waited.stdout + waited.stderr
    assert (run / "exit_code").read_text().split()[:2] == ["130", "stopped"]
    assert json.loads((run / "record.json").read_text())["outcome"] == "stopped"


def test_a_stop_whose_wrapper_signal_comes_after_the_command_is_gone_is_a_stop(
    isolated_runs: Path,
) -> None:
    """Slurm's proctrack signals a step's processes one by one, deepest first: on a loaded
    node the command can die of its SIGTERM, and be reaped, before the wrapper's SIGTERM is
    even sent (CI with a hog per core read 'failed'). A second later it comes: still a stop."""
    import contextlib
    import os
    import signal

    import psutil

    run, wrapper, command = _detached_sleep(isolated_runs, {})
    os.kill(command.pid, signal.SIGTERM)
    wait_for(lambda: not psutil.pid_exists(command.pid), 10, "the command reaped")
    time.sleep(1.0)
    with contextlib.suppress(ProcessLookupError):  # the old wrapper had ended: 'failed'
        os.kill(wrapper.pid, signal.SIGTERM)
    waited = proctor("runs", "wait", run.name, "--timeout", "60s", timeout=90)
    assert waited.returncode == 130, waited.stdout + waited.stderr
    assert (run / "exit_code").read_text().split()[:2] == ["130", "stopped"]
    assert json.loads((run / "record.json").read_text())["outcome"] == "stopped"


def test_a_running_flow_is_a_live_run_that_readers_see_and_stop(
    fake_engine: int,
    isolated_runs: Path,
    tmp_path: Path,
) -> None:
    work = git_project(tmp_path / "work")  # the flow runs in a git checkout
    port = fake_engine
    controller = proctor_popen(
        "flow",
        "--engine",
        "fake",
        "--model",
        "m",
        "--port",
        str(port),
        "--poll",
        "1s",
        "--stuck-polls",
        "1000",
        "--workload-cmd",
        "sleep 300",
    )
    try:
        flow_dir: Path | None = None
        deadline = time.monotonic() + 120
        while flow_dir is None and time.monotonic() < deadline:
            for rec in isolated_runs.glob("*/record.json"):
                data = json.loads(rec.read_text())
                if data.get("kind") == "flow" and data.get("workload_run"):
                    flow_dir = rec.parent
            time.sleep(0.1)
        if flow_dir is None:
            controller.kill()
            pytest.fail(f"the flow never started its workload: {controller.communicate()}")
        flow_id = flow_dir.name
        shown = json.loads(proctor("runs", "show", flow_id, "--json").stdout)
        assert (shown["state"], shown["outcome"]) == ("running", "running")
        listed = {r["id"]: r for r in json.loads(proctor("runs", "list", "--json").stdout)}
        assert listed[flow_id]["outcome"] == "running"
        assert proctor("runs", "wait", flow_id, "--timeout", "1s").returncode == 4
        stopped = proctor("runs", "stop", flow_id, "--json", timeout=300)
        assert stopped.returncode == 0, stopped.stderr
        view = json.loads(stopped.stdout)
        assert (view["stop_sent"], view["outcome"]) == (True, "stopped"), view
        assert controller.wait(timeout=120) == 130
    finally:
        controller.kill()
        controller.communicate()
    assert (flow_dir / "exit_code").read_text() == "130 stopped\n"
    assert proctor("runs", "wait", flow_id).returncode == 130
    record = json.loads((flow_dir / "record.json").read_text())
    assert record["outcome"] == "stopped"
    assert record["argv"][:2] == ["proctor", "flow"] and "sleep 300" in record["argv"]
    assert record["source"]["commit"], record["source"]
    assert record["cwd"] == str(work)
    assert record["started_at"] and record["duration_s"] is not None

"""The wrapper of a local run starts while the controller writes the record (launch.py,
_EarlyWrapper): it must touch nothing and run nothing until the controller hands it the
argv, and a run refused or failed before that ends it having done nothing."""

from __future__ import annotations

from pathlib import Path

import psutil
import pytest

from proctor.errors import TargetUnavailable
from proctor.record.rundir import RunDir
from proctor.record.status import run_state
from proctor.spec.config import ProjectConfig
from proctor.spec.plan import RunFlags, resolve_run_plan
from proctor.supervise import launch
from proctor.targets.service import SupervisedRun


def _wrappers() -> list[psutil.Process]:
    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            if "proctor.supervise.wrapper" in child.cmdline():
                found.append(child)
        except psutil.Error:
            pass
    return found


def test_a_run_failed_while_its_record_is_made_runs_nothing(
    isolated_runs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = tmp_path / "ran"
    spawned: list[RunDir] = []
    real_spawn = launch._EarlyWrapper.spawn

    def spawn_then_note(self: launch._EarlyWrapper, run: RunDir) -> None:
        real_spawn(self, run)
        assert self.proc is not None  # the wrapper is started before the record
        spawned.append(run)

    def refuse() -> dict[str, object]:
        raise TargetUnavailable("refused while the record was made")

    monkeypatch.setattr(launch._EarlyWrapper, "spawn", spawn_then_note)
    monkeypatch.setattr(launch, "collect_gpu", refuse)
    plan = resolve_run_plan(
        RunFlags(argv=["touch", str(marker)], runs_dir=str(isolated_runs)),
        ProjectConfig(),
        environ={},
    )
    with pytest.raises(TargetUnavailable):
        launch.start_run(plan)
    (run,) = spawned
    _gone, alive = psutil.wait_procs(_wrappers(), timeout=20)
    assert not alive, "the early wrapper did not end on an empty stdin"
    assert not marker.exists(), "the refused run's command ran"
    assert not run.wrapper_pid_path.exists()
    assert (run.path / ".wrapper.err").read_text() == ""
    assert run_state(run).state == "unknown"  # no owner left, no exit status


def test_a_run_started_early_runs_its_real_argv(isolated_runs: Path, tmp_path: Path) -> None:
    """The argv comes on stdin once the record is written (a secret in it never in a file)."""
    marker = tmp_path / "ran"
    plan = resolve_run_plan(
        RunFlags(argv=["sh", "-c", f"echo $0 > {marker}", "s3cr3t"], runs_dir=str(isolated_runs)),
        ProjectConfig(),
        environ={},
    )
    started = launch.start_run(plan)
    state = SupervisedRun(started.run).wait()
    assert state.state == "finished" and state.exit is not None and state.exit.code == 0
    assert marker.read_text() == "s3cr3t\n"
    assert not _wrappers()

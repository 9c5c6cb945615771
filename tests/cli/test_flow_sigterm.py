"""SIGTERM back to back at a flow's controller: one stop, torn down and ended to its record.

At a time limit a supervised command gets SIGTERM twice, milliseconds apart (the wrapper's
deadline guard, then its kill ladder; supervise/sigterm.py). The flow's first SIGTERM tears down
its workload and server; the later ones must not cut that teardown or the record's end short
(tests/workloads/test_sweep_sigterm.py and test_offline.py: the same for a sweep and offline).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from tests.cli.test_flow_evidence import _dead, _records, fake_engine, sleeping_flow  # noqa: F401
from tests.helpers import proctor
from tests.workloads.test_sweep_sigterm import _group_gone, sigterms_until_ended


def _stopped_flow(port: int, runs: Path, env: dict[str, str] | None = None) -> None:
    """A flow stopped by SIGTERM back to back and repeated while its workload runs: it ends
    stopped, its workload and server runs stopped and gone (the server's whole group)."""
    controller = sleeping_flow(port, env)
    try:
        deadline = time.monotonic() + 60
        workload: dict[str, object] = {}
        while "process" not in workload:
            assert controller.poll() is None, controller.communicate()
            assert time.monotonic() < deadline, "the flow never started its workload"
            flows = [r for r in _records(runs).values() if r.get("kind") == "flow"]
            if flows and flows[0].get("workload_run"):
                workload = _records(runs).get(str(flows[0]["workload_run"]), {})
            time.sleep(0.05)
        sigterms_until_ended(controller, runs, "flow")
    finally:
        controller.kill()
        _, err = controller.communicate()
    records = _records(runs)
    [flow] = [r for r in records.values() if r["kind"] == "flow"]
    flow_dir = runs / str(flow["run_id"])
    assert (flow_dir / "exit_code").read_text() == "130 stopped\n", err[-3000:]
    assert flow["outcome"] == "stopped", flow
    assert "[flow] interrupted: tearing down" in (flow_dir / "flow.log").read_text()
    steps = flow["steps"]
    assert isinstance(steps, list)
    [teardown] = [s for s in steps if s["step"] == "teardown"]
    assert teardown["exit_code"] == 0, teardown
    for run_id in (str(flow["workload_run"]), str(flow["server_run"])):
        record = records[run_id]
        assert record["outcome"] == "stopped", record
        assert (runs / run_id / "exit_code").exists()
        process = record["process"]
        assert isinstance(process, dict)
        assert _dead(int(process["pid"])) and _group_gone(int(process["pgid"])), record["kind"]
    assert set(teardown["stopped_runs"]) == {flow["workload_run"], flow["server_run"]}
    assert proctor("runs", "verify", flow_dir.name).returncode == 0


def test_later_sigterms_do_not_cut_a_flows_stop_short(
    fake_engine: int, isolated_runs: Path
) -> None:
    _stopped_flow(fake_engine, isolated_runs)


# Loaded by the flow's controller through PYTHONPATH: the first line it logs once interrupted
# takes a second, so the later SIGTERMs land between the interrupt and the teardown.
SLOW_INTERRUPT = """
import sys, time

if sys.argv[1:2] == ["flow"]:
    from proctor import flow

    _log = flow.Flow.log

    def _slow(self, line):
        _log(self, line)
        if line.startswith("[flow] interrupted:"):
            time.sleep(1)

    flow.Flow.log = _slow
"""


def test_a_sigterm_before_the_teardown_starts_is_the_same_stop(
    fake_engine: int, isolated_runs: Path, tmp_path: Path
) -> None:
    inject = tmp_path / "inject"
    inject.mkdir()
    (inject / "sitecustomize.py").write_text(SLOW_INTERRUPT, encoding="utf-8")
    path = os.pathsep.join(filter(None, [str(inject), os.environ.get("PYTHONPATH")]))
    _stopped_flow(fake_engine, isolated_runs, {"PYTHONPATH": path})
    flow = next(r for r in _records(isolated_runs).values() if r["kind"] == "flow")
    assert json.dumps(flow).count('"step": "teardown"') == 1  # one teardown, not two

"""The server workflow's steps are typed (jobs/steps.py): `serve start|ready|stop`, `drain` and
`inspect` take exactly their step's fields as options (and the server's, for serve start), reuse
FlowJob's declarations of the settings a flow also has, travel under `--target` as themselves
(StepRequest) and run there through `python -m proctor.jobs step` without any proctor.cli
module; whether the server outlives the command on a target is the step's own property."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from proctor.cli.jobopts import own_options
from proctor.jobs import options
from proctor.jobs.flow import FlowJob
from proctor.jobs.serve import ServeJob
from proctor.jobs.steps import (
    STEP,
    DrainStep,
    InspectStep,
    ServeReadyStep,
    ServeStartStep,
    ServeStopStep,
    Step,
)
from proctor.targets.remote.requests import StepRequest
from tests.fixtures.fake_openai_server import free_port
from tests.helpers import FAKE_ENGINE_TOML, REPO
from tests.jobs.test_options import _mounted

COMMANDS: dict[tuple[str, ...], type[Step]] = {
    ("serve", "start"): ServeStartStep,
    ("serve", "ready"): ServeReadyStep,
    ("serve", "stop"): ServeStopStep,
    ("drain",): DrainStep,
    ("inspect",): InspectStep,
}
# What the commands declare themselves: where runs go, how output is shown, the target and
# (serve start) the target's machine.
OWN = {"--runs-dir", "--json", "--target"}
MACHINE = {"--nodes", "--gpus-per-node", "--partition", "--time"}


def _flags(model: type[BaseModel]) -> set[str]:
    return {opt.flag.split("/")[0] for _, opt in options.options(model).values()}


@pytest.mark.parametrize("path", list(COMMANDS))
def test_each_step_command_takes_its_steps_fields_and_its_own_options_only(
    path: tuple[str, ...],
) -> None:
    model = COMMANDS[path]
    assert [n for n, why in options.unflagged(model).items() if not why.strip()] == []
    for name, (info, _) in options.options(model).items():
        assert (info.description or "").strip(), f"{model.__name__}.{name} has no help"
    command = _mounted(*path)
    flags = {o for p in command.params for o in getattr(p, "opts", []) if o.startswith("--")}
    own = own_options(command.callback)  # type: ignore[arg-type]
    fields = _flags(model) | (_flags(ServeJob) if model is ServeStartStep else set())
    assert own == OWN | (MACHINE if model is ServeStartStep else set())
    assert flags == fields | own
    assert fields.isdisjoint(own)


@pytest.mark.parametrize(
    ("model", "field", "flow_field"),
    [
        (ServeReadyStep, "timeout", "ready_timeout"),
        (ServeReadyStep, "poll", "ready_poll"),
        (DrainStep, "max_", "max_"),
        (DrainStep, "poll", "poll"),
        (DrainStep, "stuck_polls", "stuck_polls"),
        (DrainStep, "error_streak", "error_streak"),
        (DrainStep, "startup_max", "startup_max"),
        (DrainStep, "client_pattern", "client_pattern"),
        (InspectStep, "timeout", "inspect_timeout"),
        (ServeStopStep, "gpu_processes", "gpu_processes"),
        (ServeStopStep, "vram_timeout", "vram_timeout"),
        (ServeStartStep, "gpu_sample", "gpu_sample"),
    ],
)
def test_a_setting_a_flow_also_has_is_the_flows_declaration(
    model: type[BaseModel], field: str, flow_field: str
) -> None:
    """Type, default and checks come from FlowJob's field itself (not written again): the same
    validator objects, the same default; only a flag a command spells otherwise differs."""
    mine, flows = model.model_fields[field], FlowJob.model_fields[flow_field]
    assert mine.annotation == flows.annotation
    assert mine.get_default(call_default_factory=True) == flows.get_default(
        call_default_factory=True
    )

    def checks(info: Any) -> list[Any]:
        return [m for m in info.metadata if not isinstance(m, options.Opt | options.NoOpt)]

    assert len(checks(mine)) == len(checks(flows))
    assert all(a is b for a, b in zip(checks(mine), checks(flows), strict=True))
    flag = options.option_of(flows)
    if isinstance(flag, options.Opt) and flag.flag == options.options(model)[field][1].flag:
        assert options.option_of(mine) is flag  # the flow's own flag, not one written again


def test_the_flows_checks_hold_for_a_step() -> None:
    assert DrainStep(max_="2m", poll="1s").max_ == 120.0
    for bad in ({"stuck_polls": 0}, {"max_": "soon"}, {"poll": -1}):
        with pytest.raises(ValidationError):
            DrainStep(**bad)  # type: ignore[arg-type]
    assert ServeReadyStep(timeout="90s").timeout == 90.0
    assert ServeReadyStep().timeout == 900.0 and InspectStep().timeout == 90.0


@pytest.mark.parametrize(
    ("step", "lives", "direct"),
    [
        (ServeStartStep(server=ServeJob(engine="fake", model="m")), True, True),
        (ServeReadyStep(run="r"), True, False),
        (DrainStep(run="r"), True, False),
        (ServeStopStep(run="r"), False, False),
        (InspectStep(run="r"), False, True),
    ],
)
def test_whether_the_server_outlives_the_step_is_the_steps_property_and_it_travels(
    step: Step, lives: bool, direct: bool
) -> None:
    assert (step.server_lives, step.direct) == (lives, direct)
    back = StepRequest.model_validate_json(StepRequest(step=step, answer=True).model_dump_json())
    assert back.step == step and back.answer
    assert back.step.server_lives is lives
    assert STEP.validate_python(step.model_dump()) == step


# The far side's code path, from the step's request to the step's end: at exit it writes every
# module it imported.
FAR_SCRIPT = """
import atexit, io, json, os, sys
atexit.register(lambda: os.write(2, ("MODULES " + json.dumps(sorted(sys.modules)) + "\\n").encode()))
from proctor.targets.remote.step import far_command
argv, stdin, title = far_command(sys.argv[1])
assert argv[1:] == ["-m", "proctor.jobs", "step"], argv
sys.stdin = io.StringIO(stdin)
from proctor.jobs.__main__ import main
sys.exit(main(["step"]))
"""


def _far(step: Step, tmp_path: Path, *, answer: bool = True) -> tuple[int, Any, list[str]]:
    """The step run as the far side runs it: (exit code, its answer, the modules it loaded)."""
    request = StepRequest(step=step, answer=answer)
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "PROCTOR_RUNS_DIR": str(tmp_path / "r")}
    ran = subprocess.run(
        [sys.executable, "-c", FAR_SCRIPT, request.model_dump_json()],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=180,
        check=False,
    )
    modules = json.loads(ran.stderr.rsplit("MODULES ", 1)[1].splitlines()[0])
    answer_doc = json.loads(ran.stdout) if answer else ran.stdout
    return ran.returncode, answer_doc, modules


def _no_cli(modules: list[str]) -> None:
    assert "proctor.jobs.step_run" in modules  # the check sees the far path's own modules
    assert [m for m in modules if m.startswith("proctor.cli")] == []
    assert "typer" not in modules


def test_the_far_side_starts_gates_and_stops_a_server_without_the_cli(tmp_path: Path) -> None:
    (tmp_path / "proctor.toml").write_text(FAKE_ENGINE_TOML)
    port = free_port()
    server = ServeJob(engine="fake", model="m", port=port)
    code, started, modules = _far(ServeStartStep(server=server, min_free_disk=0), tmp_path)
    _no_cli(modules)
    assert code == 0, started
    run_id = started["run_id"]
    try:
        assert started["server"]["port"] == port and not started["attached"], started
        record = json.loads((tmp_path / "r" / run_id / "record.json").read_text())
        assert record["kind"] == "server"
        code, ready, modules = _far(ServeReadyStep(run=run_id, timeout=60), tmp_path)
        _no_cli(modules)
        assert code == 0 and ready["exit_code"] == 0, ready
        # Without an answer, the far step speaks in lines (the far job's log the user follows).
        code, said, _ = _far(ServeReadyStep(run=run_id, timeout=60), tmp_path, answer=False)
        assert code == 0 and said == ""
    finally:
        code, stopped, modules = _far(ServeStopStep(run=run_id), tmp_path)
    _no_cli(modules)
    assert code == 0 and [r["run_id"] for r in stopped] == [run_id], stopped
    record = json.loads((tmp_path / "r" / run_id / "record.json").read_text())
    assert record["outcome"] == "stopped"


def test_a_far_steps_failure_is_its_answer_with_the_error(tmp_path: Path) -> None:
    """As the CLI's --json: the document (here none) with `error`: exit code, reason, fix; a
    list answer (inspect's rows) would go under `result`."""
    code, answer, modules = _far(ServeReadyStep(), tmp_path)
    _no_cli(modules)
    assert code == 64
    assert answer["error"]["exit_code"] == 64
    assert answer["error"]["reason"] == "no server run to gate"
    assert answer["error"]["fix"] == "pass RUN or --port P"

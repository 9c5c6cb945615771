"""`proctor run`'s job: CommandJob declares each of its settings once. `run` and `plan` take
exactly its flags (plus their own run control), and so does `slurm run`, the console script's lean path reads the same
flags, a far target's job is the CommandJob laid over proctor.toml's [run] table, and
`proctor.load_job` / `run_job` know kind "command"."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from proctor.cli.entry import run_options
from proctor.cli.jobopts import own_options
from proctor.errors import UsageError
from proctor.jobs import options
from proctor.jobs.command import CommandJob
from proctor.jobs.run import load_job, run_job
from proctor.spec.config import ProjectConfig, RunDefaults
from proctor.spec.plan import RunFlags, resolve_run_plan
from proctor.targets.remote.commands import job_from_flags
from tests.jobs.test_options import _field_flags, _flags, _mounted, unexplained

RUN_CONTROL = {"--runs-dir", "--detach", "--dry-run", "--config", "--json", "--target"}


def test_every_command_field_has_a_flag_or_says_why_not() -> None:
    assert unexplained(CommandJob) == []
    for name, (info, _) in options.options(CommandJob).items():
        assert (info.description or "").strip(), f"{name} has no help"


@pytest.mark.parametrize("command", [("run",), ("plan",), ("slurm", "run")])
def test_run_and_plan_take_exactly_the_jobs_flags_and_their_run_control(
    command: tuple[str, ...],
) -> None:
    mounted = _mounted(*command)
    flags = _flags(mounted)
    own = own_options(mounted.callback)  # type: ignore[arg-type]
    assert _field_flags(CommandJob) <= flags
    assert flags == _field_flags(CommandJob) | own
    assert not own & _field_flags(CommandJob)  # declared once
    if command == ("plan",):
        assert own == {"--runs-dir", "--config", "--json"}
    else:  # the rest of run's own options are the target's (slurm run: the cluster's)
        assert own >= RUN_CONTROL


def test_the_lean_path_reads_every_flag_of_the_job() -> None:
    values, switches = run_options()
    read = {name for name in (*values, *switches) if name.startswith("--")}
    assert _field_flags(CommandJob) <= read
    shorts = {opt.short for _, opt in options.options(CommandJob).values() if opt.short}
    assert shorts <= set(values) | set(switches)


def test_a_far_job_is_the_flags_the_user_set_over_the_run_table() -> None:
    config = ProjectConfig(
        run=RunDefaults(
            timeout="1h",
            grace="5s",
            gpu_sample=2.0,
            env={"A": "from-toml", "B": "b"},
            secret_names=["B"],
            allow_unhealthy_gpu=True,
        )
    )
    flags = RunFlags(argv=["echo", "hi"], timeout="90s", env=["A=from-flag"], name="n")
    job = job_from_flags(flags, config)
    assert job.argv == ["echo", "hi"] and job.name == "n"
    assert (job.timeout_s, job.grace_s, job.gpu_sample_s) == (90.0, 5.0, 2.0)
    assert job.env == {"A": "from-flag", "B": "b"} and job.secret_names == ["B"]
    assert job.allow_unhealthy_gpu is True
    # Nothing set: the table's values, as the local plan resolves them.
    bare = job_from_flags(RunFlags(argv=["true"]), config)
    plan = resolve_run_plan(RunFlags(argv=["true"]), config, environ={})
    assert bare.timeout_s == plan.timeout_s.value == 3600.0
    assert bare.grace_s == plan.grace_s.value == 5.0


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (RunFlags(argv=["true"], timeout="soon"), "--timeout"),
        (RunFlags(argv=["true"], env=["A B=1"]), "invalid --env 'A B'"),
        (RunFlags(argv=["true"], gpu_sample=-1.0), "gpu_sample"),
        (RunFlags(argv=[]), "no command given"),
    ],
)
def test_a_bad_far_job_is_a_usage_error_naming_it(flags: RunFlags, named: str) -> None:
    with pytest.raises(UsageError, match=named):
        job_from_flags(flags, ProjectConfig())


def test_load_job_knows_a_command_and_run_job_runs_it(
    isolated_runs: Path, tmp_path: Path, capfdbinary: pytest.CaptureFixture[bytes]
) -> None:
    marker = tmp_path / "ran"
    text = json.dumps(
        {
            "kind": "command",
            "argv": [sys.executable, "-c", f"open({str(marker)!r}, 'w').write('x'); exit(3)"],
            "name": "cmd-job",
            "env": ["WORD=hi"],
        }
    )
    job = load_job(text)
    assert isinstance(job, CommandJob) and job.env_table() == {"WORD": "hi"}
    assert run_job(job) == 3  # the command's status, as `proctor run` passes it through
    assert marker.read_text() == "x"
    (run,) = [p for p in isolated_runs.iterdir() if (p / "record.json").is_file()]
    assert (run / "cmd-job.log").is_file()
    record = json.loads((run / "record.json").read_text())
    assert record["outcome"] == "failed" and record["exit"]["code"] == 3
    with pytest.raises(UsageError, match="timeout_s: Extra inputs"):
        load_job('{"kind": "command", "argv": ["true"], "timeout_s": 5}')

"""A job's settings are declared once, on its model: every field has a flag (or says why not),
every flag of `bench` and `sweep` is a field's or one of the command's own run-control options,
and a flow file's table, the load generator's own flags and the job's JSON all read the same
fields."""

from __future__ import annotations

import functools
import math

import click
import pytest
import typer
from pydantic import BaseModel, Field

from proctor.cli import bench as bench_cli
from proctor.cli.jobopts import own_options
from proctor.jobs import options
from proctor.jobs.argv import job_argv, job_json
from proctor.jobs.bench import BenchJob
from proctor.jobs.run import load_job
from proctor.jobs.sweep import SweepJob
from proctor.workloads.loadgen.__main__ import parser as loadgen_parser


@functools.cache
def _command(name: str) -> click.Command:
    app = typer.Typer()
    bench_cli.register(app)
    group = typer.main.get_command(app)
    assert isinstance(group, click.Group)
    command = group.get_command(click.Context(group), name)
    assert command is not None
    return command


def _flags(command: click.Command) -> set[str]:
    return {o for p in command.params for o in getattr(p, "opts", []) if o.startswith("--")}


def _field_flags(model: type[BaseModel], skip: tuple[str, ...] = ()) -> set[str]:
    return {opt.flag.split("/")[0] for name, (_, opt) in options.options(model).items()
            if name not in skip}  # fmt: skip


def unexplained(model: type[BaseModel]) -> list[str]:
    """Fields that have neither a flag nor a reason for having none."""
    return sorted(name for name, why in options.unflagged(model).items() if not why.strip())


@pytest.mark.parametrize("model", [BenchJob, SweepJob])
def test_every_field_has_a_flag_or_says_why_not(model: type[BaseModel]) -> None:
    assert unexplained(model) == []
    for name, (info, _) in options.options(model).items():
        assert (info.description or "").strip(), f"{name} has no help"


def test_the_check_sees_a_field_without_a_flag() -> None:
    """A test that cannot fail is a defect: a bare field is reported."""

    class Grown(BenchJob):
        new_knob: int = Field(default=1, description="a knob added without a flag")

    assert unexplained(Grown) == ["new_knob"]


def test_bench_options_are_the_jobs_fields_and_its_own_and_nothing_else() -> None:
    flags = _flags(_command("bench"))
    fields = _field_flags(BenchJob)
    own = own_options(bench_cli.bench)
    assert fields <= flags
    assert flags - fields == own
    assert fields.isdisjoint(own)


def test_sweep_takes_every_bench_option() -> None:
    flags = _flags(_command("sweep"))
    bench_fields = _field_flags(BenchJob)
    sweep_fields = _field_flags(SweepJob)
    own = own_options(_command("sweep").callback)  # type: ignore[arg-type]
    assert bench_fields <= flags, sorted(bench_fields - flags)
    assert sweep_fields <= flags
    assert flags == bench_fields | sweep_fields | own
    # the two the sweep makes axes of are the sweep's own lists, declared once there
    assert {"--concurrency", "--request-rate"} <= sweep_fields


def test_the_load_generator_module_takes_every_bench_flag() -> None:
    parser = loadgen_parser()
    flags = {o for a in parser._actions for o in a.option_strings if o.startswith("--")}
    assert _field_flags(BenchJob) <= flags


def test_a_flow_table_reads_every_flag_name_and_field_name() -> None:
    for field, (_, opt) in options.options(BenchJob).items():
        for key in {field, opt.name, opt.name.replace("-", "_")}:
            assert options.lookup(BenchJob)[key] == field


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"request_rate": math.inf, "goodput_slos_ms": {"ttft": 500.0}, "endpoint": "chat"},
        {"request_rate": 12.5, "workers": 2, "concurrency": 8, "percentiles": [50.0, 99.9]},
        {"dataset": "shared-prefix", "prefix_len": 32, "ignore_eos": False, "repeat": 3},
    ],
)
def test_a_job_travels_as_json_and_comes_back_the_same(changes: dict[str, object]) -> None:
    job = BenchJob(**changes)  # type: ignore[arg-type]
    argv = job_argv(job)
    assert argv[1:4] == ["-m", "proctor.jobs", "run"]
    assert load_job(argv[4]) == job
    sweep = SweepJob(bench=job, concurrency=[job.concurrency, 2 * job.concurrency])
    assert load_job(job_json(sweep)) == sweep


def test_a_sweep_point_is_validated_again() -> None:
    sweep = SweepJob(bench=BenchJob(workers=4, concurrency=8), concurrency=[2, 8])
    assert sweep.point(concurrency=8).concurrency == 8
    with pytest.raises(ValueError, match="workers must not exceed concurrency"):
        sweep.point(concurrency=2)


def test_a_list_field_is_a_repeatable_list_option_on_the_command_line() -> None:
    """`--addon a --addon b` reaches the job as a list (a field type read wrongly made it the
    text '[]' once: every serve start failed)."""
    from proctor.cli.jobopts import job_parameters
    from proctor.jobs.serve import ServeJob

    kinds = {p.name: p.annotation for p in job_parameters(ServeJob)}
    assert kinds["addon"] == list[str] and kinds["env"] == list[str]
    assert kinds["tp"] == int | None and kinds["port"] is int


def _mounted(*path: str) -> click.Command:
    from proctor.cli import groups
    from proctor.cli.main import app

    groups.mount(app, [path[0]])
    command: click.Command | None = typer.main.get_command(app)
    for name in path:
        assert isinstance(command, click.Group)
        command = command.get_command(click.Context(command), name)
    assert command is not None
    return command


@pytest.mark.parametrize(
    ("path", "skip"),
    [(("serve", "start"), ()), (("flow",), ()), (("slurm", "serve"), ("host",))],
)
def test_every_command_that_starts_a_server_takes_the_serve_jobs_options(
    path: tuple[str, ...], skip: tuple[str, ...]
) -> None:
    from proctor.jobs.serve import ServeJob

    flags = _flags(_mounted(*path))
    assert _field_flags(ServeJob, skip) <= flags
    if path != ("flow",):  # serve start and slurm serve: the same step, one declaration
        from proctor.jobs.steps import ServeStartStep

        own = own_options(_mounted(*path).callback)  # type: ignore[arg-type]
        assert flags == _field_flags(ServeJob, skip) | _field_flags(ServeStartStep) | own

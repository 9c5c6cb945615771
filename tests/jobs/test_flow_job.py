"""The flow job: its settings declared once (every field a `flow` option or a reason), a flow
file's table validated straight into it, only the flags a user set laid over the file, a
record that holds the job (and one written before it refused by name), and a server grid whose
every point is checked before any server starts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from proctor.cli.jobopts import own_options
from proctor.errors import UsageError
from proctor.jobs import options
from proctor.jobs.flow import FlowJob, flow_job
from proctor.jobs.grid import ServerGridJob
from proctor.jobs.serve import ServeJob
from tests.helpers import FAKE_ENGINE_TOML, proctor
from tests.jobs.test_options import _field_flags, _flags, _mounted, unexplained

SERVER = {"engine": "vllm", "model": "m"}


def test_every_flow_field_has_a_flow_option_or_says_why_not() -> None:
    assert unexplained(FlowJob) == []
    assert unexplained(ServerGridJob) == []
    for name, (info, _) in options.options(FlowJob).items():
        assert (info.description or "").strip(), f"{name} has no help"
    command = _mounted("flow")
    flags = _flags(command)
    own = own_options(command.callback)  # type: ignore[arg-type]
    # The flow's options are the server's, the flow job's and its own run controls: no more.
    assert _field_flags(FlowJob) <= flags and _field_flags(ServeJob) <= flags
    assert flags == _field_flags(FlowJob) | _field_flags(ServeJob) | own
    assert own == {"--workload-cmd", "--file", "--resume", "--runs-dir", "--json", "--target"}


def test_the_flow_options_keep_their_names_and_defaults() -> None:
    """`proctor flow --help` lists what it listed before the job existed, defaults the same."""
    command = _mounted("flow")
    defaults = {p.name: p.default for p in command.params}
    assert {
        k: defaults[k]
        for k in ("ready_timeout", "ready_poll", "max_", "poll", "startup_max", "vram_timeout")
    } == {
        "ready_timeout": "15m",
        "ready_poll": "15s",
        "max_": "30m",
        "poll": "10s",
        "startup_max": "15m",
        "vram_timeout": "60s",
    }
    job = flow_job({"server": SERVER}, {}, need_workload=False)
    assert (job.ready_timeout, job.ready_poll, job.max_, job.poll) == (900, 15, 1800, 10)
    assert (job.startup_max, job.vram_timeout, job.stuck_polls, job.error_streak) == (
        900,
        60,
        6,
        5,
    )


def test_a_flow_table_validates_into_the_job_and_flags_win() -> None:
    table = {
        "engine": "vllm",
        "model": "m",
        "port": 9001,
        "ready-timeout": "2m",
        "max": "1h",
        "stuck_polls": 3,
        "no_inspect": True,
        "workload_cmd": "curl x",
        "env": ["A=1"],
    }
    job = flow_job({"poll": 2.0, "server": {"port": 9002}}, table, "f.toml")
    assert (job.ready_timeout, job.max_, job.stuck_polls, job.no_inspect) == (120, 3600, 3, True)
    assert job.poll == 2.0 and job.server.port == 9002 and job.server.env == ["A=1"]
    assert [(w.kind, w.job.argv) for w in job.workloads] == [("cmd", ["curl", "x"])]  # type: ignore[union-attr]
    assert FlowJob.model_validate(job.model_dump(mode="json")) == job


@pytest.mark.parametrize(
    ("table", "named"),
    [
        ({"ready_timout": "1m"}, "'ready_timout'"),
        ({"drain_max": "1m"}, "'drain_max'"),
        ({"stuck_polls": 0}, "stuck_polls"),
        ({"ready_timeout": "soon"}, "--ready-timeout"),
        ({"error-streak": "many"}, "error_streak"),
        ({"client_pattern": "("}, "client_pattern"),
    ],
)
def test_a_bad_ready_or_drain_key_is_a_usage_error_naming_it(
    table: dict[str, object], named: str
) -> None:
    with pytest.raises(UsageError, match=named) as caught:
        flow_job({}, {**SERVER, "workload_cmd": "true", **table}, "f.toml")
    assert caught.value.exit_code == 64


def test_a_flow_file_with_a_misspelt_drain_key_is_64_before_any_server(
    isolated_runs: Path, tmp_path: Path
) -> None:
    """Before the typed job, an unknown key of a flow file was silently ignored."""
    (Path.cwd() / "proctor.toml").write_text(FAKE_ENGINE_TOML)
    path = tmp_path / "flow.toml"
    path.write_text(
        '[flow]\nengine = "fake"\nmodel = "m"\nport = 1\nstuck_pols = 2\nworkload_cmd = "true"\n'
    )
    result = proctor("flow", "--file", str(path))
    assert result.returncode == 64, result.stderr
    assert "'stuck_pols'" in result.stderr and "stuck-polls" in result.stderr
    assert not isolated_runs.exists() or not list(isolated_runs.iterdir())


def _flow_record(runs: Path, record: dict[str, object]) -> Path:
    run = runs / "20260101-000000-aaaaaa"
    run.mkdir(parents=True)
    base = {
        "schema": "proctor.flow",
        "schema_version": 2,
        "run_id": run.name,
        "name": "flow-fake-p8000",
        "kind": "flow",
        "argv": [],
        "created_at": "2026-01-01T00:00:00+00:00",
        "outcome": "running",
        "steps": [],
    }
    (run / "record.json").write_text(json.dumps({**base, **record}))
    return run


def test_a_flow_recorded_before_the_typed_job_is_refused_naming_its_version(
    isolated_runs: Path,
) -> None:
    from proctor.record.schema import SCHEMA_VERSION

    run = _flow_record(
        isolated_runs,
        {
            "schema_version": SCHEMA_VERSION,
            "proctor_version": "0.9.0",
            "options": {"server": {"engine": "fake", "model": "m"}, "workload_argv": ["true"]},
        },
    )
    result = proctor("flow", "--resume", run.name)
    assert result.returncode == 64, result.stderr
    assert "proctor 0.9.0" in result.stderr and "old options format" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_server_grid_with_a_bad_axis_is_64_before_any_server_starts(
    isolated_runs: Path,
) -> None:
    (Path.cwd() / "proctor.toml").write_text(FAKE_ENGINE_TOML)
    args = ["sweep", "--engine", "fake", "--model", "m", "--port", "1", "--group", "g"]
    result = proctor(*args, "--concurrency", "1", "--server-grid", "tp=1,big", "--json")
    assert result.returncode == 64, result.stderr
    assert "tp='big'" in result.stderr and "whole number" in result.stderr
    assert not isolated_runs.exists() or not list(isolated_runs.iterdir())  # nothing started
    flow = flow_job({"server": SERVER}, {}, need_workload=False)
    with pytest.raises(UsageError, match="server axis mns=") as caught:
        ServerGridJob(flow=flow, server={"mns": [{"a": 1}]}, group="g")  # type: ignore[dict-item]
    assert caught.value.exit_code == 64


def test_a_grid_point_is_the_flow_job_validated_again() -> None:
    flow = flow_job({"server": {**SERVER, "tp": 2}, "poll": 3.0}, {}, need_workload=False)
    grid = ServerGridJob(
        flow=flow, server={"max-num-seqs": [8], "tp": [1, 4]}, bench={"concurrency": [1, 2]},
        group="g",
    )  # fmt: skip
    points = [grid.point(p) for p in grid.server_points()]
    assert [p.server.tp for p in points] == [1, 4] and flow.server.tp == 2
    assert all(p.poll == 3.0 and p.continue_on_failure for p in points)
    assert points[0].server.extra == ["--max-num-seqs", "8"]
    assert [w.job.concurrency for w in points[0].workloads] == [1, 2]  # type: ignore[union-attr]


def test_a_grid_gives_every_bench_point_a_list_option_whole() -> None:
    # --client-cores and --percentiles are one value each that is a list: not bench axes
    # (a grid with --client-cores used to be refused as "cannot be a list").
    flow = flow_job({"server": SERVER}, {}, need_workload=False)
    grid = ServerGridJob(
        flow=flow,
        server={"max-num-seqs": [8]},
        bench={"concurrency": [1, 2], "client_cores": [0], "percentiles": [50.0, 99.0]},
        group="g",
    )  # fmt: skip
    (point,) = [grid.point(p) for p in grid.server_points()]
    jobs = [w.job for w in point.workloads]
    assert [j.concurrency for j in jobs] == [1, 2]  # type: ignore[union-attr]
    assert all(j.client_cores == [0] for j in jobs)  # type: ignore[union-attr]
    assert all(j.percentiles == [50.0, 99.0] for j in jobs)  # type: ignore[union-attr]
    with pytest.raises(UsageError, match="bench option isl cannot be a list") as caught:
        ServerGridJob(flow=flow, server={"mns": [1]}, bench={"isl": [8, 16]}, group="g")
    assert caught.value.exit_code == 64


def test_the_jobs_entry_point_runs_a_flow_job_and_a_server_grid_job(isolated_runs: Path) -> None:
    """`python -m proctor.jobs run JOB`, the one entry point every side runs, takes a flow job
    (its own run with its steps' runs, the server torn down) and a server grid job (its home
    run, a flow per point) as JSON, against the fake engine."""
    import subprocess
    import sys

    from proctor.jobs.argv import job_json
    from proctor.jobs.flow import parse_workload
    from tests.fixtures.fake_openai_server import free_port
    from tests.helpers import REPO

    (Path.cwd() / "proctor.toml").write_text(FAKE_ENGINE_TOML)
    bench = {"isl": 8, "osl": 4, "concurrency": 2, "num_prompts": 4, "num_warmups": 0}
    flow = FlowJob(
        server=ServeJob(engine="fake", model="m", port=free_port()),
        workloads=[parse_workload({"bench": bench, "name": "small"})],
        poll=1.0,
        ready_poll=1.0,
    )
    grid = ServerGridJob(
        flow=flow, server={"max-num-seqs": [4]}, bench={**bench, "concurrency": [1]}, group="g"
    )

    def run(job: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "proctor.jobs", "run", job],
            capture_output=True,
            text=True,
            env={**__import__("os").environ, "PYTHONPATH": str(REPO / "src")},
            timeout=240,
            check=False,
        )

    ran = run(job_json(flow))
    assert ran.returncode == 0, ran.stderr[-3000:] + ran.stdout[-3000:]
    records = [json.loads(p.read_text()) for p in isolated_runs.glob("*/record.json")]
    (record,) = [r for r in records if r["kind"] == "flow"]
    assert record["outcome"] == "ok" and record["job"]["server"]["port"] == flow.server.port
    assert [r["kind"] for r in records if r.get("group") == record["run_id"]].count("bench") == 1
    assert {r["kind"] for r in records} == {"flow", "server", "bench"}
    (Path.cwd() / "grid.json").write_text(job_json(grid))
    ran = run("grid.json")
    assert ran.returncode == 0, ran.stderr[-3000:] + ran.stdout[-3000:]
    homes = [json.loads(p.read_text()) for p in isolated_runs.glob("*/record.json")]
    (home,) = [r for r in homes if r["kind"] == "server-sweep"]
    assert home["group"] == "g" and home["outcome"] == "ok", home


def test_a_flows_workloads_are_typed_jobs_pointed_at_its_server() -> None:
    """Each listed workload validates into its job by kind when the flow file is read, and
    holds it pointed at the flow's server: what the record stores and the run is started with."""
    from proctor.jobs.argv import job_data
    from proctor.jobs.bench import BenchJob
    from proctor.jobs.command import CommandJob
    from proctor.jobs.eval import EvalJob
    from proctor.jobs.offline import OfflineJob
    from proctor.jobs.sweep import SweepJob

    table = {
        **SERVER,
        "port": 9001,
        "served-model-name": "served",
        "workload": [
            {"bench": {"concurrency": 4, "request-rate": "inf"}, "name": "b"},
            {"eval": "gsm8k"},
            {"eval": {"model": "mine"}},
            {"sweep": {"concurrency": [1, 2], "isl": 8}},
            {"offline": {"engine": "vllm", "model": "/m"}},
            {"cmd": "echo hi", "env": ["A=1"]},
        ],
    }
    job = flow_job({}, table, "f.toml")
    kinds = [type(w.job) for w in job.workloads]
    assert kinds == [BenchJob, EvalJob, EvalJob, SweepJob, OfflineJob, CommandJob]
    bench, evaled, own, sweep, offline, cmd = (w.job for w in job.workloads)
    url = "http://127.0.0.1:9001"
    assert isinstance(bench, BenchJob) and bench.base_url == url and bench.concurrency == 4
    assert isinstance(evaled, EvalJob) and (evaled.base_url, evaled.model) == (url, "served")
    assert isinstance(own, EvalJob) and own.model == "mine"
    assert isinstance(sweep, SweepJob) and sweep.bench.base_url == url and sweep.runs_dir is None
    assert isinstance(cmd, CommandJob) and cmd.argv == ["echo", "hi"]
    assert isinstance(offline, OfflineJob) and job.workloads[4].fills == []  # its own engine
    assert job.workloads[5].env == ["A=1"] and job.workloads[0].label == "b"
    # A sweep's points go to the flow's runs dir; the record's form reads back the same job.
    ran = job.workload_job(3, runs_dir="R")
    assert isinstance(ran, SweepJob) and ran.runs_dir == "R"
    assert FlowJob.model_validate(json.loads(json.dumps(job_data(job)))) == job
    assert FlowJob.model_validate_json(job.model_dump_json()) == job
    # Another server (a grid point's, a flag): the jobs follow it.
    moved = FlowJob.model_validate({**job.model_dump(), "server": {**SERVER, "port": 9002}})
    assert isinstance(moved.workloads[1].job, EvalJob)
    assert (moved.workloads[1].job.base_url, moved.workloads[1].job.model) == (
        "http://127.0.0.1:9002",
        "m",
    )


def test_a_flow_recorded_with_workload_tables_reads_back_typed() -> None:
    """A record written before the typed workloads (each entry's table under `options`) is
    resumed through the same validation: typed, or refused naming the bad key."""
    from proctor.jobs.bench import BenchJob
    from proctor.jobs.command import CommandJob

    recorded = {
        "server": {**SERVER, "port": 9003},
        "workloads": [
            {"kind": "bench", "options": {"concurrency": 4}, "name": "b", "env": []},
            {"kind": "cmd", "command": ["true"], "env": ["A=1"]},
        ],
    }
    job = FlowJob.model_validate(recorded)
    bench, cmd = (w.job for w in job.workloads)
    assert isinstance(bench, BenchJob) and bench.concurrency == 4
    assert bench.base_url == "http://127.0.0.1:9003"
    assert isinstance(cmd, CommandJob) and cmd.argv == ["true"]
    assert [w.name for w in job.workloads] == ["b", None] and job.workloads[1].env == ["A=1"]
    recorded["workloads"] = [{"kind": "bench", "options": {"concurency": 4}}]
    with pytest.raises(UsageError, match="concurency"):
        FlowJob.model_validate(recorded)

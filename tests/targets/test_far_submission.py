"""`bench|sweep|eval|offline --target`: the typed submission (jobs/submission.py) travels, and the
far side runs it with the same `submit` as a local command (`python -m proctor.jobs submit`),
so the far run is `python -m proctor.jobs run JOB`, never a replayed CLI command; no proctor.cli
module is imported on that path; the API key is in no request, record or fetched file; whether
a server the job targets outlives it is Submission.server_lives, a property of its fields."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from proctor.jobs.bench import BenchJob
from proctor.jobs.eval import EvalJob
from proctor.jobs.submission import ServerRef, Submission
from proctor.jobs.sweep import SweepJob
from tests.fixtures.fake_openai_server import FakeServer
from tests.helpers import FAKE_ENGINE_TOML, REPO, TEST_PYTHON, git_project, proctor
from tests.targets.conftest import FarPlace
from tests.targets.far_commands import (
    assert_in_no_file,
    at_server,
    fake_engine,
    serve_start,
    serve_stop,
)

CANARY = "sk-CANARY-far-7d2e9b"
# An offline command that prints what vLLM's `bench throughput` prints, and its secret env.
OFFLINE_SH = (
    'echo "Processed prompts: 3/3"\n'
    'echo "Throughput: 2.50 requests/s, 1234.50 total tokens/s, 617.25 output tokens/s"\n'
    'test -n "$HF_TOKEN" || exit 5\n'
)
SMALL = ["--isl", "8", "--osl", "4", "--num-prompts", "4", "--num-warmups", "0"]


@pytest.fixture
def repo(tmp_path: Path, far_place: FarPlace) -> Path:
    toml = f'[remote]\n{far_place.remote_toml}venv_base = "{TEST_PYTHON}"\n\n{FAKE_ENGINE_TOML}\n'
    files = {"proctor.toml": toml, "offline.sh": OFFLINE_SH}
    return git_project(tmp_path / "project", files, "project")


@pytest.mark.parametrize("far_place", ["dir"], indirect=True)
def test_a_bench_sent_to_a_target_runs_its_typed_job_there(
    far_place: FarPlace, repo: Path, isolated_runs: Path
) -> None:
    env = {"OPENAI_API_KEY": CANARY}
    server_id = serve_start(far_place, repo, 8021)
    try:
        bench = at_server(
            "bench",
            far_place.url,
            server_id,
            *SMALL,
            "--concurrency",
            "2",
            "--json",
            cwd=repo,
            env=env,
            timeout=180,
        )
        assert bench.returncode == 0, bench.stderr
        data = json.loads(bench.stdout)
        bench_id = data["answer"]["run_id"]
        # The far run is the typed job's one entry point, the job whole in its argv, its base
        # URL and model the --server run's (resolved there).
        far_runs = far_place.workspace / "proctor" / "runs"
        far_record = json.loads((far_runs / bench_id / "record.json").read_text())
        argv = far_record["argv"]
        assert argv[1:4] == ["-m", "proctor.jobs", "run"], argv
        job = json.loads(argv[4])
        assert job["kind"] == "bench" and job["model"] == "m" and job["isl"] == 8
        assert far_record["server_run"] == server_id
        # The far job that ran it was handed the typed submission, not a command's options.
        job_dir = Path(data["completion"]["local_dir"])
        step = json.loads((job_dir / "record.json").read_text())
        assert step["request"] == {"command": ["bench"], "job": "bench"}
        assert "proctor.jobs submit" not in step["argv"]  # on stdin: never a command line
        assert json.loads((isolated_runs / bench_id / "record.json").read_text())["argv"] == argv
        # A detached bench: its run id at once, `runs wait` then fetches it.
        detached = at_server(
            "bench",
            far_place.url,
            server_id,
            *SMALL,
            "--concurrency",
            "1",
            "--detach",
            cwd=repo,
            env=env,
            timeout=180,
        )
        assert detached.returncode == 0, detached.stderr
        run_id = detached.stdout.strip().splitlines()[-1]
        waited = proctor("runs", "wait", run_id, env=env, timeout=120)
        assert waited.returncode == 0, waited.stderr
        argv = json.loads((far_runs / run_id / "record.json").read_text())["argv"]
        assert argv[1:4] == ["-m", "proctor.jobs", "run"], argv
    finally:
        stopped = serve_stop(far_place.url, server_id, repo)
    assert stopped.returncode == 0, stopped.stderr
    # The key reached the far bench through its environment only: in no file on either side.
    assert_in_no_file(CANARY, isolated_runs, far_place.workspace)


@pytest.mark.parametrize("far_place", ["dir"], indirect=True)
def test_offline_sent_to_a_target_runs_there_and_comes_back(
    far_place: FarPlace, repo: Path, isolated_runs: Path
) -> None:
    """`offline --target`: the same submission as here, run there (its --env values reach the
    command and no file), its run fetched back verified."""
    token = "hf_CANARY_offline_41c"
    ran = proctor(
        "offline",
        "--target",
        far_place.url,
        "--engine",
        "vllm",
        "--min-free-disk",
        "0",
        "--env",
        f"HF_TOKEN={token}",
        "--json",
        "--cmd",
        "--",
        "bash",
        "offline.sh",
        cwd=repo,
        timeout=180,
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    data = json.loads(ran.stdout)
    answer = data["answer"]
    assert answer["status"] == "ok" and answer["metrics"]["output_throughput"] == 617.25
    (child,) = [c for c in data["children"] if c["run_id"] == answer["run_id"]]
    assert child["verified"] and child["exit_code"] == 0
    far = far_place.workspace / "proctor" / "runs" / answer["run_id"]
    assert json.loads((far / "record.json").read_text())["argv"][1:4] == [
        "-m",
        "proctor.jobs",
        "run",
    ]
    local = json.loads((isolated_runs / answer["run_id"] / "metrics.json").read_text())
    assert local["metrics"]["request_throughput"] == 2.5
    assert_in_no_file(token, isolated_runs, far_place.workspace)


# The far side's code path, from the step's request to the end of the supervised run: at exit
# it writes every module it imported.
FAR_SCRIPT = """
import atexit, io, json, os, sys
atexit.register(lambda: os.write(2, ("MODULES " + json.dumps(sorted(sys.modules)) + "\\n").encode()))
from proctor.targets.remote.step import far_command
argv, stdin, title = far_command(sys.argv[1])
assert argv[1:] == ["-m", "proctor.jobs", "submit"], argv
sys.stdin = io.StringIO(stdin)
from proctor.jobs.__main__ import main
sys.exit(main(["submit"]))
"""


def _run_far_script(
    request: str, runs: Path, cwd: Path, timeout: float, **env: str
) -> tuple[dict[str, Any], list[str]]:
    """FAR_SCRIPT on the step request `request` (this tree's proctor, runs in `runs`, `env`
    added): the JSON it printed and the modules it imported; it must exit 0."""
    ran = subprocess.run(
        [sys.executable, "-c", FAR_SCRIPT, request],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO / "src"), "PROCTOR_RUNS_DIR": str(runs), **env},
        cwd=cwd,
        timeout=timeout,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    modules = json.loads(ran.stderr.rsplit("MODULES ", 1)[1].splitlines()[0])
    return json.loads(ran.stdout), modules


def test_the_far_path_imports_no_cli_module(tmp_path: Path) -> None:
    from proctor.targets.remote.requests import SubmitRequest

    with FakeServer(itl=0.001) as server:
        job = BenchJob(base_url=server.base_url, isl=8, osl=4, num_prompts=4, concurrency=2)
        request = SubmitRequest.of(Submission(job=job.updated(num_warmups=0), answer=True))
        answer, modules = _run_far_script(
            request.model_dump_json(), tmp_path / "runs", tmp_path, 180, OPENAI_API_KEY=CANARY
        )
    assert answer["outcome"] == "ok" and answer["verdict"]["ok"] is True, answer
    assert "proctor.jobs.submit" in modules  # the check sees the far path's own modules
    assert [m for m in modules if m.startswith("proctor.cli")] == []
    assert [m for m in modules if m in ("click", "typer")] == []
    record = json.loads((tmp_path / "runs" / answer["run_id"] / "record.json").read_text())
    assert record["argv"][1:4] == ["-m", "proctor.jobs", "run"]
    assert_in_no_file(CANARY, tmp_path / "runs")
    assert CANARY not in request.model_dump_json()


@pytest.mark.parametrize(
    ("submission", "lives"),
    [
        (Submission(job=BenchJob()), False),
        (Submission(job=BenchJob(), server=ServerRef(run="last")), True),
        (Submission(job=BenchJob(), detach=True), True),
        (Submission(job=SweepJob(), server=ServerRef(run="r", fills=["base_url"])), True),
        (Submission(job=SweepJob()), False),
        (Submission(job=EvalJob(model="m"), server=ServerRef(run="r")), True),
        (Submission(job=EvalJob(model="m")), False),
    ],
)
def test_whether_the_server_outlives_the_job_is_a_field_decision(
    submission: Submission, lives: bool
) -> None:
    assert submission.server_lives is lives
    # ... and it travels: the far side decides the same from the same fields.
    from proctor.targets.remote.requests import SubmitRequest

    assert SubmitRequest.of(submission).parsed().server_lives is lives


def test_the_key_is_never_in_a_submission() -> None:
    from pydantic import SecretStr

    from proctor.targets.remote.requests import SubmitRequest

    job = BenchJob(api_key=SecretStr(CANARY))
    sweep = SweepJob(bench=job)
    for sub in (Submission(job=job), Submission(job=sweep)):
        text = SubmitRequest.of(sub).model_dump_json()
        assert CANARY not in text and "api_key" not in text
        assert SubmitRequest.model_validate_json(text).parsed().job.kind == sub.job.kind


def test_a_run_control_field_the_kind_does_not_take_is_refused() -> None:
    """A sweep's points are runs of their own: a detached or keyed sweep would be ignored,
    so it is refused; the offline command's environment is offline's alone."""
    from pydantic import ValidationError

    from proctor.jobs.offline import OfflineJob

    with pytest.raises(ValidationError, match="a sweep job's run takes no detach, key"):
        Submission(job=SweepJob(), detach=True, key="k")
    with pytest.raises(ValidationError, match="a bench job's run takes no env"):
        Submission(job=BenchJob(), env=["A=1"])
    assert Submission(job=OfflineJob(engine="vllm", cmd=True, args=["true"]), env=["A=1"]).env == [
        "A=1"
    ]


FLOW_TOML = """
[flow]
poll = "1s"
ready_poll = "1s"

[[flow.workload]]
name = "small"
bench = { isl = 8, osl = 4, concurrency = 2, num_prompts = 4, num_warmups = 0 }
"""


@pytest.mark.parametrize("far_place", ["dir"], indirect=True)
def test_a_flow_sent_to_a_target_is_a_submission_run_far_by_the_jobs_entry_point(
    far_place: FarPlace, repo: Path, isolated_runs: Path
) -> None:
    """`flow --target`: the typed FlowJob travels (no command's options), the far job runs it
    with `python -m proctor.jobs submit` and keeps every step's run inside it; the flow's
    record, its children and its exit code come back as they did."""
    (repo / "flow.toml").write_text(FLOW_TOML)
    port = far_place.port(8031)
    ran = fake_engine(
        "flow",
        far_place.url,
        *("--port", str(port), "--file", "flow.toml", "--json"),
        cwd=repo,
        timeout=240,
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    data = json.loads(ran.stdout)
    job_dir = Path(data["completion"]["local_dir"])
    step = json.loads((job_dir / "record.json").read_text())
    assert step["request"] == {"command": ["flow"], "job": "flow"}
    argv = step["argv"]
    assert argv[argv.index("--steps") + 1] == "nested", argv  # its steps' runs inside it
    flow = data["flow"]
    assert flow["outcome"] == "ok" and flow["job"]["server"]["port"] == port
    assert data["answer"]["run_id"] == flow["run_id"]  # the far answer: the flow's record
    kinds = {c["run_id"]: c for c in data["children"]}
    assert flow["run_id"] in kinds and all(c["verified"] for c in data["children"])
    # The bench step ran inside the far job, as the typed job's one entry point.
    records = [json.loads(p.read_text()) for p in job_dir.glob("steps/*/record.json")]
    (bench,) = [r for r in records if r["kind"] == "bench"]
    assert bench["argv"][1:4] == ["-m", "proctor.jobs", "run"], bench["argv"]


def test_the_far_path_of_a_flow_imports_no_cli_module(tmp_path: Path) -> None:
    """The far side of `flow --target` (the step's request to the flow's end) runs the FlowJob
    through `python -m proctor.jobs submit` without any proctor.cli module or typer."""
    from proctor.jobs.flow import FlowJob, parse_workload
    from proctor.jobs.serve import ServeJob
    from proctor.targets.remote.requests import SubmitRequest
    from tests.fixtures.fake_openai_server import free_port

    (tmp_path / "proctor.toml").write_text(FAKE_ENGINE_TOML)
    bench = {"isl": 8, "osl": 4, "concurrency": 2, "num_prompts": 4, "num_warmups": 0}
    job = FlowJob(
        server=ServeJob(engine="fake", model="m", port=free_port()),
        workloads=[parse_workload({"bench": bench})],
        poll=1.0,
        ready_poll=1.0,
    )
    request = SubmitRequest.of(Submission(job=job, answer=True))
    record, modules = _run_far_script(request.model_dump_json(), tmp_path / "r", tmp_path, 240)
    assert record["kind"] == "flow" and record["outcome"] == "ok", record
    assert (tmp_path / "r" / record["run_id"] / "record.json").is_file()
    assert "proctor.jobs.submit" in modules and "proctor.flow" in modules
    assert [m for m in modules if m.startswith("proctor.cli")] == []
    # (click may come in with httpx, whose own command line imports it: no CLI of ours.)
    assert "typer" not in modules


def test_flow_and_server_grid_jobs_are_submittable_kinds() -> None:
    """A flow and a server grid are jobs like the others: a Submission takes them (their
    settings are the job's own fields, so no run-control field but the answer), they travel
    whole, and `load_job` reads them; a flow's server never outlives it."""
    from pydantic import ValidationError

    from proctor.jobs.flow import FlowJob, parse_workload
    from proctor.jobs.grid import ServerGridJob
    from proctor.jobs.run import load_job
    from proctor.jobs.serve import ServeJob
    from proctor.targets.remote.requests import SubmitRequest

    flow = FlowJob(
        server=ServeJob(engine="fake", model="m"), workloads=[parse_workload({"cmd": "true"})]
    )
    grid = ServerGridJob(flow=flow, server={"max_num_seqs": [4, 8]}, group="g")
    for job in (flow, grid):
        sub = Submission(job=job, answer=True)
        assert not sub.server_lives
        back = SubmitRequest.of(sub).parsed()
        assert back.job == job
        assert load_job(job.model_dump_json()) == job
        with pytest.raises(ValidationError, match=f"a {job.kind} job's run takes no detach"):
            Submission(job=job, detach=True)
    assert Submission(job=grid).title() == "sweep" and Submission(job=flow).title() == "flow"


@pytest.mark.parametrize("far_place", ["dir"], indirect=True)
def test_a_server_grid_sent_to_a_target_is_a_submission_and_comes_back(
    far_place: FarPlace, repo: Path, isolated_runs: Path
) -> None:
    """`sweep --server-grid --target`: the typed ServerGridJob travels; the far grid's home run
    and its point's flow come back as local runs, the summary as its answer."""
    port = far_place.port(8032)
    ran = fake_engine(
        "sweep",
        far_place.url,
        *("--port", str(port), "--poll", "1s", "--group", "g", "--server-grid", "max-num-seqs=4"),
        *("--concurrency", "1"),
        *SMALL,
        "--json",
        cwd=repo,
        timeout=300,
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    data = json.loads(ran.stdout)
    step = json.loads((Path(data["completion"]["local_dir"]) / "record.json").read_text())
    assert step["request"] == {"command": ["sweep"], "job": "server-grid"}
    answer = data["answer"]
    assert answer["exit_code"] == 0 and answer["ran"] == ["max-num-seqs=4"], answer
    fetched = {c["run_id"]: c for c in data["children"]}
    assert fetched and all(c["verified"] for c in fetched.values())
    kinds = {json.loads((isolated_runs / r / "record.json").read_text())["kind"] for r in fetched}
    assert "server-sweep" in kinds, kinds

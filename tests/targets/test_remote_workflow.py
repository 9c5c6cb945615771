"""The server workflow on a remote target: `proctor flow|serve|... --target ssh://...` runs the
command on a real SSH host (network namespace) against the fault-injecting fake server, with
proctor installed into the far workspace's venv; everything is fetched, verified and indexed.

Each test runs twice: on ssh:// and on dir:// (tests/infra/dirtarget.py, a target only tests
register, a second local directory through the same agent path): adding a target is one module
and one registry entry, with no change in the CLI."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.helpers import FAKE_ENGINE_TOML, REPO, TEST_PYTHON, git_project, proctor
from tests.infra.sshhosts import ssh_hosts
from tests.targets.conftest import WORKLOAD_SH, FarPlace
from tests.targets.far_commands import (
    assert_in_no_file,
    at_server,
    fake_engine,
    printed_id,
    serve_start,
    serve_stop,
)

pytestmark = pytest.mark.sshhosts
__all__ = ["ssh_hosts"]

FAKE = REPO / "tests/fixtures/fake_openai_server.py"
BASE_PYTHON = TEST_PYTHON
STEPS = ["stop", "start", "ready", "workload", "drain", "teardown"]


@pytest.fixture
def repo(tmp_path: Path, far_place: FarPlace) -> Path:
    """A git project whose proctor.toml has the fake engine and how to reach `far_place`."""
    toml = f"""
[remote]
{far_place.remote_toml}venv_base = "{BASE_PYTHON}"

{FAKE_ENGINE_TOML}
"""
    files = {"proctor.toml": toml, "workload.sh": WORKLOAD_SH}
    return git_project(tmp_path / "project", files, "project")


def _gone(pid: int) -> bool:
    try:
        return bool(psutil.Process(pid).status() == psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return True


def _flow(
    place: FarPlace, repo: Path, port: int, *extra: str, sleep: int = 0
) -> tuple[int, dict[str, Any]]:
    result = fake_engine(
        "flow",
        place.url,
        *("--port", str(port), "--poll", "1s"),
        *("--workload-cmd", f"bash workload.sh {port} {sleep}", "--json", "--"),
        *extra,
        cwd=repo,
        timeout=180,
    )
    assert result.stdout.strip(), result.stderr
    return result.returncode, json.loads(result.stdout)


def test_remote_flow_fetches_and_verifies_every_step(
    far_place: FarPlace, repo: Path, isolated_runs: Path
) -> None:
    code, data = _flow(far_place, repo, far_place.port(8011))
    completion = data["completion"]
    assert code == 0, completion
    assert completion["result_known"] and completion["logs_verified"], completion["unmet"]
    # The far side as found: proctor in the workspace's venv, made from this machine's wheel.
    venv = far_place.workspace / "proctor" / "venv"
    assert completion["far"]["python"] == str(venv / "bin" / "python")
    assert completion["far"]["venv"] == str(venv)
    assert json.loads((venv / "proctor-install.json").read_text())["base_python"] == BASE_PYTHON
    # Every step of the flow ran there and came back.
    flow = data["flow"]
    assert [s["step"] for s in flow["steps"]] == STEPS
    assert [s["exit_code"] for s in flow["steps"] if s["step"] == "drain"] == [0]
    job = isolated_runs / completion["run_id"]
    kinds = {}
    for child in data["children"]:
        step = Path(child["local_dir"])
        assert step.parent == job / "steps" and (step / "record.json").is_file()
        kinds[json.loads((step / "record.json").read_text())["kind"]] = step
    assert {"flow", "server"} <= set(kinds) and len(data["children"]) >= 3
    server = json.loads((kinds["server"] / "record.json").read_text())
    assert server["outcome"] == "stopped" and server["group"] == flow["run_id"]
    assert _gone(server["process"]["pid"])
    assert "workload done" in "".join(
        p.read_text() for c in data["children"] for p in Path(c["local_dir"]).glob("*.log")
    )
    # One manifest over the job and its steps; tampering with a step is caught locally.
    assert proctor("runs", "verify", job.name).returncode == 0
    # Indexed in the local store without `runs reindex`.
    with sqlite3.connect(isolated_runs / "proctor.sqlite") as db:
        ids = {row[0] for row in db.execute("SELECT id FROM runs")}
    assert {job.name, flow["run_id"], server["run_id"]} <= ids
    step_log = next(kinds["server"].glob("*.log"))
    step_log.write_text(step_log.read_text() + "forged\n")
    assert proctor("runs", "verify", job.name).returncode != 0


def test_remote_flow_fault_propagates_exit_2_and_tears_down_there(
    far_place: FarPlace, repo: Path, isolated_runs: Path
) -> None:
    code, data = _flow(
        far_place, repo, far_place.port(8012), "--fault-after-requests", "1", sleep=60
    )
    assert code == 2, data["completion"]
    flow = data["flow"]
    steps = {s["step"]: s for s in flow["steps"]}
    assert steps["drain"]["exit_code"] == 2 and "Memory access fault" in steps["drain"]["message"]
    assert "teardown" in steps
    server_id = flow["server_run"]
    job = Path(data["completion"]["local_dir"])
    server = json.loads((job / "steps" / server_id / "record.json").read_text())
    assert server["outcome"] == "stopped"
    assert _gone(server["process"]["pid"])
    assert data["completion"]["logs_verified"]


def test_serve_start_ready_stop_step_by_step_on_the_target(
    far_place: FarPlace, repo: Path, isolated_runs: Path
) -> None:
    url = far_place.url
    server_id = serve_start(far_place, repo, 8013)
    far = far_place.workspace / "proctor" / "runs" / server_id
    assert far.is_dir() and json.loads((far / "record.json").read_text())["kind"] == "server"
    local = isolated_runs / server_id
    assert (local / ".remote.json").is_file()  # `runs attach|logs|stop ID` can reconnect
    ready = proctor(
        "serve", "ready", server_id, "--target", url, "--timeout", "60s", cwd=repo, timeout=120
    )
    assert ready.returncode == 0, ready.stderr
    stopped = serve_stop(url, server_id, repo)
    assert stopped.returncode == 0, stopped.stderr
    # The stopped server was fetched and verified into its own local run directory.
    record = json.loads((local / "record.json").read_text())
    assert record["outcome"] == "stopped" and record["kind"] == "server"
    assert (local / "manifest.sha256").is_file()
    assert proctor("runs", "verify", server_id).returncode == 0
    assert _gone(record["process"]["pid"])
    # A second stop is a no-op there too.
    again = serve_stop(url, server_id, repo)
    assert again.returncode == 0, again.stderr


SMALL = ["--isl", "8", "--osl", "4", "--prompt-multiplier", "2"]
SHIPPED = ("--dataset", "jsonl:../data/p.jsonl")  # the prompts _prompts_outside writes


def _on_server(command: str, url: str, server_id: str, repo: Path, *args: str) -> Any:
    """`COMMAND --target URL --server SERVER ARGS... --json`, which must exit 0; its JSON."""
    ran = at_server(command, url, server_id, *args, "--json", cwd=repo, timeout=180)
    assert ran.returncode == 0, ran.stderr
    return json.loads(ran.stdout)


def test_bench_and_sweep_against_a_server_on_the_target(
    far_place: FarPlace, repo: Path, isolated_runs: Path
) -> None:
    url = far_place.url
    server_id = serve_start(far_place, repo, 8014)
    try:
        ready = proctor(
            "serve", "ready", server_id, "--target", url, "--timeout", "60s", cwd=repo, timeout=120
        )
        assert ready.returncode == 0, ready.stderr
        # bench: the far bench run comes back as its own local run, verified and indexed.
        bench = ("--concurrency", "2", "--num-prompts", "6", "--num-warmups", "0")
        data = _on_server("bench", url, server_id, repo, *SMALL, *bench)
        assert data["answer"]["verdict"]["ok"] is True, data["answer"]
        bench_id = data["answer"]["run_id"]
        (child,) = [c for c in data["children"] if c["run_id"] == bench_id]
        assert child["verified"] and child["exit_code"] == 0
        record = json.loads((isolated_runs / bench_id / "record.json").read_text())
        assert record["server_run"] == server_id
        assert proctor("runs", "verify", bench_id).returncode == 0
        # sweep: the sweep and each point come back as local runs, verified.
        data = _on_server("sweep", url, server_id, repo, "--concurrency", "1,2", *SMALL)
        summary = data["answer"]
        assert [p["exit_code"] for p in summary["points"]] == [0, 0]
        fetched = {c["run_id"]: c for c in data["children"]}
        assert {summary["sweep"], *(p["run_id"] for p in summary["points"])} <= set(fetched)
        assert all(c["verified"] for c in fetched.values()), fetched
        assert (isolated_runs / summary["sweep"] / "summary.csv").is_file()
        assert proctor("runs", "verify", summary["sweep"]).returncode == 0
    finally:
        stopped = serve_stop(url, server_id, repo)
    assert stopped.returncode == 0, stopped.stderr


def _prompts_outside(repo: Path, word: str) -> tuple[Path, str]:
    """Ten prompts in a folder beside the checkout (only shipping brings them to the far side),
    and their sha256."""
    import hashlib

    data = repo.parent / "data"
    data.mkdir()
    prompts = data / "p.jsonl"
    prompts.write_text(
        "".join(
            json.dumps({"prompt": f"{word} prompt {i}", "output_len": 3}) + "\n" for i in range(10)
        )
    )
    return prompts, hashlib.sha256(prompts.read_bytes()).hexdigest()


def test_a_dataset_file_is_shipped_with_bench_and_sweep(
    far_place: FarPlace, repo: Path, isolated_runs: Path
) -> None:
    """The far side reads the local file's bytes from its workspace (content-addressed), not
    whatever has that path there; a missing file is 64 before any machine is touched."""

    url = far_place.url
    prompts, sha = _prompts_outside(repo, "shipped")
    missing = proctor(
        "bench",
        "--target",
        url,
        "--base-url",
        "http://127.0.0.1:9",
        "--dataset",
        "jsonl:../data/nope.jsonl",
        cwd=repo,
        timeout=60,
    )
    assert missing.returncode == 64, missing.stderr
    assert "cannot read dataset ../data/nope.jsonl" in missing.stderr
    assert not (far_place.workspace / "proctor").exists()  # nothing was prepared there
    server_id = serve_start(far_place, repo, 8015)
    try:
        bench = ("--osl", "4", "--concurrency", "2", "--num-prompts", "6", "--num-warmups", "0")
        answer = _on_server("bench", url, server_id, repo, *bench, *SHIPPED)["answer"]
        far_copy = f"{far_place.workspace}/proctor/data/{sha}/p.jsonl"
        assert answer["dataset"]["sha256"] == sha and answer["dataset"]["path"] == far_copy
        assert Path(far_copy).read_bytes() == prompts.read_bytes()
        fetched = json.loads((isolated_runs / answer["run_id"] / "metrics.json").read_text())
        assert fetched["dataset"]["sha256"] == sha
        # A trace is a dataset file too: shipped the same way, replayed from the far copy.
        trace = prompts.parent / "t.jsonl"
        trace.write_text(
            "".join(
                json.dumps({"timestamp": 10 * i, "input_length": 5, "output_length": 2}) + "\n"
                for i in range(4)
            )
        )
        trace_sha = hashlib.sha256(trace.read_bytes()).hexdigest()
        replay = ("--concurrency", "2", "--num-warmups", "0", "--dataset", "trace:../data/t.jsonl")
        replay_answer = _on_server("bench", url, server_id, repo, *replay, "--trace-speed", "4")
        replayed = replay_answer["answer"]["dataset"]
        trace_copy = f"{far_place.workspace}/proctor/data/{trace_sha}/t.jsonl"
        assert replayed["sha256"] == trace_sha and replayed["path"] == trace_copy
        assert replayed["kind"] == "trace" and replayed["speed"] == 4
        sweep = ("--concurrency", "1,2", "--osl", "4", "--num-prompts", "4", *SHIPPED)
        summary = _on_server("sweep", url, server_id, repo, *sweep)["answer"]
        for point in summary["points"]:
            doc = json.loads((isolated_runs / point["run_id"] / "metrics.json").read_text())
            assert doc["dataset"]["sha256"] == sha and doc["dataset"]["path"] == far_copy
    finally:
        stopped = serve_stop(url, server_id, repo)
    assert stopped.returncode == 0, stopped.stderr


FLOW_BENCH = """
[[flow.workload]]
name = "shipped"
bench = { osl = 4, concurrency = 2, num_prompts = 6, num_warmups = 0, dataset = "jsonl:../data/p.jsonl" }
"""


def test_a_flow_ships_the_files_its_workloads_name(
    far_place: FarPlace, repo: Path, isolated_runs: Path
) -> None:
    """`flow --file F --target`: the flow file (outside the checkout) and the dataset its bench
    names (relative to the cwd, as a local flow reads it) travel with the flow; the far bench
    reads the shipped copy. A file a workload names that is missing here is 64 before any
    machine is touched."""

    prompts, sha = _prompts_outside(repo, "flow")
    flows = repo.parent / "flows"
    flows.mkdir()
    (flows / "missing.toml").write_text(FLOW_BENCH.replace("p.jsonl", "nope.jsonl"))
    (flows / "bench.toml").write_text(FLOW_BENCH)
    missing = fake_engine(
        "flow", far_place.url, "--file", str(flows / "missing.toml"), cwd=repo, timeout=60
    )
    assert missing.returncode == 64, missing.stderr
    assert "cannot read dataset ../data/nope.jsonl" in missing.stderr
    (flows / "eval.toml").write_text(
        '[[flow.workload]]\neval = { task = "gsm8k", data = "../nogsm" }\n'
    )
    no_data = fake_engine(
        "flow", far_place.url, "--file", str(flows / "eval.toml"), cwd=repo, timeout=60
    )
    assert no_data.returncode == 64, no_data.stderr
    assert "cannot read GSM8K data ../nogsm/train.jsonl" in no_data.stderr
    # A server sweep's flow file: its [sweep] bench dataset is read here too.
    (flows / "grid.toml").write_text(
        "[sweep]\nserver = { max_num_seqs = [4] }\n"
        'bench = { concurrency = [1], dataset = "jsonl:../none.jsonl" }\n'
    )
    grid = fake_engine(
        "sweep",
        far_place.url,
        *("--group", "g", "--file", str(flows / "grid.toml")),
        cwd=repo,
        timeout=60,
    )
    assert grid.returncode == 64, grid.stderr
    assert "cannot read dataset ../none.jsonl" in grid.stderr
    assert not (far_place.workspace / "proctor").exists()  # nothing was prepared there
    result = fake_engine(
        "flow",
        far_place.url,
        *("--port", str(far_place.port(8016)), "--poll", "1s"),
        *("--file", str(flows / "bench.toml"), "--json"),
        cwd=repo,
        timeout=180,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    job = Path(json.loads(result.stdout)["completion"]["local_dir"])
    docs = [json.loads(p.read_text()) for p in job.glob("steps/*/metrics.json")]
    (bench,) = [d for d in docs if d.get("schema") == "proctor.bench.metrics"]
    far_copy = f"{far_place.workspace}/proctor/data/{sha}/p.jsonl"
    assert bench["dataset"]["sha256"] == sha and bench["dataset"]["path"] == far_copy
    assert Path(far_copy).read_bytes() == prompts.read_bytes()
    far_job = json.loads((job / "record.json").read_text())
    assert far_job["request"]["files"] == {"workloads.0.job.dataset": sha}


@pytest.mark.parametrize("far_place", ["dir"], indirect=True)  # the key server is loopback
def test_eval_gsm8k_scores_the_shipped_data(
    far_place: FarPlace, repo: Path, isolated_runs: Path, tmp_path: Path
) -> None:
    """`eval gsm8k --data DIR --target`: the two splits it reads travel (one folder named by
    the digest of their sha256sum text), the far eval scores that copy and its metrics say
    which bytes; a missing folder is 64 before any machine is touched."""
    import hashlib
    import math
    import shutil

    from tests.fixtures.answer_key_server import answer_key_server
    from tests.helpers import GSM8K_DATA

    gsm8k = repo.parent / "gsm8k"
    gsm8k.mkdir()
    for name in ("train.jsonl", "test.jsonl"):
        shutil.copyfile(GSM8K_DATA / name, gsm8k / name)
    files = {
        n: hashlib.sha256((gsm8k / n).read_bytes()).hexdigest()
        for n in ("train.jsonl", "test.jsonl")
    }
    text = "".join(f"{files[n]}  {n}\n" for n in sorted(files))
    digest = hashlib.sha256(text.encode()).hexdigest()
    env = {"HF_HOME": str(tmp_path / "hf")}
    args = ["--model", "m1", "--fewshot", "3", "--limit", "5", "--num-concurrent", "2", "--json"]
    missing = proctor(
        "eval",
        "gsm8k",
        "--target",
        far_place.url,
        "--base-url",
        "http://127.0.0.1:9",
        "--data",
        "../nope",
        *args,
        cwd=repo,
        env=env,
        timeout=60,
    )
    assert missing.returncode == 64, missing.stderr
    assert "cannot read GSM8K data ../nope/train.jsonl" in missing.stderr
    assert not (far_place.workspace / "proctor").exists()
    with answer_key_server(gsm8k) as server:
        ran = proctor(
            "eval",
            "gsm8k",
            "--target",
            far_place.url,
            "--base-url",
            server.base_url,
            "--data",
            "../gsm8k",
            *args,
            cwd=repo,
            env=env,
            timeout=240,
        )
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    answer = json.loads(ran.stdout)["answer"]
    far_copy = f"{far_place.workspace}/proctor/data/{digest}/gsm8k"
    assert answer["data"] == {"path": far_copy, "sha256": digest, "files": files}
    assert answer["config"]["data_dir"] == far_copy
    assert math.isclose(answer["metrics"]["exact_match_flexible_extract"], 0.8)
    assert math.isclose(answer["metrics"]["exact_match_strict_match"], 0.4)
    fetched = json.loads((isolated_runs / answer["run_id"] / "metrics.json").read_text())
    assert fetched["data"]["sha256"] == digest


def _detached(place: FarPlace, repo: Path, *job_args: str) -> str:
    """`run --target --detach -- sh job.sh ARGS...`; the far run's id."""
    ran = proctor(
        "run", "--target", place.url, "--detach", "--", "sh", "job.sh", *job_args, cwd=repo
    )
    return printed_id(ran)


def test_runs_commands_reach_a_detached_far_run_through_its_record(
    far_place: FarPlace, repo: Path, isolated_runs: Path
) -> None:
    (repo / "job.sh").write_text('echo "start $1"; sleep "$2"; echo "done $1"; exit "$3"\n')
    run_id = _detached(far_place, repo, "a", "1", "3")
    # wait: reconnects from the record, fetches, verifies; exits with the far status.
    waited = proctor("runs", "wait", run_id, timeout=120)
    assert waited.returncode == 3, waited.stderr
    assert "result known:   yes" in waited.stderr
    logs = proctor("runs", "logs", run_id, timeout=60)
    assert "start a" in logs.stdout and "done a" in logs.stdout
    assert proctor("runs", "verify", run_id).returncode == 0
    # stop: the far run is stopped there; attach then fetches it, outcome stopped.
    long_id = _detached(far_place, repo, "b", "300", "0")
    stop = proctor("runs", "stop", long_id, "--json", timeout=60)
    assert stop.returncode == 0, stop.stderr
    assert json.loads(stop.stdout)["stop_sent"] is True
    attached = proctor("runs", "attach", long_id, timeout=120)
    assert "start b" in attached.stdout and "done b" not in attached.stdout
    completion = json.loads((isolated_runs / long_id / ".completion.json").read_text())
    assert completion["outcome"] == "stopped" and completion["logs_verified"]
    far = far_place.workspace / "proctor" / "runs" / long_id
    assert json.loads((far / "record.json").read_text())["outcome"] == "stopped"


def test_the_far_request_holds_a_secret_that_no_file_keeps(
    far_place: FarPlace, repo: Path, isolated_runs: Path
) -> None:
    """The flow reaches the far side as a typed request (its job, no rebuilt command line); the
    request's --env values never land in a record, a log or a process listing proctor wrote."""
    canary = "hf_CANARY_7c1d9e"
    port = far_place.port(8015)
    result = fake_engine(
        "flow",
        far_place.url,
        *("--port", str(port), "--poll", "1s", "--env", f"HF_TOKEN={canary}"),
        *("--workload-cmd", f"bash workload.sh {port} 0", "--json"),
        cwd=repo,
        timeout=180,
    )
    assert result.returncode == 0, result.stderr
    assert canary not in result.stdout + result.stderr
    data = json.loads(result.stdout)
    job = Path(data["completion"]["local_dir"])
    far_job = json.loads((job / "record.json").read_text())
    # The typed flow job travels (its --env values inside it), never the command's options.
    assert far_job["request"] == {"command": ["flow"], "job": "flow"}
    assert_in_no_file(canary, isolated_runs, far_place.workspace / "proctor" / "runs")

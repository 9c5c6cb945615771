"""The server workflow on a Runpod pod: `proctor flow --target runpod...` against the spec-checking
emulator, whose pods are real SSH hosts in network namespaces running the fake engine.

Checked: the pod is acquired, the flow runs there and comes back verified, the pod is stopped
and its final state read back through the API (or kept RUNNING with `?keep`), a cost budget
spent mid-run stops the far job and the pod (exit 4), and the API key is in no artifact."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from proctor.errors import UsageError
from proctor.targets.runpod.session import parse_runpod_target
from tests.fixtures.fake_openai_server import free_port as _free_port
from tests.fixtures.runpod_emulator import RunpodEmulator, running
from tests.helpers import FAKE_ENGINE_TOML, REPO, TEST_PYTHON, git_project, proctor
from tests.infra.sshhosts import SshHost, SshHostLab, ssh_hosts
from tests.targets.conftest import WORKLOAD_SH
from tests.targets.far_commands import assert_in_no_file, fake_engine, printed_id

pytestmark = pytest.mark.sshhosts
__all__ = ["ssh_hosts"]

KEY = "rpa_CANARY0workflow5e2d1c0b9a8f7e6d5c4b3a2f1e0d9c8b7a6"
H200 = "NVIDIA H200"
FAKE = REPO / "tests/fixtures/fake_openai_server.py"
BASE_PYTHON = TEST_PYTHON
STEPS = ["stop", "start", "ready", "workload", "drain", "teardown"]


@pytest.fixture
def host(ssh_hosts: SshHostLab) -> SshHost:
    """The namespace host that every pod is."""
    return ssh_hosts.hosts[0]


@pytest.fixture
def pods(host: SshHost) -> Iterator[RunpodEmulator]:
    """Every pod the emulator creates is the first namespace host."""

    def on_create(pod: dict[str, Any]) -> tuple[str, int]:
        return host.address, host.port

    yield from running(RunpodEmulator(api_key=KEY, on_create=on_create))


def _project(tmp_path: Path, host: SshHost, runpod_extra: str = "") -> Path:
    toml = f"""
[remote]
identity_file = "{host.client_key}"
known_hosts = "{host.known_hosts}"
workspace = "{host.workspace}"
venv_base = "{BASE_PYTHON}"

[runpod]
gpu_type = "{H200}"
image = "runpod/pytorch"
{runpod_extra}

{FAKE_ENGINE_TOML}
"""
    # A long workload that keeps making progress (so drain sees no hang): a request a second.
    loop = (
        'for i in $(seq "$2"); do curl -sS "http://127.0.0.1:$1/v1/completions" '
        '-d \'{"model": "m", "prompt": "hi", "max_tokens": 5}\'; sleep 1; done\n'
    )
    files = {"proctor.toml": toml, "workload.sh": WORKLOAD_SH, "loop.sh": loop}
    return git_project(tmp_path / "project", files, "project")


@pytest.fixture
def repo(tmp_path: Path, host: SshHost) -> Path:
    """The project with the default [runpod] settings."""
    return _project(tmp_path, host)


def _flow(
    emulator: RunpodEmulator, repo: Path, target: str, *, loop: int = 0, as_json: bool = True
) -> Any:
    port = _free_port()
    workload = f"bash loop.sh {port} {loop}" if loop else f"bash workload.sh {port} 0"
    return fake_engine(
        "flow",
        target,
        *("--port", str(port), "--poll", "1s", "--workload-cmd"),
        workload,
        *(["--json"] if as_json else []),
        env={"RUNPOD_API_KEY": KEY, "PROCTOR_RUNPOD_API_URL": emulator.base_url},
        cwd=repo,
        timeout=240,
    )


def test_flow_on_a_new_pod_is_fetched_then_the_pod_stopped_and_verified(
    pods: RunpodEmulator, host: SshHost, repo: Path, isolated_runs: Path
) -> None:
    result = _flow(pods, repo, "runpod")
    assert result.stdout.strip(), result.stderr
    data = json.loads(result.stdout)
    completion = data["completion"]
    assert result.returncode == 0, (completion, result.stderr)
    assert completion["result_known"] and completion["logs_verified"], completion["unmet"]
    assert completion["target"]["kind"] == "runpod"
    assert [s["step"] for s in data["flow"]["steps"]] == STEPS
    # Exactly one pod of the configured type, stopped afterwards, the stop read back.
    assert [r.body["gpuTypeIds"] for r in pods.calls("POST", "/pods")] == [[H200]]
    (pod_id,) = pods.pods
    assert pods.pods[pod_id]["desiredStatus"] == "EXITED"
    assert len(pods.calls("POST", "/pods/{podId}/stop")) == 1
    assert completion["release_verified"] is True and completion["release"]["action"] == "stopped"
    pod = data["pod"]
    assert pod["pod_id"] == pod_id and pod["kept"] is False and pod["release_verified"] is True
    assert [s["desired_status"] for s in pod["release"]["states"]] == ["EXITED"]
    assert pod["pod"]["cost_per_hr"] == pytest.approx(2.5)
    job = Path(completion["local_dir"])
    assert job.parent == isolated_runs
    assert proctor("runs", "verify", job.name).returncode == 0
    assert_in_no_file(KEY, isolated_runs, host.workspace)


def test_keep_leaves_the_pod_running_then_reuse_stops_it(
    pods: RunpodEmulator, host: SshHost, repo: Path, isolated_runs: Path
) -> None:
    kept = _flow(pods, repo, "runpod?keep")
    assert kept.returncode == 0, kept.stderr
    data = json.loads(kept.stdout)
    (pod_id,) = pods.pods
    assert pods.pods[pod_id]["desiredStatus"] == "RUNNING"
    assert pods.calls("POST", "/pods/{podId}/stop") == []
    assert data["pod"]["kept"] is True and data["pod"]["release_verified"] is True
    assert [s["desired_status"] for s in data["pod"]["release"]["states"]] == ["RUNNING"]
    # The kept pod is reused by id (no second rental), and this time stopped; text report.
    again = _flow(pods, repo, f"runpod:{pod_id}", as_json=False)
    assert again.returncode == 0, again.stderr
    assert len(pods.calls("POST", "/pods")) == 1 and list(pods.pods) == [pod_id]
    assert pods.pods[pod_id]["desiredStatus"] == "EXITED"
    assert f"pod {pod_id}: 1x" in again.stderr and "final state EXITED (verified" in again.stderr
    assert_in_no_file(KEY, isolated_runs, host.workspace)


def test_cost_budget_spent_mid_run_stops_the_job_and_the_pod_exit_4(
    pods: RunpodEmulator, host: SshHost, tmp_path: Path, isolated_runs: Path
) -> None:
    # 2.5/hr: 0.025 lasts 36 s from acquisition, enough to install and start; the workload
    # would go on for 300 s. No key on the pod, so the watchdog cannot act: the controller must.
    repo = _project(tmp_path, host, "max_cost = 0.025")
    began = time.monotonic()
    result = _flow(pods, repo, "runpod", loop=300)
    took = time.monotonic() - began
    assert result.returncode == 4, result.stderr
    assert took < 150, took
    data = json.loads(result.stdout)
    completion = data["completion"]
    assert "cost budget spent" in (completion["limit"] or ""), completion
    assert completion["result_known"] and completion["logs_verified"], completion["unmet"]
    assert completion["exit_code"] != 0  # the far flow was stopped, not left to finish
    assert data["pod"]["budget"]["limit_reached"] == completion["limit"]
    assert data["pod"]["budget"]["spent"] >= 0.025
    (pod_id,) = pods.pods
    assert pods.pods[pod_id]["desiredStatus"] == "EXITED"
    assert completion["release_verified"] is True
    # What existed was fetched: the flow's steps up to the stop, its server torn down.
    steps = {s["step"] for s in (data["flow"] or {}).get("steps", [])}
    assert {"start", "ready"} <= steps, data["flow"]
    assert_in_no_file(KEY, isolated_runs, host.workspace)


@pytest.mark.slow
def test_serve_step_by_step_keeps_the_pod_until_serve_stop(
    pods: RunpodEmulator, host: SshHost, repo: Path, isolated_runs: Path
) -> None:
    env = {"RUNPOD_API_KEY": KEY, "PROCTOR_RUNPOD_API_URL": pods.base_url}
    started = fake_engine(
        "serve start", "runpod", "--port", str(_free_port()), env=env, cwd=repo, timeout=180
    )
    server_id = printed_id(started)
    (pod_id,) = pods.pods
    # The server lives on the pod: kept RUNNING (verified), not stopped under it.
    assert pods.pods[pod_id]["desiredStatus"] == "RUNNING"
    assert "kept running" in started.stderr and pods.calls("POST", "/pods/{podId}/stop") == []
    target = f"runpod:{pod_id}"
    ready = proctor(
        "serve",
        "ready",
        server_id,
        "--target",
        target,
        "--timeout",
        "60s",
        env=env,
        cwd=repo,
        timeout=180,
    )
    assert ready.returncode == 0, ready.stderr
    assert pods.pods[pod_id]["desiredStatus"] == "RUNNING"
    stopped = proctor(
        "serve", "stop", server_id, "--target", target, env=env, cwd=repo, timeout=180
    )
    assert stopped.returncode == 0, stopped.stderr
    assert pods.pods[pod_id]["desiredStatus"] == "EXITED"
    assert json.loads((isolated_runs / server_id / "record.json").read_text())["outcome"] == (
        "stopped"
    )
    assert len(pods.calls("POST", "/pods")) == 1
    assert_in_no_file(KEY, isolated_runs, host.workspace)


@pytest.mark.parametrize(
    ("text", "reuse", "keep", "max_cost"),
    [
        ("runpod", [], False, None),
        ("runpod:abc", ["abc"], False, None),
        ("runpod://a,b?keep", ["a", "b"], True, None),
        ("runpod?max-cost=1.5", [], False, 1.5),
    ],
)
def test_target_string(text: str, reuse: list[str], keep: bool, max_cost: float | None) -> None:
    choice = parse_runpod_target(text)
    assert (choice.reuse, choice.keep, choice.max_cost) == (reuse, keep, max_cost)


@pytest.mark.parametrize("text", ["runpod?stop", "runpod?max-cost=x", "runpod?keep&terminate"])
def test_bad_target_string_is_a_usage_error(text: str) -> None:
    with pytest.raises(UsageError):
        parse_runpod_target(text)


# -- cost per million output tokens (issue 13 point 8) ------------------------------------------
BENCH_FLOW = """
[[flow.workload]]
name = "bench-c2"
bench = { isl = 8, osl = 4, prompt_multiplier = 2, concurrency = 2, num_prompts = 6, num_warmups = 0 }
"""


def _bench_flow(emulator: RunpodEmulator, repo: Path, *, as_json: bool) -> Any:
    (repo / "flow.toml").write_text(BENCH_FLOW)
    return fake_engine(
        "flow",
        "runpod",
        *("--port", str(_free_port()), "--poll", "1s", "--file", "flow.toml"),
        *(["--json"] if as_json else []),
        env={"RUNPOD_API_KEY": KEY, "PROCTOR_RUNPOD_API_URL": emulator.base_url},
        cwd=repo,
        timeout=240,
    )


def _bench_steps(runs: Path) -> list[Path]:
    return [
        p.parent
        for p in runs.glob("*/steps/*/metrics.json")
        if json.loads(p.read_text()).get("schema") == "proctor.bench.metrics"
    ]


def test_bench_on_a_priced_pod_costs_usd_per_million_output_tokens(
    pods: RunpodEmulator, repo: Path, isolated_runs: Path
) -> None:
    result = _bench_flow(pods, repo, as_json=True)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    (bench,) = _bench_steps(isolated_runs)
    metrics = json.loads((bench / "metrics.json").read_text())["metrics"]
    cost = json.loads((bench / ".cost.json").read_text())
    # 2.5 USD/hr (the emulator's H200) x the measured window / the output tokens x 1e6.
    expected = 2.5 * metrics["duration"] / 3600 / metrics["total_output_tokens"] * 1e6
    assert cost["available"] is True and cost["usd_per_hour"] == pytest.approx(2.5)
    assert cost["usd_per_million_output_tokens"] == pytest.approx(expected, rel=1e-4)
    assert cost["run_usd"] > 0 and cost["run_wall_s"] >= metrics["duration"]
    (child,) = [c for c in data["children"] if c["run_id"] == bench.name]
    assert child["cost"]["usd_per_million_output_tokens"] == cost["usd_per_million_output_tokens"]
    assert data["pod"]["cost"]["usd_per_hour"] == pytest.approx(2.5)
    assert data["pod"]["cost"]["usd"] > 0
    # The fetched evidence is untouched: the job still verifies against the far manifest.
    assert proctor("runs", "verify", bench.parent.parent.name).returncode == 0
    # In the store, `runs compare` and the report.
    with sqlite3.connect(isolated_runs / "proctor.sqlite") as db:
        row = db.execute(
            "SELECT value, unit FROM metrics WHERE run_id = ? AND name = ?",
            (bench.name, "usd_per_million_output_tokens"),
        ).fetchone()
    assert row is not None and row[0] == pytest.approx(expected, rel=1e-4) and row[1] == "USD/Mtok"
    compared = proctor("runs", "compare", str(bench), str(bench), "--json")
    assert compared.returncode == 0, compared.stderr
    names = {r["metric"] for r in json.loads(compared.stdout)}
    assert "usd_per_million_output_tokens" in names
    html = isolated_runs.parent / "report.html"
    made = proctor("report", str(bench), "-o", str(html))
    assert made.returncode == 0, made.stderr
    text = html.read_text()
    assert "USD per million output tokens" in text
    assert f"{cost['usd_per_million_output_tokens']:,.4f}" in text


@pytest.fixture
def unpriced(host: SshHost) -> Iterator[RunpodEmulator]:
    """Pods that carry no costPerHr."""

    def on_create(pod: dict[str, Any]) -> tuple[str, int]:
        return host.address, host.port

    yield from running(RunpodEmulator(api_key=KEY, on_create=on_create, cost_per_gpu_hr=None))


def test_bench_on_a_pod_without_a_price_says_not_measured_never_zero(
    unpriced: RunpodEmulator, repo: Path, isolated_runs: Path
) -> None:
    result = _bench_flow(unpriced, repo, as_json=False)
    assert result.returncode == 0, result.stderr
    assert "Cost: not measured (the machine's price is unknown" in result.stderr
    assert "cost: not measured (no costPerHr" in result.stderr
    (bench,) = _bench_steps(isolated_runs)
    cost = json.loads((bench / ".cost.json").read_text())
    assert cost["available"] is False and cost.get("usd_per_million_output_tokens") is None
    with sqlite3.connect(isolated_runs / "proctor.sqlite") as db:
        names = {
            n for (n,) in db.execute("SELECT name FROM metrics WHERE run_id = ?", (bench.name,))
        }
    assert "output_throughput" in names and "usd_per_million_output_tokens" not in names


def test_a_job_naming_a_server_keeps_the_pod_a_plain_bench_does_not(
    pods: RunpodEmulator, host: SshHost, repo: Path, isolated_runs: Path
) -> None:
    """Whether the pod outlives a bench or sweep is the submission's `server_lives` (it names a
    --server run that is still serving), not the command's name: bench and sweep --server keep
    it RUNNING, a bench given only a URL releases it."""
    env = {"RUNPOD_API_KEY": KEY, "PROCTOR_RUNPOD_API_URL": pods.base_url}
    port = _free_port()
    started = fake_engine(
        "serve start", "runpod", "--port", str(port), env=env, cwd=repo, timeout=180
    )
    server_id = printed_id(started)
    (pod_id,) = pods.pods
    target = f"runpod:{pod_id}"
    small = ["--isl", "8", "--osl", "4", "--num-prompts", "4", "--num-warmups", "0"]
    try:
        ready = proctor(
            "serve", "ready", server_id, "--target", target, "--timeout", "60s", env=env, cwd=repo
        )
        assert ready.returncode == 0, ready.stderr
        for command in (["bench", "--concurrency", "2"], ["sweep", "--concurrency", "1,2"]):
            ran = proctor(
                *command,
                "--target",
                target,
                "--server",
                server_id,
                *small,
                "--json",
                env=env,
                cwd=repo,
                timeout=240,
            )
            assert ran.returncode == 0, ran.stderr
            assert pods.pods[pod_id]["desiredStatus"] == "RUNNING", command
        assert pods.calls("POST", "/pods/{podId}/stop") == []
        plain = proctor(
            "bench",
            "--target",
            target,
            "--base-url",
            f"http://127.0.0.1:{port}",
            "--model",
            "m",
            *small,
            "--concurrency",
            "2",
            env=env,
            cwd=repo,
            timeout=240,
        )
        assert plain.returncode == 0, plain.stderr
        assert pods.pods[pod_id]["desiredStatus"] == "EXITED"
    finally:
        stopped = proctor(
            "serve", "stop", server_id, "--target", target, env=env, cwd=repo, timeout=180
        )
    assert stopped.returncode == 0, stopped.stderr
    assert_in_no_file(KEY, isolated_runs, host.workspace)

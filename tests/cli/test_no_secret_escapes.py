"""No secret escapes: distinct canaries planted in every place a credential can enter proctor
(URL credentials, header values, NAME=VALUE words, --env, the environment, a flow's
--workload-cmd), then the real CLI for run, bench, flow, runs list/show, report and results,
and every byte under the runs directory (SQLite store included) and every byte printed is
scanned for every canary."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.fixtures.fake_openai_server import free_port
from tests.helpers import FAKE_ENGINE_TOML, proctor

# Distinct, so a hit names the place that leaked. None of them is printed by the commands run.
CANARIES = {
    "bench --base-url password": "cnryBenchUrlPass7Q",
    "bench --base-url user": "cnryBenchUrlUser7Q",
    "command word URL password": "cnryCmdUrlPass3Z",
    "command word https token": "cnryHttpsTok4Y",
    "-H Authorization: Bearer": "cnryHdrBearer5X",
    "--header X-Api-Key": "cnryHdrApiKey6W",
    "Authorization=Bearer word": "cnryAuthEq8V",
    "NAME=VALUE word": "cnryDbPass9U",
    "[run] secret_names word": "cnryPrivVar1T",
    "--api-key flag of the command": "cnryApiFlag2S",
    "--env secret": "cnryEnvTok3R",
    "OPENAI_API_KEY (bench)": "cnryOpenAI4Q",
    "HF_TOKEN by value": "cnryHfTok5P",
    "flow --workload-cmd bearer": "cnryFlowBearer6O",
    "flow --workload-cmd URL password": "cnryFlowUrl7N",
    "command not found URL password": "cnryMissing8M",
    "sweep --base-url password": "cnrySweepUrl9L",
    "unreachable bench URL password": "cnryDeadUrl1K",
    "engine --api-key (flow server)": "cnryServeKey2J",
}
C = CANARIES


class Scan:
    """Everything printed, kept for the final scan."""

    def __init__(self) -> None:
        self.printed: list[tuple[str, str]] = []

    def __call__(
        self, *args: str, env: dict[str, str] | None = None, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        result = proctor(*args, env=env, timeout=timeout)
        # Named by the command and its number, not its words (which hold canaries).
        label = f"output {len(self.printed) // 2} of proctor {args[0]} {args[1]}"
        self.printed.append((f"{label} stdout", result.stdout))
        self.printed.append((f"{label} stderr", result.stderr))
        return result


def _leaks(where: str, data: bytes) -> list[str]:
    return [f"{label} in {where}" for label, canary in CANARIES.items() if canary.encode() in data]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "work" / "proctor.toml").write_text(
        f'[run]\nsecret_names = ["MY_PRIVATE_VAR"]\n\n{FAKE_ENGINE_TOML}\n'
    )
    return tmp_path


def test_no_canary_in_any_artifact_or_output(project: Path, isolated_runs: Path) -> None:
    run = Scan()
    env = {"HF_TOKEN": C["HF_TOKEN by value"], "OPENAI_API_KEY": C["OPENAI_API_KEY (bench)"]}
    # A command whose words carry every kind of credential; `true` prints none of them.
    command = [
        "true",
        f"http://alice:{C['command word URL password']}@127.0.0.1:9/x",
        f"--repo=https://{C['command word https token']}@example.invalid/r.git",
        "-H",
        f"Authorization: Bearer {C['-H Authorization: Bearer']}",
        "--header",
        f"X-Api-Key: {C['--header X-Api-Key']}",
        f"Authorization=Bearer {C['Authorization=Bearer word']}",
        f"DB_PASSWORD={C['NAME=VALUE word']}",
        f"MY_PRIVATE_VAR={C['[run] secret_names word']}",
        "--api-key",
        C["--api-key flag of the command"],
        "--hub",
        C["HF_TOKEN by value"],
    ]
    env_flag = ["--env", f"MY_TOKEN={C['--env secret']}"]
    dry = run("run", *env_flag, "--dry-run", "--", *command, env=env)
    assert dry.returncode == 0, dry.stderr
    dry_json = run("run", *env_flag, "--dry-run", "--json", "--", *command, env=env)
    assert dry_json.returncode == 0, dry_json.stderr
    done = run("run", *env_flag, "--", *command, env=env)
    assert done.returncode == 0, done.stderr
    done_json = run("run", *env_flag, "--json", "--", *command, env=env)
    assert done_json.returncode == 0, done_json.stderr
    missing = run("run", "--", f"./no-such-http://u:{C['command not found URL password']}@h")
    assert missing.returncode == 69, missing.stderr

    # bench against the fake server, with credentials in its URL and OPENAI_API_KEY set.
    port = free_port()
    server = run(
        "serve", "start", "--engine", "fake", "--model", "m", "--port", str(port), "--json"
    )
    assert server.returncode == 0, server.stderr
    server_id = json.loads(server.stdout)["run_id"]
    try:
        assert run("serve", "ready", server_id, "--timeout", "30s").returncode == 0
        url = (
            f"http://{C['bench --base-url user']}:{C['bench --base-url password']}@127.0.0.1:{port}"
        )
        # aiohttp refuses URL credentials together with an API key header: one bench each.
        bench = run(
            "bench",
            "--base-url",
            url,
            "--model",
            "m",
            "--isl",
            "8",
            "--osl",
            "4",
            "--concurrency",
            "2",
            "--prompt-multiplier",
            "2",
            env={"HF_TOKEN": env["HF_TOKEN"], "OPENAI_API_KEY": ""},
        )
        assert bench.returncode == 0, bench.stderr
        bench_json = run(
            "bench",
            "--port",
            str(port),
            "--model",
            "m",
            "--isl",
            "8",
            "--osl",
            "4",
            "--concurrency",
            "2",
            "--prompt-multiplier",
            "2",
            "--json",
            "--name",
            "b2",
            env=env,
        )
        assert bench_json.returncode == 0, bench_json.stderr
        sweep_url = f"http://u:{C['sweep --base-url password']}@127.0.0.1:{port}"
        sweep = run(
            "sweep",
            "--base-url",
            sweep_url,
            "--model",
            "m",
            "--concurrency",
            "1,2",
            "--isl",
            "8",
            "--osl",
            "4",
            "--prompt-multiplier",
            "1",
        )
        assert sweep.returncode == 0, sweep.stderr
    finally:
        run("serve", "stop", server_id)

    # An error message that names the URL: the server is gone.
    dead = run(
        "bench",
        "--base-url",
        f"http://u:{C['unreachable bench URL password']}@127.0.0.1:{port}",
        "--model",
        "m",
        "--isl",
        "8",
        "--osl",
        "4",
        "--concurrency",
        "1",
    )
    assert dead.returncode == 69, dead.stderr

    # flow whose workload carries a bearer token and URL credentials, and whose server is
    # started with an API key of its own; its human output is scanned too.
    port = free_port()
    workload = (
        f"curl -s -H 'Authorization: Bearer {C['flow --workload-cmd bearer']}' "
        f"http://u:{C['flow --workload-cmd URL password']}@127.0.0.1:{port}/v1/models"
    )
    flow = run(
        "flow",
        "--engine",
        "fake",
        "--model",
        "m",
        "--port",
        str(port),
        "--poll",
        "1s",
        "--workload-cmd",
        workload,
        "--",
        "--api-key",
        C["engine --api-key (flow server)"],
        env=env,
    )
    assert flow.returncode == 0, flow.stderr

    # Every reader.
    assert run("runs", "list").returncode == 0
    assert run("runs", "list", "--json").returncode == 0
    ids = [p.name for p in isolated_runs.iterdir() if (p / "record.json").exists()]
    assert len(ids) >= 6, ids
    for run_id in ids:
        assert run("runs", "show", run_id).returncode == 0
        assert run("runs", "show", run_id, "--json").returncode == 0
        run("runs", "verify", run_id)
        run("results", "parse", str(isolated_runs / run_id), "--json")
    benches = [
        i
        for i in ids
        if json.loads((isolated_runs / i / "record.json").read_text()).get("kind") == "bench"
    ]
    assert len(benches) == 5, benches  # two benches, two sweep points, one unreachable
    report = run("report", *benches[:2], "--compare")
    assert report.returncode == 0, report.stderr
    for bench_id in benches:
        assert run("report", bench_id, "--json").returncode == 0

    leaks: list[str] = []
    for where, text in run.printed:
        leaks += _leaks(where, text.encode())
    for path in sorted(project.rglob("*")):
        if path.is_file():
            leaks += _leaks(str(path.relative_to(project)), path.read_bytes())
        leaks += _leaks(f"file name {path.relative_to(project)}", str(path).encode())
    assert not leaks, "\n".join(leaks)


def test_a_flow_whose_workload_held_a_secret_is_not_resumed_with_the_mask(
    project: Path, isolated_runs: Path, tmp_path: Path
) -> None:
    """The record holds `Bearer ***`: resuming from it would run the workload with `***` as its
    key. It is refused (64) and says why; nothing is started again."""
    import signal
    import time

    from tests.helpers import proctor_popen

    port = free_port()
    workload = f"curl -s -H 'Authorization: Bearer {C['flow --workload-cmd bearer']}' http://127.0.0.1:{port}/v1/models"
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
        "--workload-cmd",
        workload,
        "--",
        "--startup-delay",
        "20",
    )
    flow_dir = server_run = None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and server_run is None:
        for rec in isolated_runs.glob("*/record.json") if isolated_runs.exists() else []:
            data = json.loads(rec.read_text())
            if data.get("kind") == "flow" and data.get("server_run"):
                flow_dir, server_run = rec.parent, data["server_run"]
        time.sleep(0.1)
    assert flow_dir is not None and server_run is not None, "the flow never started its server"
    controller.send_signal(signal.SIGKILL)
    controller.wait(timeout=10)
    try:
        resumed = proctor("flow", "--resume", flow_dir.name)
        assert resumed.returncode == 64, resumed.stderr
        assert "holds a secret" in resumed.stderr
        assert C["flow --workload-cmd bearer"] not in resumed.stdout + resumed.stderr
        record = json.loads((flow_dir / "record.json").read_text())
        assert not any(s["step"] == "workload" for s in record["steps"])
    finally:
        proctor("serve", "stop", server_run)

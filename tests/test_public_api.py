"""The public library API: complete (every CLI command has its library call), cheap to import,
and able to drive a run, a bench and a flow from Python as the CLI does."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path

import proctor
from proctor.cli.groups import GROUPS
from tests.fixtures.fake_openai_server import free_port as _free_port
from tests.helpers import FAKE_ENGINE_TOML
from tests.helpers import proctor as proctor_cli

# Each CLI command and the library calls that do its work. A new command without an entry here
# fails test_every_cli_command_has_its_library_call: the API grows with the CLI.
COMMAND_API: dict[str, tuple[str, ...]] = {
    "run": ("run", "start", "wait", "plan", "CommandJob", "run_job", "load_job"),
    "plan": ("plan",),
    "drain": ("drain", "drain_for_engine"),
    "inspect": ("inspect",),
    "flow": (
        "run_flow",
        "FlowJob",
        "flow_job",
        "load_flow_file",
        "ServerRequest",
        "ServeJob",
        "DrainConfig",
        "FlowWorkload",
    ),
    "bench": (
        "bench",
        "BenchJob",
        "BenchConfig",
        "BenchResult",
        "run_job",
        "load_job",
        "submit",
        "Submission",
    ),
    "sweep": (
        "SweepJob",
        "run_job",
        "run_sweep",
        "run_server_sweep",
        "ServerGridJob",
        "slo_search",
    ),
    "check": ("check", "load_baseline", "parse_path"),
    "report": ("build_report", "write_report"),
    "offline": ("start_offline", "OfflineRequest", "OfflineJob"),
    "runs": ("find", "status", "wait", "stop", "Store", "RunDir"),
    "pod": ("RunpodClient",),
    "serve": ("start_server", "stop_server", "ServerRequest", "ServeJob"),
    "eval": ("run_gsm8k", "Gsm8kConfig", "EvalJob"),
    "results": ("parse_path", "check", "compare"),
    "slurm": ("SlurmTarget",),
}


def test_all_is_the_export_table_and_every_name_resolves() -> None:
    exports = proctor._EXPORTS
    assert sorted(proctor.__all__) == sorted(["__version__", *exports])
    for name, module in exports.items():
        value = getattr(proctor, name)
        assert value is getattr(importlib.import_module(module), name), name
        assert (getattr(value, "__doc__", None) or "").strip() or not callable(value), name
    assert set(dir(proctor)) >= set(proctor.__all__)


def test_every_cli_command_has_its_library_call() -> None:
    commands = {name for _, _, names in GROUPS for name in names}
    assert sorted(commands) == sorted(COMMAND_API)
    missing = {n for names in COMMAND_API.values() for n in names} - set(proctor.__all__)
    assert missing == set()


def test_importing_proctor_loads_nothing_else() -> None:
    code = "import proctor, sys; print(sorted(m for m in sys.modules if m.startswith('proctor')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout.replace("'", '"')) == ["proctor", "proctor.version"]


def test_a_run_from_python_is_the_run_the_cli_sees(isolated_runs: Path) -> None:
    result = proctor.run(
        [sys.executable, "-c", "print('from python'); raise SystemExit(3)"], name="api-run"
    )
    assert (result.exit_code, result.outcome, result.ok) == (3, "failed", False)
    assert result.path.parent == isolated_runs
    assert "from python" in proctor.RunDir(result.path).log_path().read_text()
    shown = proctor_cli("runs", "show", result.run_id, "--json", check=True)
    assert json.loads(shown.stdout)["name"] == "api-run"
    assert proctor_cli("runs", "verify", result.run_id).returncode == 0


def test_a_detached_start_can_be_found_waited_for_and_stopped() -> None:
    started = proctor.start(proctor.plan([sys.executable, "-c", "import time; time.sleep(60)"]))
    assert started.state in ("starting", "running") and started.exit_code is None
    assert proctor.find(started.run_id).path == started.path
    assert proctor.stop(started.run_id) is True
    ended = proctor.wait(started, timeout=30)
    assert ended.state == "finished" and ended.outcome == "stopped"


def test_a_bench_from_python_leaves_the_files_the_cli_leaves(tmp_path: Path) -> None:
    """`proctor.bench(job, DIR)` and `proctor bench -o DIR` with the same settings: the same
    files (metrics.json, server_metrics.csv from the server's /metrics, requests.jsonl), and
    `proctor.run_job` the same again."""
    from tests.fixtures.fake_openai_server import FakeServer

    server = FakeServer().start()
    shape = {"isl": 16, "osl": 8, "concurrency": 2, "num_prompts": 4, "num_warmups": 0}
    flags = [f"--{k.replace('_', '-')}={v}" for k, v in shape.items()]
    try:
        job = proctor.BenchJob(
            base_url=server.base_url,
            range_ratio=0.0,
            progress=False,
            log_every_s=0.0,
            save_detailed=True,
            server_metrics_s=0.2,
            **shape,
        )
        result = proctor.bench(job, tmp_path / "api")
        assert proctor.run_job(job, output_dir=tmp_path / "job", say=lambda _: None) == 0
        cli = proctor_cli(
            "bench", "-o", str(tmp_path / "cli"), "--base-url", server.base_url, *flags,
            "--range-ratio", "0", "--save-detailed", "--server-metrics", "0.2", "--json",
        )  # fmt: skip
        assert cli.returncode == 0, cli.stderr
    finally:
        server.stop()
    files = {name: sorted(p.name for p in (tmp_path / name).iterdir()) for name in ("api", "cli")}
    files["job"] = sorted(p.name for p in (tmp_path / "job").iterdir())
    assert files["api"] == files["cli"] == files["job"], files
    assert {"metrics.json", "server_metrics.csv", "requests.jsonl"} <= set(files["api"])
    metrics = json.loads((tmp_path / "api" / "metrics.json").read_text())
    assert metrics["verdict"]["ok"] is True and metrics["verdict"]["total"] == 4
    assert result.verdict().ok


def test_a_flow_from_python_stops_what_it_started(isolated_runs: Path) -> None:
    (Path.cwd() / "proctor.toml").write_text(FAKE_ENGINE_TOML)
    port = _free_port()
    body = json.dumps({"model": "m", "prompt": "hi", "max_tokens": 3})
    job = proctor.FlowJob(
        server=proctor.ServeJob(engine="fake", model="m", port=port),
        workloads=[
            proctor.FlowWorkload(
                kind="cmd",
                command=["curl", "-sf", f"http://127.0.0.1:{port}/v1/completions", "-d", body],
            )
        ],
        poll="1s",
    )
    lines: list[str] = []
    result = proctor.run_flow(job, say=lines.append)
    assert result.exit_code == 0, lines
    assert result.record["outcome"] == "ok"
    assert proctor_cli("runs", "verify", result.run_id).returncode == 0
    server = [s for s in result.record["steps"] if s["step"] == "start"]
    assert server and proctor.status(server[0]["run_id"]).state == "finished"

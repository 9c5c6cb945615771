"""`serve start`, `flow` and a server sweep refuse what cannot start, before starting anything:
an engine module its python cannot import (69), a local model path that does not exist (64).
One line, nothing listening, no run directory (as `run` refuses a command not found).
Through the real CLI, with the fault-injecting fake engine where a server must start."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from tests.fixtures.fake_openai_server import free_port
from tests.helpers import FAKE_ENGINE_TOML, proctor

# An engine whose only launcher is a module no python here has: `python -m` of it is what
# `serve start --engine vllm` ran with no vLLM in that python (it returned 0).
NO_MODULE_ENGINE = """
[engines.nomod]
launchers = [{ module = "proctor_no_such_engine.entrypoints.api_server", model_arg = "--model" }]
ready_endpoints = ["/health"]
"""


@pytest.fixture
def port() -> int:
    Path("proctor.toml").write_text(FAKE_ENGINE_TOML + NO_MODULE_ENGINE)
    return free_port()


def _nothing_left(runs: Path, port: int) -> None:
    dirs = [p for p in runs.iterdir() if not p.name.startswith(".")] if runs.exists() else []
    assert dirs == [], dirs
    with socket.socket() as sock:
        assert sock.connect_ex(("127.0.0.1", port)) != 0, "something listens on the port"


def _one_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    return lines[0]


def test_serve_start_refuses_an_engine_module_its_python_cannot_import(
    port: int, isolated_runs: Path
) -> None:
    result = proctor("serve", "start", "--engine", "nomod", "--model", "m", "--port", str(port))
    assert result.returncode == 69, result.stderr
    line = _one_line(result.stderr)
    assert "module proctor_no_such_engine.entrypoints.api_server is not importable" in line
    assert "--python" in line  # the fix
    assert result.stdout == ""
    _nothing_left(isolated_runs, port)


def test_serve_start_refuses_a_model_path_that_does_not_exist(
    port: int, isolated_runs: Path, tmp_path: Path
) -> None:
    for model in (str(tmp_path / "no-such-model"), "./no-such-model", "models/x/y"):
        result = proctor(
            "serve", "start", "--engine", "fake", "--model", model, "--port", str(port)
        )
        assert result.returncode == 64, (model, result.stderr)
        assert f"model path {model} does not exist" in _one_line(result.stderr)
    _nothing_left(isolated_runs, port)


def test_a_hub_name_and_an_existing_path_are_started(
    port: int, isolated_runs: Path, tmp_path: Path
) -> None:
    (tmp_path / "model").mkdir()
    for model in ("org/model", str(tmp_path / "model")):
        result = proctor(
            "serve", "start", "--engine", "fake", "--model", model, "--port", str(port), "--json"
        )
        assert result.returncode == 0, result.stderr
        run_id = json.loads(result.stdout)["run_id"]
        assert proctor("serve", "stop", run_id).returncode == 0


def test_flow_refuses_before_its_directory_or_a_server(
    port: int, isolated_runs: Path, tmp_path: Path
) -> None:
    missing = str(tmp_path / "gone")
    for engine, model, code in (("nomod", "m", 69), ("fake", missing, 64)):
        result = proctor(
            "flow",
            "--engine",
            engine,
            "--model",
            model,
            "--port",
            str(port),
            "--workload-cmd",
            "true",
        )
        assert result.returncode == code, result.stderr
        _one_line(result.stderr)
    _nothing_left(isolated_runs, port)


def test_server_sweep_refuses_before_its_first_point(port: int, isolated_runs: Path) -> None:
    result = proctor(
        "sweep",
        "--server-grid",
        "tp=1,2",
        "--engine",
        "nomod",
        "--model",
        "m",
        "--group",
        "g",
        "--port",
        str(port),
        "--concurrency",
        "1",
    )
    assert result.returncode == 69, result.stderr
    assert "not importable" in _one_line(result.stderr)
    _nothing_left(isolated_runs, port)

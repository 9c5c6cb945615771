"""Command lines the remote-target tests share, each written once: a `--target` command of the
fake engine (`--engine fake --model m`), a bench or sweep against a server run, `serve start`
on a far place or a Slurm node, the run id a command prints last, a `run` on a host nobody
answers for, and the check that a secret is in no file under some roots."""

from __future__ import annotations

import json
import socket
import subprocess
from pathlib import Path
from typing import Any

from tests.helpers import proctor
from tests.targets.conftest import FarPlace


def fake_args(command: str, target: str, *args: str) -> list[str]:
    """`COMMAND --target TARGET --engine fake --model m ARGS...` (COMMAND split on spaces)."""
    return [*command.split(), "--target", target, "--engine", "fake", "--model", "m", *args]


def fake_engine(
    command: str,
    target: str,
    *args: str,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    """Run `proctor` with fake_args(COMMAND, TARGET, ARGS...)."""
    return proctor(*fake_args(command, target, *args), cwd=cwd, env=env, timeout=timeout)


def at_server(
    command: str,
    target: str,
    server_id: str,
    *args: str,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    """`proctor COMMAND --target TARGET --server SERVER ARGS...` (a bench or sweep against a
    server run started there)."""
    return proctor(
        command, "--target", target, "--server", server_id, *args, cwd=cwd, env=env, timeout=timeout
    )


def printed_id(result: subprocess.CompletedProcess[str]) -> str:
    """The run id a command that exited 0 printed last."""
    assert result.returncode == 0, result.stderr
    return result.stdout.strip().splitlines()[-1]


def serve_start(place: FarPlace, repo: Path, port: int) -> str:
    """`serve start --target` of the fake engine on `place`; the server's run id."""
    return printed_id(
        fake_engine(
            "serve start", place.url, "--port", str(place.port(port)), cwd=repo, timeout=120
        )
    )


def serve_stop(target: str, server_id: str, repo: Path) -> subprocess.CompletedProcess[str]:
    """`serve stop SERVER --target TARGET` from the project `repo`."""
    return proctor("serve", "stop", server_id, "--target", target, cwd=repo, timeout=120)


def slurm_serve_start(
    target: str, port: int, *, cwd: Path, env: dict[str, str], timeout: float
) -> dict[str, Any]:
    """`serve start --target TARGET` of the fake engine on one Slurm node (waiting up to 60 s
    for it), which must exit 0; the JSON it printed."""
    started = fake_engine(
        "serve start",
        target,
        *("--port", str(port), "--nodes", "1", "--wait", "60s", "--json"),
        cwd=cwd,
        env=env,
        timeout=timeout,
    )
    assert started.returncode == 0, started.stderr
    info: dict[str, Any] = json.loads(started.stdout)
    return info


def dead_port() -> int:
    """A loopback port nobody listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def run_unreachable(port: int, project: Path) -> subprocess.CompletedProcess[str]:
    """`run --target ssh://root@127.0.0.1:PORT --insecure-accept-host-key -- true` from
    `project`: a host that nothing answers for."""
    return proctor(
        *("run", "--target", f"ssh://root@127.0.0.1:{port}", "--insecure-accept-host-key"),
        *("--", "true"),
        cwd=project,
    )


def assert_in_no_file(secret: str, *roots: Path) -> None:
    """No file under any of `roots` holds `secret`."""
    for root in roots:
        for path in root.rglob("*"):
            if path.is_file():
                assert secret.encode() not in path.read_bytes(), path

"""The env proctor prints and records as applied to a server is what the server's process got:
the user's --env and the project config's as well as the profiles' (secret values masked).

Before: `serve start --env VLLM_CPU_KVCACHE_SPACE=1` printed `env applied: (none)` while the
server's /proc/PID/environ had the variable; the flow printed `env (none)` the same way.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.fixtures.fake_openai_server import free_port
from tests.helpers import FAKE_ENGINE_TOML, proctor

SECRET = "hf_s3cretvalue0123456789"


@pytest.fixture
def fake_engine(isolated_runs: Path, tmp_path: Path) -> Path:
    """The fake engine's profile, and a project [run] env, in the working directory."""
    (tmp_path / "work" / "proctor.toml").write_text(
        FAKE_ENGINE_TOML + '\n[run]\nenv = { FROM_CONFIG = "cfg" }\n'
    )
    return isolated_runs


def _environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    pairs = (item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)
    return {k.decode(): v.decode(errors="replace") for k, v in pairs}


def _server_pid(run: Path) -> int:
    """The server's pid once its exec landed (the record names it after the spawn)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        record = json.loads((run / "record.json").read_text())
        pid = (record.get("process") or {}).get("pid")
        if pid and "fake_openai_server" in Path(f"/proc/{pid}/cmdline").read_text(errors="replace"):
            return int(pid)
        time.sleep(0.1)
    raise AssertionError("the server's process never appeared")


def _printed_env(stderr: str, prefix: str) -> dict[str, str]:
    line = next(x for x in stderr.splitlines() if prefix in x)
    words = line.split(prefix, 1)[1].split(";")[0].split()
    return dict(w.split("=", 1) for w in words if "=" in w)


def test_serve_start_prints_and_records_the_env_the_server_got(fake_engine: Path) -> None:
    runs = fake_engine
    port = free_port()
    result = proctor(
        "serve",
        "start",
        "--engine",
        "fake",
        "--model",
        "m",
        "--port",
        str(port),
        "--env",
        "VLLM_CPU_KVCACHE_SPACE=1",
        "--env",
        f"HF_TOKEN={SECRET}",
    )
    assert result.returncode == 0, result.stderr
    [run] = [p for p in runs.iterdir() if p.is_dir()]
    try:  # the server is stopped whatever fails below
        assert SECRET not in result.stderr
        printed = _printed_env(result.stderr, "env applied: ")
        assert printed == {"FROM_CONFIG": "cfg", "VLLM_CPU_KVCACHE_SPACE": "1", "HF_TOKEN": "***"}
        got = _environ(_server_pid(run))
        record = json.loads((run / "record.json").read_text())
        assert record["server"]["applied_env"] == printed
        assert SECRET not in (run / "record.json").read_text()
        # Every variable said to be applied is in the process, with that value (or the secret).
        for key, value in printed.items():
            assert got[key] == (SECRET if value == "***" else value), key
    finally:
        assert proctor("serve", "stop", run.name).returncode == 0


def test_flow_prints_the_env_the_server_got(fake_engine: Path, tmp_path: Path) -> None:
    port = free_port()
    result = proctor(
        "flow",
        "--engine",
        "fake",
        "--model",
        "m",
        "--port",
        str(port),
        "--poll",
        "1s",
        "--env",
        "VLLM_CPU_KVCACHE_SPACE=1",
        "--workload-cmd",
        "true",
    )
    assert result.returncode == 0, result.stderr
    printed = _printed_env(result.stderr, "; env ")
    assert printed == {"FROM_CONFIG": "cfg", "VLLM_CPU_KVCACHE_SPACE": "1"}

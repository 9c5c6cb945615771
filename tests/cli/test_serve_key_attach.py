"""Issue 20: `serve start --key K` while the server of that key lives attaches to it (0), even
though its port is taken (by that very server); another key on that port is still refused (69)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.fixtures.fake_openai_server import free_port
from tests.helpers import FAKE_ENGINE_TOML, proctor


def test_second_start_with_the_same_key_attaches_to_the_live_server(tmp_path: Path) -> None:
    Path("proctor.toml").write_text(FAKE_ENGINE_TOML)
    port = free_port()
    args = ("serve", "start", "--engine", "fake", "--model", "m", "--port", str(port))
    first = proctor(*args, "--key", "K", "--json")
    assert first.returncode == 0, first.stderr
    run_id = json.loads(first.stdout)["run_id"]
    try:
        ready = proctor("serve", "ready", run_id, "--timeout", "60s")
        assert ready.returncode == 0, ready.stderr  # the port is now held by the server
        again = proctor(*args, "--key", "K", "--json")
        assert again.returncode == 0, again.stderr
        answer = json.loads(again.stdout)
        assert answer["run_id"] == run_id and answer["attached"] is True
        plain = proctor(*args, "--key", "K")
        assert plain.returncode == 0, plain.stderr
        assert plain.stdout.strip() == run_id and "attached to running server" in plain.stderr
        other = proctor(*args, "--key", "other")
        assert other.returncode == 69 and "already in use" in other.stderr
    finally:
        assert proctor("serve", "stop", run_id).returncode == 0

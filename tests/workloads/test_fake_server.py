"""The fake server's process-level fault modes, which server-workflow tests rely on."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import time
import urllib.request
from collections.abc import Callable

import psutil
import pytest

from tests.workloads.conftest import FakeProcess

pytestmark = pytest.mark.timeout(60)
Spawn = Callable[..., FakeProcess]


def get(url: str, timeout: float = 5.0) -> int:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return int(r.status)


def complete(base: str, max_tokens: int = 3) -> dict[str, object]:
    req = urllib.request.Request(
        base + "/v1/completions",
        data=json.dumps({"prompt": "a b", "max_tokens": max_tokens, "ignore_eos": True}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=5) as r:
        return dict(json.loads(r.read()))


def refused(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


def test_vllm_like_log_lines(fake_process: Spawn) -> None:
    p = fake_process("--stats-interval", "0.2")
    line = p.wait_for("Starting vLLM server on")
    assert line.endswith(p.base_url)
    p.wait_for("Application startup complete.")
    assert complete(p.base_url)["usage"] == {
        "prompt_tokens": 2,
        "completion_tokens": 3,
        "total_tokens": 5,
    }
    assert '"POST /v1/completions HTTP/1.1" 200' in p.wait_for("POST /v1/completions")
    assert p.wait_for("Engine Core: output send") == "Engine Core: output send 1"
    stats = p.wait_for("Engine 000: Avg prompt throughput")
    assert "Running: 0 reqs, Waiting: 0 reqs" in stats
    with urllib.request.urlopen(p.base_url + "/metrics", timeout=5) as r:
        text = r.read().decode()
    assert 'vllm:generation_tokens_total{model_name="fake-model"} 3.0' in text


def test_startup_delay_listens_late(fake_process: Spawn) -> None:
    t0 = time.monotonic()
    # 3 s: the refusal is checked after the line reached this test, late on a loaded machine.
    p = fake_process("--startup-delay", "3.0")
    p.wait_for("Loading model")
    assert refused(p.port)
    p.wait_for("Application startup complete.")
    assert time.monotonic() - t0 >= 3.0
    assert get(p.base_url + "/health") == 200


def test_crash_at_startup(fake_process: Spawn) -> None:
    p = fake_process("--crash-at-startup", "RuntimeError: Failed to initialize EngineCore")
    assert p.proc.wait(60) == 1
    p.wait_for("Failed to initialize EngineCore")
    assert not any("Application startup complete." in x for x in p.lines)


def test_fault_line_after_requests_keeps_serving(fake_process: Spawn) -> None:
    p = fake_process("--fault-after-requests", "2", "--fault-line", "HSA_STATUS_ERROR boom")
    p.wait_for("Application startup complete.")
    complete(p.base_url)
    time.sleep(0.2)
    assert not any("HSA_STATUS_ERROR" in x for x in p.lines)
    complete(p.base_url)
    p.wait_for("HSA_STATUS_ERROR boom")
    assert p.proc.poll() is None and get(p.base_url + "/health") == 200


def test_die_after_requests_silently(fake_process: Spawn) -> None:
    p = fake_process("--die-after-requests", "1", "--die-code", "5")
    p.wait_for("Application startup complete.")
    with pytest.raises(OSError):  # the connection dies with the process
        complete(p.base_url)
    assert p.proc.wait(60) == 5
    assert not any("fault" in x.lower() for x in p.lines)


def test_hang_after_requests_stalls_mid_stream(fake_process: Spawn) -> None:
    p = fake_process("--hang-after-requests", "1")
    p.wait_for("Application startup complete.")
    complete(p.base_url)
    req = urllib.request.Request(
        p.base_url + "/v1/completions",
        data=json.dumps({"prompt": "x", "max_tokens": 5, "stream": True}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=1.0) as r:
        first = r.readline()
        assert first.startswith(b"data: {")
        with pytest.raises(TimeoutError):
            while True:
                if not r.readline():
                    break
    assert p.proc.poll() is None and get(p.base_url + "/health") == 200


def test_sigterm_stops_unless_ignored(fake_process: Spawn) -> None:
    plain = fake_process()
    plain.wait_for("Application startup complete.")
    plain.proc.send_signal(signal.SIGTERM)
    assert plain.proc.wait(10) == 0

    stubborn = fake_process("--ignore-sigterm")
    stubborn.wait_for("Application startup complete.")
    stubborn.proc.send_signal(signal.SIGTERM)
    stubborn.wait_for("ignoring it")
    time.sleep(0.3)
    assert stubborn.proc.poll() is None and get(stubborn.base_url + "/health") == 200
    stubborn.proc.send_signal(signal.SIGKILL)
    assert stubborn.proc.wait(10) == -signal.SIGKILL


def test_grandchild_leaves_the_process_group(fake_process: Spawn) -> None:
    p = fake_process("--spawn-grandchild", "--grandchild-seconds", "60")
    pid = int(p.wait_for("spawned grandchild pid=").split("=")[1])
    p.wait_for("Application startup complete.")
    try:
        child = psutil.Process(pid)
        assert os.getsid(pid) != os.getsid(p.proc.pid)
        assert os.getpgid(pid) != os.getpgid(p.proc.pid)
        p.kill()  # the whole group of the server
        time.sleep(0.2)
        assert child.is_running() and child.status() != psutil.STATUS_ZOMBIE
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def test_mp_helper_shares_the_group(fake_process: Spawn) -> None:
    p = fake_process("--spawn-mp-helper", "--grandchild-seconds", "60")
    pid = int(p.wait_for("started engine core pid=").split("=")[1])
    p.wait_for("Application startup complete.")
    helper = psutil.Process(pid)
    assert helper.ppid() == p.proc.pid
    assert os.getpgid(pid) == os.getpgid(p.proc.pid)
    # multiprocessing returns the pid before the child's exec lands: wait for it.
    deadline = time.monotonic() + 60
    while "multiprocessing" not in " ".join(helper.cmdline()):
        assert time.monotonic() < deadline, helper.cmdline()
        time.sleep(0.05)
    p.kill()
    helper.wait(30)
    assert not helper.is_running()

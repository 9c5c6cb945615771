"""Fixtures: the fake OpenAI server in-process (thread) or as a real process."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.fake_openai_server import FakeServer, free_port

FAKE = Path(__file__).resolve().parents[1] / "fixtures" / "fake_openai_server.py"


@pytest.fixture
def fake() -> Iterator[Callable[..., FakeServer]]:
    started: list[FakeServer] = []

    def start(**kwargs: Any) -> FakeServer:
        server = FakeServer(**kwargs).start()
        started.append(server)
        return server

    yield start
    for s in started:
        s.stop()


class FakeProcess:
    def __init__(self, args: list[str]) -> None:
        self.port = free_port()
        self.proc = subprocess.Popen(
            [sys.executable, str(FAKE), "--port", str(self.port), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        self.lines: list[str] = []
        self._cond = threading.Condition()
        # A reader thread drains stdout, so a chatty server never blocks on a full pipe.
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.base_url = f"http://127.0.0.1:{self.port}"

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._cond:
                self.lines.append(line.rstrip("\n"))
                self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    def wait_for(self, needle: str, timeout: float = 15.0, start: int = 0) -> str:
        """The first line from index `start` on that contains `needle`; fails after timeout."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for line in self.lines[start:]:
                    if needle in line:
                        return line
                left = deadline - time.monotonic()
                if left <= 0 or (not self._reader.is_alive() and self.proc.poll() is not None):
                    raise AssertionError(f"{needle!r} not seen; last lines {self.lines[-10:]}")
                self._cond.wait(min(left, 0.2))

    def running(self) -> int:
        """Requests it has in flight now, from its /metrics: what a test waits for before it
        acts on a client mid-run (a fixed pause can end before a loaded machine sent any)."""
        with urllib.request.urlopen(self.base_url + "/metrics", timeout=30) as reply:
            text = reply.read().decode()
        found = re.search(r"^vllm:num_requests_running\{.*\} (\S+)$", text, re.M)
        assert found, text
        return int(float(found.group(1)))

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)


@pytest.fixture
def fake_process() -> Iterator[Callable[..., FakeProcess]]:
    procs: list[FakeProcess] = []

    def start(*args: str) -> FakeProcess:
        p = FakeProcess(list(args))
        procs.append(p)
        return p

    yield start
    for p in procs:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            p.kill()


@pytest.fixture(scope="module")
def fastread() -> Any:
    """The C read path's module (loadgen/_fastread.c); a test that needs it fails where the
    install could not build it (a skip in CI is a failure)."""
    from proctor.workloads.loadgen import fasthttp

    if fasthttp._drain is None:
        pytest.fail(
            "the C read path did not build (proctor.workloads.loadgen._fastread): install "
            "with a C compiler and Python's headers (python3-dev)"
        )
    from proctor.workloads.loadgen import _fastread

    return _fastread

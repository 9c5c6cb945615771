"""wait_ready and drain against real processes: inline servers and the fake OpenAI server."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from proctor.monitors.drain import DrainConfig, DrainOutcome, drain, drain_for_engine
from proctor.monitors.ready import ReadyOutcome, ReadyResult, ready_for_engine, wait_ready
from proctor.monitors.watch import PopenWatch
from proctor.spec.profiles import load_profiles
from tests.fixtures.fake_openai_server import free_port

FAKE = Path(__file__).resolve().parents[1] / "fixtures" / "fake_openai_server.py"

# A stdlib server: prints lines on a schedule, starts listening after READY_AFTER seconds.
INLINE = textwrap.dedent(
    """
    import http.server, sys, time, threading
    port, ready_after, script = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3:]
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200 if self.path in ("/v1/models", "/health") else 404)
            self.end_headers(); self.wfile.write(b'{"data": []}')
        def log_message(self, *a): pass
    def lines():
        for item in script:
            delay, _, text = item.partition(":")
            time.sleep(float(delay))
            if text.startswith("EXIT"):
                sys.stdout.flush(); import os; os._exit(int(text[4:] or 0))
            print(text, flush=True)
    threading.Thread(target=lines, daemon=True).start()
    time.sleep(ready_after)
    server = http.server.HTTPServer(("127.0.0.1", port), H)
    print("listening at", time.monotonic(), flush=True)
    server.serve_forever()
    """
)


def start_inline(
    tmp: Path, port: int, ready_after: float, *script: str
) -> tuple[subprocess.Popen[bytes], Path]:
    log = tmp / "server.log"
    fh = log.open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-c", INLINE, str(port), str(ready_after), *script],
        stdout=fh,
        stderr=subprocess.STDOUT,
    )
    fh.close()
    return proc, log


Procs = list[subprocess.Popen[bytes]]


@pytest.fixture
def cleanup() -> Iterator[Procs]:
    procs: Procs = []
    yield procs
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()


def ready_inline(
    tmp: Path, cleanup: Procs, ready_after: float, *script: str, **wait: Any
) -> tuple[ReadyResult, Path]:
    """wait_ready (with `wait`) on the inline server, started here; the result and its log."""
    port = free_port()
    proc, log = start_inline(tmp, port, ready_after, *script)
    cleanup.append(proc)
    return wait_ready(f"http://127.0.0.1:{port}", process=PopenWatch(proc), logs=[log], **wait), log


def test_ready_seen_within_a_second_of_endpoint_answering(tmp_path: Path, cleanup: Procs) -> None:
    statuses: list[str] = []
    result, log = ready_inline(
        tmp_path,
        cleanup,
        1.5,
        fault_patterns=["proc died"],
        timeout_s=20,
        poll_s=30,  # a long poll must not delay readiness
        on_status=statuses.append,
    )
    seen = time.monotonic()
    assert result.outcome is ReadyOutcome.READY and result.exit_code == 0
    assert result.elapsed_s > 1.4
    # Measured from the moment it listened (Python's start-up is slow under load): seconds,
    # not the 30 s poll. The system-wide monotonic clock is the same in both processes.
    listened = float(
        next(
            line for line in log.read_text().splitlines() if line.startswith("listening at")
        ).split()[-1]
    )
    assert seen - listened < 5, f"ready seen {seen - listened:.1f}s after it listened"


def test_startup_fault_exit_2_with_matching_line_and_tail(tmp_path: Path, cleanup: Procs) -> None:
    t0 = time.monotonic()
    result, log = ready_inline(
        tmp_path,
        cleanup,
        60,
        "0.2:loading",
        "0.3:InductorError: boom",
        fault_patterns=["InductorError"],
        timeout_s=30,
        poll_s=30,
    )
    assert result.outcome is ReadyOutcome.FAULT and result.exit_code == 2
    assert result.faults[0].line == "InductorError: boom"
    assert "loading" in result.tails[str(log)]
    assert time.monotonic() - t0 < 15  # seen on a fast tick, not the 30 s poll (slack for load)
    assert result.error() is not None and result.error().exit_code == 2  # type: ignore[union-attr]


def test_server_exit_without_pattern_is_3_not_a_timeout(tmp_path: Path, cleanup: Procs) -> None:
    result, log = ready_inline(
        tmp_path, cleanup, 60, "0.2:something odd", "0.1:EXIT9", timeout_s=30, poll_s=30
    )
    assert result.outcome is ReadyOutcome.EXITED and result.exit_code == 3
    assert result.exit_status == 9
    assert result.elapsed_s < 15  # seen on a fast tick, not the 30 s poll (slack for load)
    assert result.tails[str(log)] == ["something odd"]


def test_not_ready_in_time_is_5(tmp_path: Path, cleanup: Procs) -> None:
    result, _ = ready_inline(tmp_path, cleanup, 60, timeout_s=1.0, poll_s=0.2)
    assert result.outcome is ReadyOutcome.TIMEOUT and result.exit_code == 5
    assert "ConnectError" in result.last_probe


def test_ready_for_engine_uses_transformers_health_endpoint(tmp_path: Path, cleanup: Procs) -> None:
    port = free_port()
    proc, log = start_inline(tmp_path, port, 0.2)
    cleanup.append(proc)
    engine = load_profiles().engine("transformers")
    result = ready_for_engine(engine, port, process=PopenWatch(proc), logs=[log], timeout_s=10)
    assert result.outcome is ReadyOutcome.READY
    assert result.endpoints == ["/health"]


# -- drain against the fake OpenAI server --------------------------------------------------

CLIENT = textwrap.dedent(
    """
    import httpx, sys
    port, n = int(sys.argv[1]), int(sys.argv[2])
    for i in range(n):
        try:
            httpx.post(f"http://127.0.0.1:{port}/v1/completions", timeout=60,
                       json={"model": "fake-model", "prompt": "hi", "max_tokens": 8})
        except httpx.HTTPError as e:
            print("client error", e, flush=True)
    """
)


def start_fake(tmp: Path, port: int, *args: str) -> tuple[subprocess.Popen[bytes], Path]:
    log = tmp / "server.log"
    fh = log.open("wb")
    proc = subprocess.Popen(
        [sys.executable, str(FAKE), "--port", str(port), "--itl", "0.02", *args],
        stdout=fh,
        stderr=subprocess.STDOUT,
    )
    fh.close()
    result = wait_ready(
        f"http://127.0.0.1:{port}", process=PopenWatch(proc), logs=[log], timeout_s=20
    )
    assert result.outcome is ReadyOutcome.READY, result.to_dict()
    return proc, log


def start_client(port: int, n: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", CLIENT, str(port), str(n)])


@dataclass
class Loaded:
    """The fake server, ready, with a client sending it requests."""

    port: int
    server: subprocess.Popen[bytes]
    log: Path
    client: subprocess.Popen[bytes]

    def watches(self) -> dict[str, Any]:
        """What drain watches: the server, its log, the client."""
        return {
            "server": PopenWatch(self.server),
            "server_log": self.log,
            "clients": [PopenWatch(self.client)],
        }


def under_load(tmp: Path, cleanup: Procs, requests: int, *fake_args: str) -> Loaded:
    """The fake server (with `fake_args`) and a client of `requests` completions; both killed
    after the test."""
    port = free_port()
    server, log = start_fake(tmp, port, *fake_args)
    client = start_client(port, requests)
    cleanup += [server, client]
    return Loaded(port, server, log, client)


pytestmark_fake = pytest.mark.skipif(not FAKE.exists(), reason="fake server fixture missing")


@pytestmark_fake
def test_drain_server_mode_drained_with_metrics(tmp_path: Path, cleanup: Procs) -> None:
    load = under_load(tmp_path, cleanup, 5)
    lines: list[str] = []
    result = drain_for_engine(
        load_profiles().engine("vllm"),
        # 30 s without progress for a hang: the client's start-up (importing httpx) shows no
        # progress either, and takes seconds on a loaded machine.
        DrainConfig(max_s=60, poll_s=0.5, stuck_polls=60, startup_max_s=10),
        port=load.port,
        on_status=lines.append,
        **load.watches(),
    )
    assert result.outcome is DrainOutcome.DRAINED, result.to_dict()
    assert result.progress_source == "metrics"
    assert lines and "clients=" in lines[0]


@pytestmark_fake
def test_drain_hang_when_server_stops_emitting(tmp_path: Path, cleanup: Procs) -> None:
    load = under_load(tmp_path, cleanup, 5, "--hang-after-requests", "1")
    result = drain_for_engine(
        load_profiles().engine("vllm"),
        DrainConfig(max_s=60, poll_s=0.3, stuck_polls=4, startup_max_s=10),
        port=load.port,
        **load.watches(),
    )
    assert result.outcome is DrainOutcome.HANG and result.exit_code == 1, result.to_dict()
    assert load.server.poll() is None  # drain kills nothing: the hang is still there to inspect
    assert result.tails


@pytestmark_fake
def test_drain_server_death_without_pattern_is_3(tmp_path: Path, cleanup: Procs) -> None:
    load = under_load(tmp_path, cleanup, 5, "--die-after-requests", "2", "--die-code", "0")
    result = drain(
        DrainConfig(max_s=60, poll_s=30, stuck_polls=6, startup_max_s=10),
        fault_patterns=["proc died unexpectedly"],
        **load.watches(),
    )
    assert result.outcome is DrainOutcome.SERVER_DIED and result.exit_code == 3
    # Found on a fast tick, not the 30 s poll (the client's start-up is slow under load).
    assert result.elapsed_s < 20


@pytestmark_fake
def test_drain_fault_line_within_a_second(tmp_path: Path, cleanup: Procs) -> None:
    load = under_load(
        tmp_path,
        cleanup,
        3,
        "--fault-after-requests",
        "1",
        "--fault-line",
        "Memory access fault by GPU node-1",
    )
    result = drain_for_engine(
        load_profiles().engine("atom"),
        DrainConfig(max_s=60, poll_s=30, stuck_polls=6, startup_max_s=10),
        **load.watches(),
    )
    assert result.outcome is DrainOutcome.FAULT and result.exit_code == 2
    assert "Memory access fault by GPU" in result.faults[0].line
    # Found on a fast tick, not the 30 s poll (the client's start-up is slow under load).
    assert result.faults[0].seen_at - load.log.stat().st_mtime < 1.0 or result.elapsed_s < 20


def test_drain_offline_reports_job_status(tmp_path: Path, cleanup: Procs) -> None:
    log = tmp_path / "offline.log"
    with log.open("wb") as fh:
        job = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "import time,sys\n"
                "for i in range(4): print(i, flush=True); time.sleep(0.3)\n"
                "sys.exit(5)",
            ],
            stdout=fh,
            stderr=subprocess.STDOUT,
        )
    cleanup.append(job)
    result = drain(
        DrainConfig(max_s=30, poll_s=0.2, stuck_polls=20, offline=True),
        offline=PopenWatch(job),
        server_log=log,
        fault_patterns=["Memory access fault"],
    )
    assert result.outcome is DrainOutcome.OFFLINE_FAILED and result.exit_code == 3
    assert result.exit_status == 5
    assert result.elapsed_s > 1.0  # quiet polls while it ran were not "drained"


def test_drain_stale_fault_in_reused_log_is_not_a_fault(tmp_path: Path, cleanup: Procs) -> None:
    log = tmp_path / "reused.log"
    log.write_text("previous run: Memory access fault by GPU\n")
    with log.open("ab") as fh:
        job = subprocess.Popen(
            [sys.executable, "-c", "print('fine', flush=True)"], stdout=fh, stderr=subprocess.STDOUT
        )
    cleanup.append(job)
    result = drain(
        DrainConfig(max_s=30, poll_s=0.2, offline=True),
        offline=PopenWatch(job),
        server_log=log,
        fault_patterns=["Memory access fault"],
        from_end=True,
    )
    assert result.outcome is DrainOutcome.DRAINED and result.exit_code == 0

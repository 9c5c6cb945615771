"""Log tails that `serve ready` and `drain` print are capped per line and in total."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from proctor.monitors.logscan import KEEP_LINE_BYTES, LogScanner
from tests.fixtures.fake_openai_server import free_port
from tests.helpers import proctor

HUGE = 40 * 1024 * 1024  # a 40 MB line (the GPU machine printed one of 200 MB)


def test_scanner_keeps_a_clipped_tail_of_huge_lines(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    with log.open("wb") as f:
        f.write(b"start\n" + b"x" * HUGE + b" CUDA error: an illegal memory access\n")
        f.write(b"y" * (3 * 1024 * 1024))  # an unfinished huge last line
    scanner = LogScanner(["CUDA error: "], tail_lines=50)
    scanner.add(log)
    matches = scanner.poll()
    tail = scanner.tail(lines=50)
    scanner.close()
    assert matches and all(len(m.line) < KEEP_LINE_BYTES + 100 for m in matches)
    assert tail[0] == "start"
    assert all(len(line) < KEEP_LINE_BYTES + 100 for line in tail)
    assert "more bytes of this line cut]" in tail[-1]
    assert sum(len(line) for line in tail) < 50 * (KEEP_LINE_BYTES + 100)


def test_serve_ready_prints_a_bounded_tail_of_a_server_that_printed_a_huge_line(
    tmp_path: Path,
) -> None:
    server = tmp_path / "huge_server.py"
    server.write_text(
        "import sys, time\n"
        f"sys.stdout.write('z' * {HUGE} + '\\n')\n"
        "sys.stdout.write('dying now\\n')\n"
        "sys.stdout.flush()\n"
        "sys.exit(1)\n"
    )
    Path("proctor.toml").write_text(
        "[engines.huge]\n"
        f'launchers = [{{ command = ["{sys.executable}", "{server}"], model_arg = "--model" }}]\n'
        'ready_endpoints = ["/health"]\nmetrics_path = ""\ntp_arg = ""\n'
    )
    started = proctor(
        "serve", "start", "--engine", "huge", "--model", "m", "--port", str(free_port()), "--json"
    )
    assert started.returncode == 0, started.stderr
    run_id = json.loads(started.stdout)["run_id"]
    result = proctor("serve", "ready", run_id, "--timeout", "60s")
    assert result.returncode not in (0, 70), result.stderr
    assert "Traceback" not in result.stderr
    assert "more bytes of this line cut]" in result.stderr and "dying now" in result.stderr
    assert len(result.stderr) + len(result.stdout) < 256 * 1024

"""How much `serve ready` prints while a server starts, and on a port with nothing on it.

Anchor: issue 22's measurement, 31 status lines for a 31 s start (one a second, each saying
`alive=True`, also with nothing on the port). The aim: one line per change of what is seen
(nothing listening, an HTTP status, ...) and one per --poll (15 s) of nothing new, so about
three for a 31 s start, and no word of a process where none is watched.
The fake engine (tests/fixtures/fake_openai_server.py) starts listening after --delay s.

    .venv/bin/python bench/ready_lines.py [--delay 31] [--empty-timeout 20]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.fixtures.fake_openai_server import free_port  # noqa: E402
from tests.helpers import FAKE_ENGINE_TOML  # noqa: E402

ANCHOR_LINES = 31  # issue 22: a 31 s start


def proctor(work: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PROCTOR_RUNS_DIR": str(work / "runs"), "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "-m", "proctor.cli.main", *args],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def status_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("[t=")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--delay", type=float, default=31.0)
    parser.add_argument("--empty-timeout", default="20s")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "proctor.toml").write_text(FAKE_ENGINE_TOML)
        port = free_port()
        started = proctor(
            work,
            "serve",
            "start",
            "--engine",
            "fake",
            "--model",
            "m",
            "--port",
            str(port),
            "--",
            "--startup-delay",
            str(args.delay),
        )
        run_id = started.stdout.strip()
        try:
            ready = proctor(work, "serve", "ready", run_id, "--timeout", "10m")
        finally:
            proctor(work, "serve", "stop", run_id)
        lines = status_lines(ready.stderr)
        print(f"start of {args.delay:.0f} s: {len(lines)} status lines (anchor: {ANCHOR_LINES})")
        print(f"  {ready.stderr.strip().splitlines()[-1]}")
        for line in lines:
            print(f"  {line}")
        empty = proctor(
            work,
            "serve",
            "ready",
            "--port",
            str(free_port()),
            "--engine",
            "fake",
            "--timeout",
            args.empty_timeout,
        )
        lines = status_lines(empty.stderr)
        said = "says alive" if "alive" in empty.stderr else "says nothing of a process"
        print(
            f"empty port, {args.empty_timeout}: exit {empty.returncode}, {len(lines)} lines, {said}"
        )
        for line in lines:
            print(f"  {line}")


if __name__ == "__main__":
    main()

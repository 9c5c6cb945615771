"""Drain's per-poll log cost as the log grows, next to re-reading the whole file each poll.

For each size the log is filled with realistic server lines, then APPEND bytes of new lines are
written per poll. proctor: `LogScanner.poll()` (reads only the new bytes). Anchor: ATOM's
drain re-greps the whole file each poll (`grep -E PATTERN FILE`), measured here as a real grep
subprocess and as a Python full read + regex. Files are real (not sparse) and written once,
growing: 10 MB -> 100 MB -> 1 GB (--max-mb to scale; page cache warm, which favours the anchor).
Run: .venv/bin/python bench/logscan_cost.py [--max-mb 1024] [--append-kb 64]
"""

from __future__ import annotations

import argparse
import re
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from proctor.monitors.logscan import LogScanner

PATTERNS = [
    "stopped, reason",
    "MEMORY_VIOLATION",
    "ASSERT_TRAP",
    "proc died unexpectedly",
    "Memory access fault by GPU",
]
LINE = (
    "INFO 12-02 16:00:00 [loggers.py:123] Engine 000: Avg prompt throughput: 1234.5 tokens/s, "
    "Avg generation throughput: 567.8 tokens/s, Running: 64 reqs, Waiting: 0 reqs\n"
)
ACCESS = 'INFO:     127.0.0.1:51234 - "POST /v1/completions HTTP/1.1" 200 OK\n'


def block(n_bytes: int) -> bytes:
    unit = (LINE + ACCESS * 3).encode()
    return unit * max(1, n_bytes // len(unit))


def timed(fn: object, repeat: int = 3) -> float:
    xs = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()  # type: ignore[operator]
        xs.append(time.perf_counter() - t)
    return statistics.median(xs)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--max-mb", type=int, default=1024)
    ap.add_argument("--append-kb", type=int, default=64)
    args = ap.parse_args()
    sizes = [s for s in (10, 100, 1024) if s <= args.max_mb] or [args.max_mb]
    grep = shutil.which("grep") or "grep"
    combined = re.compile("|".join(PATTERNS).encode())
    fill = block(4 * 1024 * 1024)
    append = block(args.append_kb * 1024)
    print(f"append per poll: {len(append) / 1024:.0f} KiB")
    print(
        f"{'log size':>9} {'proctor/poll':>13} {'grep whole':>11} {'py re-read':>11}"
        f" {'ratio grep/proctor':>19}"
    )
    with tempfile.TemporaryDirectory() as d:
        log = Path(d) / "server.log"
        log.write_bytes(b"")
        scanner = LogScanner(PATTERNS)
        scanner.add(log)
        scanner.poll()
        for size_mb in sizes:
            with log.open("ab") as fh:
                while fh.tell() < size_mb * 1024 * 1024:
                    fh.write(fill)
            scanner.poll()  # catch up once (a drain that was following all along already has)

            def proctor_poll() -> None:
                with log.open("ab") as fh:
                    fh.write(append)
                scanner.poll()

            def grep_all() -> None:
                subprocess.run(
                    [grep, "-c", "-E", "|".join(PATTERNS), str(log)],
                    stdout=subprocess.DEVNULL,
                    check=False,
                )

            def python_all() -> None:
                with log.open("rb") as fh:
                    while chunk := fh.read(16 * 1024 * 1024):
                        combined.search(chunk)

            p = timed(proctor_poll, 5)
            g = timed(grep_all, 3)
            r = timed(python_all, 3)
            print(
                f"{log.stat().st_size / 2**20:>7.0f}MB {p * 1000:>11.2f}ms {g * 1000:>9.0f}ms "
                f"{r * 1000:>9.0f}ms {g / p:>18.0f}x"
            )


if __name__ == "__main__":
    main()

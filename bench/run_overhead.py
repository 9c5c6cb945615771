"""Overhead of supervision, printed next to its anchor in one run.

1. Start-up: `proctor run -- true` against bare `true` (wall time, median of N).
2. Throughput: a command writing 1 GiB to stdout under `proctor run` (stdout of proctor to
   /dev/null, as a CI job would) against the same command redirected to a file. Both the
   writer's own throughput (what the command feels) and the whole wall time are given.
3. CPU time of one GPU sample (when a GPU is present; else says so).

Run: .venv/bin/python bench/run_overhead.py [--n 10] [--gib 1]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WRITER = r"""
import os, sys, time
total = int(sys.argv[1]); block = b"x" * (1 << 20)
t0 = time.perf_counter(); fd = sys.stdout.fileno(); done = 0
while done < total:
    done += os.write(fd, block)
dt = time.perf_counter() - t0
os.write(2, f"WRITER {done / dt / 1e9:.3f} GB/s\n".encode())
"""


def _proctor(*args: str, runs: Path, **kw: object) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "PROCTOR_RUNS_DIR": str(runs)}
    return subprocess.run(
        [sys.executable, "-m", "proctor.cli.main", *args],
        env=env,
        check=True,
        **kw,  # type: ignore[arg-type]
    )


def timed(fn: object, n: int) -> float:
    samples = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()  # type: ignore[operator]
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def writer_rate(stderr: bytes) -> float:
    found = re.findall(rb"WRITER ([0-9.]+) GB/s", stderr)
    if found:
        return float(found[-1])
    raise RuntimeError(f"writer printed no rate: {stderr[-300:]!r}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=10)
    parser.add_argument("--gib", type=float, default=1.0)
    args = parser.parse_args()
    total = int(args.gib * (1 << 30))
    with tempfile.TemporaryDirectory() as tmp:
        runs = Path(tmp) / "runs"
        bare = timed(lambda: subprocess.run(["true"], check=True), args.n)
        sup = timed(
            lambda: _proctor(
                "run",
                "--gpu-sample",
                "0",
                "--",
                "true",
                runs=runs,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            ),
            args.n,
        )
        print(
            f"start-up   bare true {bare * 1e3:8.1f} ms   proctor run -- true {sup * 1e3:8.1f} ms"
            f"   ratio {sup / bare:8.1f}x   (+{(sup - bare) * 1e3:.0f} ms fixed cost)"
        )

        out = Path(tmp) / "out.bin"
        walls, rates = [], []
        for _ in range(3):
            t0 = time.perf_counter()
            with out.open("wb") as handle:
                r = subprocess.run(
                    [sys.executable, "-c", WRITER, str(total)],
                    stdout=handle,
                    stderr=subprocess.PIPE,
                    check=True,
                )
            walls.append(time.perf_counter() - t0)
            rates.append(writer_rate(r.stderr))
            out.unlink()
        base_wall, base_rate = statistics.median(walls), statistics.median(rates)
        walls, rates = [], []
        for _ in range(3):
            t0 = time.perf_counter()
            _proctor(
                "run",
                "--gpu-sample",
                "0",
                "--name",
                "writer",
                "--",
                sys.executable,
                "-c",
                WRITER,
                str(total),
                runs=runs,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            walls.append(time.perf_counter() - t0)
            logs = sorted(runs.glob("*/writer.log"))
            rates.append(writer_rate(logs[-1].read_bytes()[-200:]))
            for log in logs:
                log.unlink()
        sup_wall, sup_rate = statistics.median(walls), statistics.median(rates)
        gib = total / (1 << 30)
        print(
            f"1 GiB out  to a file: writer {base_rate:.2f} GB/s, wall {base_wall:.2f} s   "
            f"under proctor run: writer {sup_rate:.2f} GB/s, wall {sup_wall:.2f} s"
        )
        print(
            f"           throughput ratio (file / proctor, writer's view) "
            f"{base_rate / sup_rate:.3f}x"
            f"   wall ratio {sup_wall / base_wall:.3f}x for {gib:.2f} GiB (live copy + start-up)"
        )

    from proctor.monitors.gpu import detect_backend

    backend, reason = detect_backend()
    if backend is None:
        print(f"gpu sample  no GPU here: {reason}")
        return
    backend.sample()  # warm: the first call pays the driver's initialisation
    t0, w0 = time.process_time(), time.perf_counter()
    for _ in range(50):
        samples = backend.sample()
    cpu, wall = (time.process_time() - t0) / 50, (time.perf_counter() - w0) / 50
    backend.close()
    print(
        f"gpu sample  {backend.name}: CPU time of one sample {cpu * 1e3:.2f} ms, wall "
        f"{wall * 1e3:.2f} ms ({len(samples)} GPUs); every 3 s that is "
        f"{cpu / 3 * 100:.3f}% of one core"
    )


if __name__ == "__main__":
    main()

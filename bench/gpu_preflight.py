"""What the GPU health preflight costs a run (docs/gpu-health.md).

Anchor: what a run costs without it, the start of a Python interpreter (`python -c pass`,
which the CUDA check pays once) and one `nvidia-smi -q` (the tool a user would run by hand for
the same facts). Measured, each REPEATS times, in alternation: the full preflight (NVML, the
kernel log, the CUDA check in a child process), the counters-only preflight of a client run
(bench, eval), and the anchors. Printed: median and range of each, and the full preflight's
median over each anchor's. On a machine without a GPU the preflight says "no GPU" and the
figure is the cost of finding that out.

    .venv/bin/python bench/gpu_preflight.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from proctor.monitors.gpu_health import one_line, preflight


def timed(action: Callable[[], object]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    cases: dict[str, Callable[[], object]] = {
        "preflight full": lambda: preflight(mode="full"),
        "preflight counters": lambda: preflight(mode="counters"),
        "python -c pass": lambda: subprocess.run([sys.executable, "-c", "pass"], check=True),
    }
    if shutil.which("nvidia-smi"):
        cases["nvidia-smi -q"] = lambda: subprocess.run(
            ["nvidia-smi", "-q"], capture_output=True, check=False
        )
    print(one_line(preflight()))
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(args.repeats):
        for name, action in cases.items():
            times[name].append(timed(action))
    for name, values in times.items():
        print(
            f"{name:>20}: median {statistics.median(values) * 1000:8.1f} ms"
            f"  range {min(values) * 1000:.1f}-{max(values) * 1000:.1f} ms  (n={len(values)})"
        )
    full = statistics.median(times["preflight full"])
    for anchor in [n for n in cases if not n.startswith("preflight")]:
        print(f"preflight full / {anchor}: {full / statistics.median(times[anchor]):.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What reading and building a trace replay costs before the first request leaves.

    .venv/bin/python bench/trace_read.py [--rows 1000000] [--records 2000] [--mean-isl 9000]

In one run: reading a BurstGPT CSV of --rows rows with proctor's strict reader (every row
checked) beside its anchor, the same file through the standard csv module alone (the floor any
CSV reader pays); then building --records Mooncake prompts of about --mean-isl tokens each with
prefix-chained hash ids (as the conversation trace has them), in tokens per second, and the
memory the prompts hold. The prompts are built before the replay starts, so these say how long
a large trace makes the bench wait, and why MAX_TRACE_REQUESTS caps what one bench holds.
"""

from __future__ import annotations

import argparse
import csv
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from proctor.workloads.loadgen.dataset import _WORDS  # noqa: E402
from proctor.workloads.loadgen.trace_workload import Blocks  # noqa: E402
from proctor.workloads.loadgen.tracefiles import BLOCK_TOKENS, read_trace  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--records", type=int, default=2000)
    p.add_argument("--mean-isl", type=int, default=9000)
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "burst.csv"
        with path.open("w") as f:
            f.write("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n")
            f.writelines(
                f"{i / 1000:.3f},ChatGPT,{i % 900 + 1},18,0,API log\n" for i in range(a.rows)
            )
        t = time.perf_counter()
        with path.open(newline="") as f:
            n = sum(1 for _ in csv.reader(f)) - 1
        floor = time.perf_counter() - t
        t = time.perf_counter()
        trace = read_trace(str(path), limit=a.records)
        took = time.perf_counter() - t
        assert trace.kept == n == a.rows
    print(
        f"read {a.rows:,} BurstGPT rows: proctor {took:.2f} s, csv module alone {floor:.2f} s "
        f"(anchor), {took / floor:.1f}x"
    )
    rng = random.Random(0)
    blocks = Blocks(list(_WORDS), 0, 0)
    lens = [max(1, int(rng.expovariate(1 / a.mean_isl))) for _ in range(a.records)]
    t = time.perf_counter()
    size = 0
    for i, n_in in enumerate(lens):
        ids = (0, *range(i * 200, i * 200 + n_in // BLOCK_TOKENS + 1))
        text, _ = blocks.prompt(n_in, ids, "r0", f"r0:{i}")
        size += len(text)
    took = time.perf_counter() - t
    tokens = sum(lens)
    print(
        f"built {a.records:,} prompts, {tokens:,} tokens: {took:.2f} s, "
        f"{tokens / took / 1e6:.2f} M tokens/s, {size / 2**20:.0f} MiB of prompt text "
        f"({size / tokens:.1f} bytes a token)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""`--workers N` scaling: 1, 2, 4, 8 client processes against the emulator on its own cores.

On the 16-core GPU host (the lead's run). This script and bench/emulator need only the stdlib
(and `cc`, else the Python emulator); the client it runs, `python -m proctor.workloads.loadgen`,
imports pydantic and orjson (in .whl), aiohttp and rich (not in .whl; both are in a vLLM
environment), and uvloop when installed (else asyncio; the note column says which:
`fast/uvloop` or `fast/asyncio`):

    python bench/loadgen_workers.py --workers 1,2,4,8 --concurrency 1024

On a 2-core machine (emulator on core 0, every worker on core 1, so no growth is expected):

    .venv/bin/python bench/loadgen_workers.py --quick

Cores: with 12+ allowed cores the emulator gets the last quarter (at most 4) and the clients
up to 8 of the others; with fewer, the emulator gets core 0 and the clients the rest. Each
point runs `python -m proctor.workloads.loadgen --workers N --save-detailed`; the table shows
chunks/s, the speedup against 1 worker, the workers' summed CPU and loop-lag p99 from
metrics.json "client", and whether the merged requests.jsonl has the same form as 1 worker's
(same record keys, every index once, warmups flagged). A point whose chunks/s reached half
the emulator's capacity (measured alone first) is flagged EMU>50%.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from emulator import measure_capacity, start_emulator  # noqa: E402
from loadgen_capacity import proctor_cmd  # noqa: E402


def plan_cores() -> tuple[list[int] | None, list[int] | None]:
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        return None, None
    if len(cores) >= 12:
        n_emu = min(4, len(cores) // 4)
        return cores[:-n_emu][:8], cores[-n_emu:]
    return cores[1:], cores[:1]


def pinned(cmd: list[str], cores: list[int] | None) -> list[str]:
    if not cores or shutil.which("taskset") is None:
        return cmd
    return ["taskset", "-c", ",".join(map(str, cores)), *cmd]


def run_point(
    url: str, workers: int, conc: int, n: int, isl: int, osl: int, cores: list[int] | None
) -> tuple[dict, list[dict]]:
    with tempfile.TemporaryDirectory() as out:
        cmd = [*proctor_cmd(url, out, conc, n, isl, osl, workers), "--save-detailed"]
        r = subprocess.run(
            pinned(cmd, cores), capture_output=True, text=True, cwd=ROOT, timeout=900, check=False
        )
        if r.returncode != 0:
            raise SystemExit(f"--workers {workers} failed ({r.returncode}): {r.stderr[-800:]}")
        doc = json.loads((Path(out) / "metrics.json").read_text())
        recs = [json.loads(line) for line in (Path(out) / "requests.jsonl").open()]
    return doc, recs


def form(recs: list[dict], n: int, warm: int) -> tuple[frozenset[str], bool]:
    keys = frozenset(k for r in recs for k in r)
    same_keys = all(frozenset(r) == keys for r in recs)
    indices = sorted(r["index"] for r in recs)
    ok = same_keys and indices == list(range(n + warm)) and sum(r["warmup"] for r in recs) == warm
    return keys, ok


def scaling_args(doc: str | None, per: int) -> argparse.ArgumentParser:
    """The options this bench and loadgen_scaling.py share (--quick: workers 1,2, c256)."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--workers", default="1,2,4,8")
    ap.add_argument("--concurrency", type=int, default=1024)
    ap.add_argument("--isl", type=int, default=64)
    ap.add_argument("--osl", type=int, default=128)
    ap.add_argument("--per", type=int, default=per, help="requests per unit of concurrency")
    ap.add_argument("--quick", action="store_true", help="workers 1,2, concurrency 256, fewer")
    return ap


def parsed(ap: argparse.ArgumentParser) -> argparse.Namespace:
    a = ap.parse_args()
    if a.quick:
        a.workers, a.concurrency, a.per = "1,2", 256, 8
    return a


def main() -> int:
    ap = scaling_args(__doc__, per=16)
    ap.add_argument("--python-emulator", action="store_true")
    a = parsed(ap)
    counts = [int(x) for x in a.workers.split(",") if x]
    client_cores, emu_cores = plan_cores()
    n = a.concurrency * a.per
    started = time.perf_counter()
    with start_emulator(
        procs=len(emu_cores or [0]), cores=emu_cores, force_python=a.python_emulator
    ) as emu:
        print(
            f"emulator: {emu.describe()}; clients on cores {client_cores}; "
            f"concurrency {a.concurrency}, {n} requests, ISL {a.isl} / OSL {a.osl}",
            flush=True,
        )
        cap = measure_capacity(
            emu,
            concurrency=a.concurrency,
            requests=n,
            osl=a.osl,
            cores=client_cores,
            load_procs=max(1, len(client_cores or [0])),
        )
        print(
            f"  emulator alone ({cap.client}): {cap.chunks_s:,.0f} chunks/s at "
            f"{100 * cap.emu_cores_busy:.0f}% of one core -> capacity "
            f"{cap.per_busy_emulator:,.0f} chunks/s",
            flush=True,
        )
        rows = []
        base_keys = None
        for w in counts:
            doc, recs = run_point(emu.base_url, w, a.concurrency, n, a.isl, a.osl, client_cores)
            keys, ok = form(recs, n, a.concurrency)
            base_keys = base_keys or keys
            rows.append((w, doc, ok and keys == base_keys))
            print(f"  workers {w}: {doc['metrics']['output_throughput']:,.0f} chunks/s", flush=True)
    one = rows[0][1]["metrics"]["output_throughput"]
    print(
        f"\n{'workers':>7} {'chunks/s':>10} {'speedup':>7} {'CPU %':>7} {'lag99 ms':>8} "
        f"{'records':>8}  note"
    )
    for w, doc, ok in rows:
        m, c = doc["metrics"], doc.get("client") or {}
        flag = "EMU>50%" if m["output_throughput"] > 0.5 * cap.per_busy_emulator else ""
        print(
            f"{w:>7} {m['output_throughput']:>10,.0f} {m['output_throughput'] / one:>7.2f} "
            f"{c.get('cpu_percent', 0):>7.0f} {c.get('loop_lag_p99_ms', 0):>8.1f} "
            f"{'same' if ok else 'DIFFER':>8}  {c.get('path', '?')}/{c.get('loop', '?')} {flag}"
        )
    print(
        f"\nspeedup = chunks/s over 1 worker's; CPU % summed over workers (100 = one core); "
        f"records: merged requests.jsonl of the same form as 1 worker's.\n"
        f"took {time.perf_counter() - started:.0f} s"
    )
    return 0 if all(ok for _, _, ok in rows) else 1


if __name__ == "__main__":
    sys.exit(main())

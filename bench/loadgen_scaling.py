"""Why `--workers N` grows as it does: the machine's own ceiling next to the client's figures.

    python bench/loadgen_scaling.py --workers 1,2,4,8 --concurrency 1024

For each N, on the cores loadgen_workers.py uses (emulator on its own cores):
  cpu        N pinned processes running a fixed pure-Python loop (bytes scanning and dict
             updates, like the client's hot path) with no I/O: the speedup the cores give
             Python at all (SMT siblings, shared caches, clocks under load all show here);
  apart      N single-worker clients, each its own `python -m proctor.workloads.loadgen`
             pinned to one core, started together: no coordination between them;
  workers    `--workers N` as a user runs it (the kernel places the workers);
  workers-old  the same with --old-src DIR's proctor (an older `src`), for before/after.
With --rounds R every point is measured R times, interleaved, and the medians printed (the
speedup of each round beside them). Each client row also gives per-worker chunks/s (a
worker's chunks over its own measured window, the mean over workers) and the start/end
spread of the workers' windows, from requests.jsonl: a fall in per-worker speed is the
cores; a wide spread is coordination.
The first lines print the CPU topology (threads per core, siblings) and the clock the
kernel reports during the cpu row.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing as mp
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from statistics import mean, median
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from emulator import start_emulator  # noqa: E402
from loadgen_capacity import proctor_cmd, smt_siblings  # noqa: E402
from loadgen_workers import parsed, pinned, plan_cores, scaling_args  # noqa: E402


def _physical(core: int) -> str:
    """`core`'s physical core, named by its threads (loadgen_capacity.smt_siblings)."""
    return ",".join(map(str, sorted(smt_siblings(core))))


def topology(cores: list[int]) -> str:
    sib = {_physical(c) for c in cores}
    model = ""
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    hyper = "hypervisor" in Path("/proc/cpuinfo").read_text()
    return (
        f"{len(cores)} cores allowed, {len(sib)} physical by the kernel's topology "
        f"(siblings: {' '.join(sorted(sib)[:8])}{' ...' if len(sib) > 8 else ''}); "
        f"{model}; {'virtual machine' if hyper else 'bare metal'}"
    )


def physical_first(cores: list[int]) -> list[int]:
    """`cores` ordered so that each physical core's first thread comes before any sibling."""
    rank: dict[int, int] = {}
    seen: dict[str, int] = {}
    for c in cores:
        key = _physical(c)
        rank[c] = seen.get(key, 0)
        seen[key] = rank[c] + 1
    return sorted(cores, key=lambda c: (rank[c], c))


def clocks(cores: list[int]) -> str:
    vals = []
    for c in cores:
        with contextlib.suppress(OSError, ValueError):
            vals.append(
                int(Path(f"/sys/devices/system/cpu/cpu{c}/cpufreq/scaling_cur_freq").read_text())
                / 1000
            )
    return f"{mean(vals):.0f} MHz" if vals else "clock not exposed"


def _spin(core: int, seconds: float, start: float, out: mp.Queue) -> None:  # type: ignore[type-arg]
    os.sched_setaffinity(0, {core})
    buf = b"".join(b'data: {"choices":[{"text":"x%d"}]}\n\n' % i for i in range(64))
    counts: dict[int, int] = {}
    while time.time() < start:
        pass
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        pos = 0
        while (j := buf.find(b"\n\n", pos)) >= 0:
            counts[j & 63] = counts.get(j & 63, 0) + 1
            pos = j + 2
        n += 1
    out.put(n / (time.perf_counter() - t0))


def cpu_row(n: int, cores: list[int], seconds: float = 2.0) -> tuple[float, float, str]:
    ctx = mp.get_context("spawn")
    out: mp.Queue = ctx.Queue()  # type: ignore[type-arg]
    start = time.time() + 0.5
    procs = [ctx.Process(target=_spin, args=(cores[i], seconds, start, out)) for i in range(n)]
    for p in procs:
        p.start()
    time.sleep(0.5 + seconds / 2)
    clock = clocks(cores[:n])
    rates = [out.get(timeout=30) for _ in procs]
    for p in procs:
        p.join()
    return sum(rates), mean(rates), clock


def loadgen_cmd(
    url: str, out: str, conc: int, n: int, workers: int, a: argparse.Namespace
) -> list[str]:
    return [*proctor_cmd(url, out, conc, n, a.isl, a.osl, workers), "--save-detailed"]


def windows(recs: list[dict[str, Any]]) -> list[tuple[float, float, int]]:
    """(start, end, chunks) of each worker's measured records."""
    by: dict[int, list[dict[str, Any]]] = {}
    for r in recs:
        if not r["warmup"]:
            by.setdefault(r["worker"], []).append(r)
    return [
        (
            min(r["start_time"] for r in rs),
            max(r["end_time"] for r in rs),
            sum(r["chunks"] for r in rs),
        )
        for rs in by.values()
    ]


def summarise(wins: list[tuple[float, float, int]]) -> tuple[float, float, float]:
    total = sum(c for _, _, c in wins) / (max(e for _, e, _ in wins) - min(s for s, _, _ in wins))
    per = mean(c / (e - s) for s, e, c in wins)
    spread = (
        max(s for s, _, _ in wins)
        - min(s for s, _, _ in wins)
        + max(e for _, e, _ in wins)
        - min(e for _, e, _ in wins)
    ) * 1000
    return total, per, spread


def load(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "requests.jsonl").open()]


def client_row(
    url: str, n: int, cores: list[int], a: argparse.Namespace, mode: str
) -> tuple[float, float, float]:
    total_req = a.concurrency * a.per
    env = dict(os.environ)
    if mode.endswith("-old"):
        env["PYTHONPATH"] = os.pathsep.join([str(a.old_src.resolve()), env.get("PYTHONPATH", "")])
    with tempfile.TemporaryDirectory() as tmp:
        if mode == "apart":
            procs, outs = [], []
            for i in range(n):
                out = Path(tmp) / str(i)
                cmd = loadgen_cmd(url, str(out), a.concurrency // n, total_req // n, 1, a)
                procs.append(
                    subprocess.Popen(
                        pinned(cmd, [cores[i]]),
                        cwd=ROOT,
                        env=env,
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.PIPE,
                    )
                )
                outs.append(out)
            for p in procs:
                if p.wait(900) != 0:
                    why = p.stderr.read()[-500:] if p.stderr else b""
                    raise SystemExit(f"apart client failed: {why!r}")
            wins = [w for out in outs for w in windows(load(out))]
        else:
            cmd = loadgen_cmd(url, tmp, a.concurrency, total_req, n, a)
            r = subprocess.run(
                pinned(cmd, cores),
                cwd=ROOT,
                env=env,
                capture_output=True,
                text=True,
                timeout=900,
                check=False,
            )
            if r.returncode != 0:
                raise SystemExit(f"--workers {n} failed: {r.stderr[-500:]}")
            wins = windows(load(Path(tmp)))
    return summarise(wins)


def main() -> int:
    ap = scaling_args(__doc__, per=32)
    ap.add_argument("--modes", default="cpu,apart,workers")
    ap.add_argument("--rounds", type=int, default=1, help="measure each point this many times")
    ap.add_argument("--old-src", type=Path, help="an older proctor's src, for workers-old")
    a = parsed(ap)
    counts = [int(x) for x in a.workers.split(",") if x]
    modes = a.modes.split(",")
    client_cores, emu_cores = plan_cores()
    cores = client_cores or sorted(os.sched_getaffinity(0))
    cores = physical_first(cores)
    print(topology(sorted(os.sched_getaffinity(0))), flush=True)
    print(f"client cores (physical first) {cores}; emulator cores {emu_cores}", flush=True)
    # Every (mode, N) is measured --rounds times, interleaved, and the median kept: this
    # host's cores vary by tens of percent from one minute to the next.
    rounds: dict[str, dict[int, list[tuple[float, float, float]]]] = {m: {} for m in modes}
    clock_at: dict[int, str] = {}
    with start_emulator(procs=len(emu_cores or [0]), cores=emu_cores) as emu:
        print(f"emulator: {emu.describe()}", flush=True)
        for r in range(a.rounds):
            for n in counts:
                if n > len(cores):
                    print(f"  {n} workers: only {len(cores)} client cores, skipped", flush=True)
                    continue
                for m in modes:
                    if m == "cpu":
                        total, per, clock = cpu_row(n, cores)
                        got = (total, per, 0.0)
                        clock_at[n] = clock
                    else:
                        got = client_row(emu.base_url, n, cores, a, m)
                    rounds[m].setdefault(n, []).append(got)
                    print(
                        f"  round {r + 1} {m:>7} x{n}: {got[0]:,.0f}/s, per process "
                        f"{got[1]:,.0f}/s, spread {got[2]:.0f} ms",
                        flush=True,
                    )
    print(f"\nmedians of {a.rounds} round(s)")
    print(
        f"{'mode':>8} {'N':>3} {'total/s':>12} {'speedup':>8} {'per-proc/s':>11} "
        f"{'per vs 1':>8} {'spread ms':>9}  speedups of the rounds"
    )
    for m in modes:
        if counts[0] not in rounds[m]:
            continue
        one = [median(x[i] for x in rounds[m][counts[0]]) for i in range(2)]
        for n, got in sorted(rounds[m].items()):
            total, per, spread = (median(x[i] for x in got) for i in range(3))
            each = " ".join(f"{x[0] / one[0]:.2f}" for x in got)
            print(
                f"{m:>8} {n:>3} {total:>12,.0f} {total / one[0]:>8.2f} {per:>11,.0f} "
                f"{per / one[1]:>8.2f} {spread:>9.0f}  {each}"
            )
    print(
        "\ncpu: loop iterations/s (no I/O); client rows: output chunks/s. speedup = total over "
        "the first N's; per vs 1 = mean per-process speed over the first N's."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The client's timing error against a server whose timings are known: proctor's measured TTFT
and ITL minus what the emulator was told to take, and what the bench says of its own error.

    .venv/bin/python bench/timing_error.py [--concurrency 1,100,500,1000] [--ttft-ms 50]
        [--itl-ms 10] [--isl 32] [--osl 64] [--requests-per-stream 3] [--min-requests 20]
        [--workers 1] [--client-cores 1] [--old-src DIR] [--rounds 1] [--pin] [--timeline]
        [--merges]

--old-src DIR: the `src` of an older proctor (`git archive main src | tar -x -C build/old`),
measured interleaved with this checkout's at each concurrency, so one run prints both.

The emulator (bench/emulator, emu.c when `cc` builds it) waits exactly --ttft-ms before the
first token and --itl-ms between tokens; its own delay is part of the error measured here, so
run it on cores of its own (it takes every core but the client's, whose one core is pinned
with taskset). Per concurrency, in one run: TTFT error mean / p50 / p99 (measured TTFT minus
--ttft-ms, per request, from requests.jsonl), ITL error mean and ITL standard deviation, and the
bench's own estimate of how late its readings were (metrics.json "client".timing). Issue 23's
targets are printed beside them: mean <= 1 ms, p99 <= 5 ms, ITL sd <= 0.5 ms at 1000.
Two more columns for the new client: readdly99, the p99 of how late the event loop read bytes
after the kernel stamped their arrival (what a loop-time stamp adds: the old client's error),
and shared%, the tokens whose read also held the stream's next token (stamped with that later
arrival). emu99: the p99 of the emulator's own delay to the first token (emu.c's, kernel
receive of the request -> first token written, minus --ttft-ms): that much of the TTFT error is
the server's side; emulate%: the tokens emu.c wrote more than half a gap after their due time
(two such tokens of a stream share a read whatever the client does). cpu%: the client's CPU
use (metrics.json "client"), near 100 when its cores are the limit; us/tok: that CPU per token
received (CPU % x the measured requests' span / their tokens), the cost per read that decides
where the cores run out, and a figure that load on a shared machine does not stretch; steal:
the milliseconds the hypervisor gave the client's cores to something else during the run
(/proc/stat), when a virtual machine's core stops with nothing of the client's running.
--pin: this checkout once more (`pin` rows) with each worker on one of the client cores alone
(--client-cores) and the parent on a core of its own;
unpinned, the client's processes share the client cores. --timeline: after each row, each
client process's CPU %, loop lag and involuntary context switches per 0.5 s
(metrics.json "client".timeline). --merges: after each row, the tokens that shared a read
(ITL exactly 0) by their index in the stream and per 10 ms of the run, beside the requests
started and ended in those 10 ms and the tokens emu.c wrote over half a gap late that were due
then (emu.c's GET /emu/late): merges with no late token beside them are the client's, or its
core's. Figures: bench/NOTES.md, *Timing error*.
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "src"))

from client_timeline import spare_core, timeline_lines  # noqa: E402
from emulator import Emulator, start_emulator  # noqa: E402

PYPATH = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
from loadgen_capacity import emulator_cores, pinned, plan_cores, proctor_cmd  # noqa: E402
from proctor.workloads.loadgen.metrics import percentile  # noqa: E402


def measure(
    emu: Emulator,
    conc: int,
    args: argparse.Namespace,
    cores: list[int] | None,
    src: Path,
    label: str,
    pin: list[int] | None = None,
) -> str:
    url = emu.base_url
    n = max(conc * args.requests_per_stream, args.min_requests)
    emu.delay_stats(reset=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(src.resolve()), *PYPATH])}
    with tempfile.TemporaryDirectory() as out:
        cmd = [*proctor_cmd(url, out, conc, n, args.isl, args.osl, args.workers), "--save-detailed"]
        if pin:
            cmd += ["--client-cores", ",".join(map(str, pin))]
        steal0 = steal_ms(pin or cores)
        r = subprocess.run(
            pinned(cmd, pin or cores),
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=900,
            check=False,
            env=env,
        )
        stolen = steal_ms(pin or cores) - steal0
        if r.returncode != 0:
            raise SystemExit(f"proctor failed at {conc} ({r.returncode}): {r.stderr[-800:]}")
        recs = [json.loads(line) for line in (Path(out) / "requests.jsonl").open()]
        doc = json.loads((Path(out) / "metrics.json").read_text())
    own = emu.delay_stats() or {}
    ok = [x for x in recs if x["success"] and not x["warmup"]]
    ttft_err = [(x["ttft"] - args.ttft_ms / 1000) * 1000 for x in ok]
    itls = [g * 1000 for x in ok for g in x["itl"]]
    client = doc.get("client") or {}
    timing = client.get("timing") or {}
    row = (
        f"{label:>4} {conc:>6} {len(ok):>6} {statistics.fmean(ttft_err):>9.2f} "
        f"{percentile(ttft_err, 50):>8.2f} {percentile(ttft_err, 99):>8.2f} "
        f"{statistics.fmean(itls) - args.itl_ms:>9.3f} {statistics.pstdev(itls):>7.3f} "
        f"{timing.get('reading_late_p50_ms', float('nan')):>9.3f} "
        f"{timing.get('reading_late_p99_ms', float('nan')):>9.3f} "
        f"{timing.get('loop_read_delay_p99_ms', float('nan')):>9.3f} "
        f"{100 * timing.get('tokens_sharing_a_read_fraction', float('nan')):>7.3f} "
        f"{own.get('p99_us', float('nan')) / 1000:>6.2f} "
        f"{100 * own.get('tokens_late', math.nan) / max(1, own.get('tokens', 0)):>7.3f} "
        f"{client.get('cpu_percent', float('nan')):>5.0f} {us_per_token(recs, client):>6.1f} "
        f"{stolen:>6.0f}"
    )
    if args.timeline:
        row += "\n" + "\n".join(timeline_lines(doc))
    if args.merges:
        row += "\n" + "\n".join(merge_lines(recs, emu.late_bins()))
    return row


def merge_lines(recs: list[dict], emu_late: dict[int, int] | None = None) -> list[str]:
    """Where the tokens that shared a read sit: by their index in the stream, and per 10 ms
    of the run beside the requests started and ended then (a lump of endings and starts in
    a closed loop started at once, or a stall of the whole client, read apart) and the
    tokens emu.c wrote over half a gap late, by their due time (`emu_late`, its /emu/late:
    a stretch of merges with none of those is the client's or its core's). Bins are
    CLOCK_MONOTONIC seconds x 100, floored, as emu.c's (the records' perf_counter is that
    clock); printed as seconds from the first start."""
    late = collections.Counter(emu_late or {})
    b0 = int(min(x["start_time"] for x in recs) * 100)
    by_index: collections.Counter[int] = collections.Counter()
    merged: collections.Counter[int] = collections.Counter()
    tokens: collections.Counter[int] = collections.Counter()
    starts = collections.Counter(int(x["start_time"] * 100) for x in recs)
    ends = collections.Counter(int(x["end_time"] * 100) for x in recs)
    for x in recs:
        if not x["success"] or x["warmup"]:
            continue
        t = x["start_time"] + x["ttft"]
        tokens[int(t * 100)] += 1
        for i, gap in enumerate(x["itl"]):
            t += gap
            tokens[int(t * 100)] += 1
            if gap == 0.0:  # stamped with the next token's arrival (metrics.json's count)
                by_index[i] += 1
                merged[int(t * 100)] += 1
    near = {m - d for m in merged for d in (0, 1)}  # a late token arrives after its due time
    emu_note = (
        ""
        if emu_late is None
        else f"; emu.c's late tokens: {sum(late[b] for b in late if b >= b0)}, "
        f"{sum(late[b] for b in near)} of them due in or just before a 10 ms with merges"
    )
    if not merged:
        return ["  merged tokens: none" + emu_note]
    lines = [
        "  merged tokens by index in the stream: "
        + ", ".join(f"{i}: {n}" for i, n in sorted(by_index.items()))
        + emu_note,
        "  per 10 ms with merges (s: starts / ends / tokens / merged / emu late):",
    ]
    for b in sorted(merged):
        lines.append(
            f"    {(b - b0) / 100:6.2f}: {starts[b]} / {ends[b]} / {tokens[b]} / {merged[b]} / "
            f"{late[b]}"
        )
    return lines


def steal_ms(cores: list[int] | None) -> float:
    """Milliseconds the hypervisor ran something else on `cores` (all CPUs when None), summed
    (/proc/stat's steal): on a shared virtual machine a client core can stop for a while with
    nothing of its own running, and every token then waiting in the kernel shares a read."""
    want = {f"cpu{c}" for c in cores} if cores else {"cpu"}
    total = 0
    try:
        for line in Path("/proc/stat").read_text().splitlines():
            f = line.split()
            if f and f[0] in want and len(f) > 8:
                total += int(f[8])
    except OSError:
        return math.nan
    return total * 1000 / os.sysconf("SC_CLK_TCK")


def us_per_token(recs: list[dict], client: dict) -> float:
    """The client's CPU microseconds per token it received over the measured part: CPU % x
    the span of the measured requests / their tokens. CPU time is what load on the host does
    not stretch, so this compares clients on a shared machine where the timings cannot."""
    meas = [x for x in recs if not x["warmup"]]
    tokens = sum(x["chunks"] for x in meas)
    if not tokens or "cpu_percent" not in client:
        return float("nan")
    span = max(x["end_time"] for x in meas) - min(x["start_time"] for x in meas)
    return client["cpu_percent"] / 100 * span / tokens * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--concurrency", default="1,100,500,1000")
    ap.add_argument("--ttft-ms", type=float, default=50.0)
    ap.add_argument("--itl-ms", type=float, default=10.0)
    ap.add_argument("--isl", type=int, default=32)
    ap.add_argument("--osl", type=int, default=64)
    ap.add_argument("--requests-per-stream", type=int, default=3)
    ap.add_argument("--min-requests", type=int, default=20, help="at least this many per point")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--client-cores", type=int, default=1)
    ap.add_argument("--old-src", type=Path, default=None)
    ap.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="measure the whole list this many times (at the edge of a core the figures move "
        "from one run to the next: bench/NOTES.md)",
    )
    ap.add_argument("--pin", action="store_true", help="also run this checkout pinned")
    ap.add_argument("--timeline", action="store_true", help="print each process's timeline")
    ap.add_argument(
        "--merges",
        action="store_true",
        help="print where the tokens that shared a read sit (index in the stream, time)",
    )
    a = ap.parse_args()
    client, emu_cores = plan_cores()
    all_cores = sorted(os.sched_getaffinity(0))
    if client is not None and a.client_cores > 1 and len(all_cores) > a.client_cores + 1:
        # The client's cores from 1 up (as loadgen_rate.py), the emulator up to 8 of the rest.
        client = all_cores[1 : 1 + a.client_cores]
        emu_cores = emulator_cores(client, all_cores)
    codes: list[tuple[str, Path, list[int] | None]] = [("new", ROOT / "src", None)]
    if a.old_src:
        codes.insert(0, ("old", a.old_src, None))
    if a.pin and client and len(client) >= a.workers:
        spare = spare_core(client + (emu_cores or []), sorted(os.sched_getaffinity(0)))
        codes.append(("pin", ROOT / "src", client + ([spare] if spare is not None else [])))
    with start_emulator(
        ttft_ms=a.ttft_ms, itl_ms=a.itl_ms, procs=len(emu_cores or [0]), cores=emu_cores
    ) as emu:
        print(
            f"emulator: {emu.describe()}; TTFT {a.ttft_ms:g} ms, ITL {a.itl_ms:g} ms; "
            f"client cores {client}, emulator cores {emu_cores}, workers {a.workers}"
        )
        print(
            "code   conc     ok  ttft err  ttft p50  ttft p99  itl err   itl sd  late p50  "
            "late p99 readdly99 shared%  emu99 emulate%  cpu% us/tok  steal\n"
            "(ms; late = the bench's own estimate of its error, readdly99 = p99 of how late "
            "the loop read bytes after they arrived, shared% = tokens whose read also held the "
            "next one, emu99 = p99 of the emulator's own delay to the first token, "
            "emulate% = tokens the emulator wrote "
            "more than half a gap late (two such of a stream share a read whatever the client "
            "does), cpu% = the client's CPU use, us/tok = its CPU microseconds per token "
            "received, steal = ms the hypervisor took the client's cores for other work)"
        )
        for r in range(a.rounds):
            if a.rounds > 1:
                print(f"round {r + 1} of {a.rounds}", flush=True)
            for conc in (int(c) for c in a.concurrency.split(",")):
                for label, src, pin in codes:
                    print(measure(emu, conc, a, client, src, label, pin), flush=True)
    print(
        "targets (issue 23): ttft err mean <= 1, p99 <= 5 at every concurrency; itl sd <= 0.5 "
        "at 1000"
    )


if __name__ == "__main__":
    main()

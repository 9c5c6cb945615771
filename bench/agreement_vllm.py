"""Agreement of proctor's load generator with vLLM's own `vllm bench serve`, on real vLLM.

Anchor: vLLM's client. Both clients run against one vLLM-for-CPU server (SmolLM2-135M, the
test-engine install: .ci/setup-engines.sh) with the same settings: random prompts of exactly
ISL tokens, OSL output tokens with ignore_eos, temperature 0, the same number of prompts,
concurrency and warm-ups. Runs alternate (vllm, proctor, vllm, proctor, ...) so a drift of the
machine hits both. Printed: total token throughput and mean TPOT per run; per client and
metric the mean, standard deviation and range over the repeats; the ratio of the means and
the per-pair ratios (run i of proctor over run i of vLLM: mean and spread), and whether the
difference of the means is within the noise (2 standard errors of the difference). The aim:
agreement within 5% on total throughput and mean TPOT.

    .venv/bin/python bench/agreement_vllm.py [--isl 64 --osl 32 --num-prompts 16
        --concurrency 4 --repeats 5] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))

from tests.infra.engines import engine_info, free_port, start_vllm  # noqa: E402

from proctor.results import parse_string  # noqa: E402

METRICS = (
    "total_token_throughput",
    "output_throughput",
    "mean_tpot_ms",
    "mean_ttft_ms",
    "mean_itl_ms",
)


def run_vllm(
    python: Path, tokenizer: Path, base_url: str, model: str, a: argparse.Namespace, out: Path
) -> dict[str, float]:
    cmd = [
        str(python),
        str(ROOT / "tests" / "infra" / "vllm_bench_shim.py"),
        "bench",
        "serve",
        "--backend",
        "vllm",
        "--base-url",
        base_url,
        "--model",
        model,
        "--tokenizer",
        str(tokenizer),
        "--dataset-name",
        "random",
        "--random-input-len",
        str(a.isl),
        "--random-output-len",
        str(a.osl),
        "--random-range-ratio",
        "0",
        "--num-prompts",
        str(a.num_prompts),
        "--max-concurrency",
        str(a.concurrency),
        "--ignore-eos",
        "--temperature",
        "0",
        "--num-warmups",
        str(a.concurrency),
        "--seed",
        "0",
        "--disable-tqdm",
        "--percentile-metrics",
        "ttft,tpot,itl,e2el",
    ]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"}
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)
    (out / f"vllm-{time.time_ns()}.log").write_text(r.stdout + r.stderr)
    if r.returncode != 0:
        tail = (r.stdout + r.stderr)[-800:]
        raise SystemExit(f"vllm bench serve failed ({r.returncode}): {tail}")
    return parse_string(r.stdout).values()


def run_proctor(base_url: str, model: str, a: argparse.Namespace, out: Path) -> dict[str, float]:
    with tempfile.TemporaryDirectory(dir=out) as d:
        cmd = [
            sys.executable,
            "-m",
            "proctor.workloads.loadgen",
            "--base-url",
            base_url,
            "--model",
            model,
            "--output-dir",
            d,
            "--isl",
            str(a.isl),
            "--osl",
            str(a.osl),
            "--range-ratio",
            "0",
            "--num-prompts",
            str(a.num_prompts),
            "--concurrency",
            str(a.concurrency),
            "--num-warmups",
            str(a.concurrency),
            "--temperature",
            "0",
            "--seed",
            "0",
            "--no-progress",
        ]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=ROOT)
        if r.returncode != 0:
            raise SystemExit(f"proctor loadgen failed ({r.returncode}): {r.stderr[-800:]}")
        text = (Path(d) / "metrics.json").read_text()
        (out / f"proctor-{time.time_ns()}.json").write_text(text)  # kept for diagnosis
        doc = json.loads(text)
    values = {k: float(v) for k, v in doc["metrics"].items() if isinstance(v, (int, float))}
    if isinstance(doc.get("client"), dict):
        values["client_cpu_percent"] = float(doc["client"]["cpu_percent"])
    return values


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--isl", type=int, default=64)
    ap.add_argument("--osl", type=int, default=32)
    ap.add_argument("--num-prompts", type=int, default=16)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--keep", type=Path, help="keep logs here (default: a temp dir)")
    a = ap.parse_args()
    info = engine_info()  # pytest.skip() outside pytest raises: say so plainly instead
    out = a.keep or Path(tempfile.mkdtemp(prefix="agreement-"))
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    server = start_vllm(free_port(), out / "vllm-server.log", info)
    print(
        f"vLLM {info.vllm_version} ready in {server.ready_s:.0f} s at {server.base_url}; "
        f"ISL {a.isl} OSL {a.osl}, {a.num_prompts} prompts, concurrency {a.concurrency}, "
        f"{os.cpu_count()} cores",
        flush=True,
    )
    runs: dict[str, list[dict[str, float]]] = {"vllm": [], "proctor": []}
    try:
        for i in range(a.repeats):
            for client in ("vllm", "proctor"):
                t0 = time.perf_counter()
                if client == "vllm":
                    v = run_vllm(
                        info.vllm_python, info.model_dir, server.base_url, server.model, a, out
                    )
                else:
                    v = run_proctor(server.base_url, server.model, a, out)
                runs[client].append(v)
                print(
                    f"  run {i + 1} {client:<8} total {v['total_token_throughput']:8.2f} tok/s"
                    f"  mean TPOT {v['mean_tpot_ms']:7.2f} ms  completed {v['completed']:.0f}"
                    f"  ({time.perf_counter() - t0:.0f} s)",
                    flush=True,
                )
    finally:
        server.stop()

    print()
    return report(runs, started, out)


def _stats(xs: list[float]) -> tuple[float, float, float, float]:
    """mean, sample standard deviation (0 for one value), min, max."""
    sd = statistics.stdev(xs) if len(xs) > 1 else 0.0
    return statistics.fmean(xs), sd, min(xs), max(xs)


def report(runs: dict[str, list[dict[str, float]]], started: float, out: Path) -> int:
    print(
        f"{'metric':<24} {'vllm: mean +- sd (min-max)':>34} {'proctor: mean +- sd (min-max)':>34}"
        f" {'ratio':>6} {'pairs: mean +- sd':>18}  noise"
    )
    worst = 0.0
    for name in METRICS:
        v = [r[name] for r in runs["vllm"]]
        p = [r[name] for r in runs["proctor"]]
        mv, sv, lv, hv = _stats(v)
        mp, sp, lp, hp = _stats(p)
        ratio = mp / mv if mv else float("nan")
        pairs = [b / a for a, b in zip(v, p, strict=False) if a]
        pm, ps, _, _ = _stats(pairs) if pairs else (float("nan"), 0.0, 0.0, 0.0)
        se = (sv**2 / len(v) + sp**2 / len(p)) ** 0.5
        noise = "within" if abs(mp - mv) <= 2 * se else "beyond"
        if name in ("total_token_throughput", "mean_tpot_ms"):
            worst = max(worst, abs(ratio - 1))
        print(
            f"{name:<24} {f'{mv:.2f} +- {sv:.2f} ({lv:.1f}-{hv:.1f})':>34} "
            f"{f'{mp:.2f} +- {sp:.2f} ({lp:.1f}-{hp:.1f})':>34} {ratio:>6.3f} "
            f"{f'{pm:.3f} +- {ps:.3f}':>18}  {noise}"
        )
    cpu = [r.get("client_cpu_percent") for r in runs["proctor"]]
    if any(c is not None for c in cpu):
        print(
            f"\nproctor's own CPU per run (% of one core): "
            f"{', '.join(f'{c:.0f}' for c in cpu if c is not None)}"
        )
    print(
        f"\nlargest disagreement of the means on total tok/s and mean TPOT: {worst:.1%} "
        f"({'within' if worst <= 0.05 else 'OUTSIDE'} 5%); {len(runs['vllm'])} runs each; "
        f"noise: the difference of the means against 2 standard errors; took "
        f"{time.perf_counter() - started:.0f} s; logs in {out}"
    )
    return 0 if worst <= 0.05 else 1


if __name__ == "__main__":
    sys.exit(main())

"""On the GPU machine: NVML power, SM clock and temperature in gpu.csv under a CUDA load, and a
bench against `transformers serve` on cuda that gives energy per output token.

Run there:  python -m pytest -q -s -m gpu tests/monitors/test_energy_gpu.py
The FIGURE lines are the measured figures (power, idle, J/token) for the issue's closing note.
"""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.cli.test_flow_gpu import gpu_model  # noqa: F401 - fixture
from tests.helpers import log_tails, proctor

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(900)]

LOAD = """
import sys, time, torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
end = time.time() + float(sys.argv[1])
while time.time() < end:
    for _ in range(20):
        a = (a @ a).clamp_(-1, 1)
    torch.cuda.synchronize()
"""


def test_nvml_power_clock_temperature_rise_under_cuda_load(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available() or shutil.which("nvidia-smi") is None:
        pytest.skip("needs torch with CUDA and nvidia-smi")
    from proctor.monitors.gpu import GpuSampler, NvmlBackend

    path = tmp_path / "gpu.csv"
    sampler = GpuSampler(path, interval_s=0.25, backend=NvmlBackend())
    sampler.start()
    time.sleep(2.0)  # idle
    subprocess.run([sys.executable, "-c", LOAD, "6"], check=True, timeout=120)
    sampler.stop()
    rows = [r for r in csv.DictReader(path.open()) if r["index"] == "0"]
    power = [float(r["power_w"]) for r in rows if r["power_w"]]
    clocks = [float(r["sm_clock_mhz"]) for r in rows if r["sm_clock_mhz"]]
    temps = [float(r["temperature_c"]) for r in rows if r["temperature_c"]]
    util = [float(r["utilization_pct"]) for r in rows if r["utilization_pct"]]
    print(
        f"FIGURE nvml idle_w={power[0]:.1f} peak_w={max(power):.1f} "
        f"sm_clock_max={max(clocks):.0f}MHz temp_max={max(temps):.0f}C util_max={max(util):.0f}%"
    )
    assert power and min(power) > 0 and max(power) > power[0] + 50  # the load drew power
    assert clocks and max(clocks) > 0 and temps and max(temps) > 0 and max(util) >= 50


def test_bench_energy_per_token_on_transformers_serve(
    gpu_model: Path,
    isolated_runs: Path,
) -> None:
    port = "18932"
    bench = (
        f"{sys.executable} -m proctor.workloads.loadgen --base-url http://127.0.0.1:{port} "
        f"--model {gpu_model} --no-ignore-eos --isl 64 --osl 64 --concurrency 4 "
        "--num-prompts 32 --num-warmups 4 --tokenizer-mode approx --gpu-sample 0.25 "
        "--min-requests 16 --min-window 5 --no-progress"
    )
    result = proctor(
        "flow",
        "--engine",
        "transformers",
        "--model",
        str(gpu_model),
        "--port",
        port,
        "--gpu-sample",
        "1",
        "--poll",
        "2s",
        "--ready-timeout",
        "5m",
        "--workload-cmd",
        bench,
        "--json",
        "--",
        "--device",
        "cuda",
        timeout=840,
    )
    assert result.returncode == 0, result.stderr[-3000:] + log_tails(isolated_runs)
    flow = json.loads(result.stdout)
    workload = {s["step"]: s for s in flow["steps"]}["workload"]["run_id"]
    doc = json.loads((isolated_runs / workload / "metrics.json").read_text())
    energy = doc["energy"]
    print(f"FIGURE energy {json.dumps(energy)}")
    print(f"FIGURE server {json.dumps(doc['server'].get('note') or doc['server'])}")
    print(f"FIGURE validity {doc['validity']['verdict']} {doc['validity']['reasons']}")
    assert energy["available"] is True, energy
    assert energy["mean_power_w"] > 0 and energy["idle_power_w"] > 0
    assert energy["gross_j_per_output_token"] > 0
    assert energy["j_per_output_token"] >= 0
    assert doc["metrics"]["energy_per_output_token_j"] == energy["j_per_output_token"]
    rows = list(csv.DictReader((isolated_runs / workload / "gpu.csv").open()))
    assert rows and all(float(r["power_w"]) > 0 for r in rows if r["power_w"])
    assert doc["server"]["available"] is False  # transformers serve has no /metrics

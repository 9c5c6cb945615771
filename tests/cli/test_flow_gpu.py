"""On the GPU machine: `proctor flow` with `transformers serve` on cuda serving a model built
there; gpu.csv shows memory rise at start and fall at stop; stop returns memory to baseline."""

from __future__ import annotations

import csv
import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO, log_tails, proctor

pytestmark = pytest.mark.gpu

BUILD = """
import sys, torch
from transformers import AutoModelForCausalLM, LlamaConfig
cfg = LlamaConfig(hidden_size=2048, intermediate_size=5632, num_hidden_layers=16,
                  num_attention_heads=16, num_key_value_heads=16, vocab_size=49152,
                  max_position_embeddings=2048, torch_dtype="bfloat16")
with torch.device("cuda"):
    model = AutoModelForCausalLM.from_config(cfg, torch_dtype=torch.bfloat16)
model.save_pretrained(sys.argv[1])
"""

WORKLOAD = """
import httpx, sys
for i in range(4):
    r = httpx.post(sys.argv[1] + "/v1/chat/completions", timeout=120, json={
        "model": sys.argv[2], "max_tokens": 16,
        "messages": [{"role": "user", "content": "Say hello %d" % i}]})
    print(r.status_code, r.text[:120], flush=True)
    r.raise_for_status()
"""


@pytest.fixture
def gpu_model(tmp_path: Path) -> Path:
    if shutil.which("nvidia-smi") is None or shutil.which("transformers") is None:
        pytest.skip("not the GPU machine (needs nvidia-smi and transformers serve)")
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device")
    tokenizer = Path(os.environ.get("PROCTOR_GPU_TOKENIZER", REPO / ".gpu/tok"))
    if not tokenizer.is_dir():
        pytest.skip(f"no tokenizer files at {tokenizer}")
    model = tmp_path / "llama-0.8b"
    import subprocess

    subprocess.run([sys.executable, "-c", BUILD, str(model)], check=True, timeout=300)
    for f in tokenizer.iterdir():
        shutil.copy(f, model / f.name)
    (Path.home() / ".cache/huggingface/hub").mkdir(parents=True, exist_ok=True)
    return model


def test_flow_transformers_serve_on_cuda(gpu_model: Path, isolated_runs: Path) -> None:
    port = "18931"
    workload = f"{sys.executable} -c '{WORKLOAD}' http://127.0.0.1:{port} {gpu_model}"
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
        workload,
        "--json",
        "--",
        "--device",
        "cuda",
        timeout=540,
    )
    print(result.stderr[-3000:])
    assert result.returncode == 0, result.stderr[-3000:] + log_tails(isolated_runs)
    flow = json.loads(result.stdout)
    steps = {s["step"]: s for s in flow["steps"]}
    assert [s["exit_code"] for s in flow["steps"]] == [0] * len(flow["steps"])
    server = isolated_runs / steps["start"]["run_id"]
    rows = [r for r in csv.DictReader((server / "gpu.csv").open()) if r["index"] == "0"]
    used = [float(r["memory_used_mib"]) for r in rows]
    stop = steps["teardown"]["stop"]
    baseline = float(stop["baseline_mib"]["0"])
    after = float(stop["memory_now_mib"]["0"])
    peak = max(used)
    print(
        f"FIGURE baseline={baseline:.0f}MiB peak={peak:.0f}MiB first={used[0]:.0f}MiB "
        f"last_sample={used[-1]:.0f}MiB after_stop={after:.0f}MiB samples={len(used)} "
        f"ready_s={steps['ready'].get('elapsed_s')}"
    )
    assert peak >= baseline + 1000, "memory did not rise while serving"
    assert stop["memory_ok"] is True
    assert after <= baseline + 256
    report_dir = os.environ.get("PROCTOR_GPU_REPORT_DIR")
    if report_dir:
        # The HTML report of this real GPU run, for a person (or a browser test) to look at.
        out = Path(report_dir) / "gpu-flow-report.html"
        made = proctor("report", flow["run_id"], "-o", str(out))
        assert made.returncode == 0, made.stderr

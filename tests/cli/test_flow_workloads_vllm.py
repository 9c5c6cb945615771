"""ATOM's workflow on a real engine: one vLLM-for-CPU server (SmolLM2-135M), GSM8K accuracy
then a small benchmark, as a flow file's workload list; one report for the whole flow."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import GSM8K_DATA, proctor
from tests.infra.engines import engine_info, free_port

pytestmark = [pytest.mark.engine, pytest.mark.slow]


def test_gsm8k_then_bench_on_real_vllm(isolated_runs: Path, tmp_path: Path) -> None:
    info = engine_info()
    port = free_port()
    path = tmp_path / "flow.toml"
    path.write_text(f"""
[flow]
engine = "vllm"
model = "{info.model_dir}"
python = "{info.vllm_python}"
served_model_name = "{info.served_model_name}"
port = {port}
poll = "2s"
stuck_polls = 30
ready_timeout = "5m"
env = ["VLLM_CPU_KVCACHE_SPACE=1"]
extra = ["--max-model-len", "2048", "--enforce-eager", "--dtype", "float32"]

[[flow.workload]]
eval = {{ task = "gsm8k", limit = 4, fewshot = 1, num_concurrent = 2, data = "{GSM8K_DATA}" }}

[[flow.workload]]
bench = {{ isl = 32, osl = 16, concurrency = 2, num_prompts = 8, num_warmups = 1 }}
""")
    result = proctor(
        "flow", "--file", str(path), "--json", env={"HF_HOME": str(tmp_path / "hf")}, timeout=900
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    flow = json.loads(result.stdout)
    rows = flow["workload_runs"]
    assert [(r["kind"], r["exit_code"]) for r in rows] == [("eval", 0), ("bench", 0)]
    gsm = json.loads((isolated_runs / rows[0]["run_id"] / "metrics.json").read_text())
    bench = json.loads((isolated_runs / rows[1]["run_id"] / "metrics.json").read_text())
    assert gsm["metrics"]["n_samples"] == 4
    assert bench["metrics"]["completed"] == 8 and bench["metrics"]["failed"] == 0
    print(
        f"FIGURE gsm8k flexible {gsm['metrics']['exact_match_flexible_extract']}, "
        f"bench output {bench['metrics']['output_throughput']:.1f} tok/s"
    )
    report = proctor("report", flow["run_id"], "--json")
    assert report.returncode == 0, report.stderr
    shown = json.loads(report.stdout)
    assert shown["kind"] == "flow" and {r["run_id"] for r in rows} <= set(shown["runs"])

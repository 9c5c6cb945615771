"""The real engines start, serve SmolLM2 and stop cleanly (needs .ci/setup-engines.sh)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.infra.engines import (
    REPO_ROOT,
    EngineServer,
    engine_info,
    free_port,
    start_vllm,
    tf_server,  # noqa: F401  (session fixture)
    vllm_server,  # noqa: F401  (session fixture)
)

pytestmark = [pytest.mark.engine, pytest.mark.slow]


def _stream_completion(server: EngineServer, path: str, body: dict[str, object]) -> list[str]:
    """POST a streaming request; return the `data:` payloads in order."""
    payloads = []
    with (
        httpx.Client(timeout=60) as client,
        client.stream("POST", f"{server.base_url}{path}", json=body) as response,
    ):
        assert response.status_code == 200, response.read()
        for line in response.iter_lines():
            if line.startswith("data:"):
                payloads.append(line[5:].strip())
    return payloads


def test_vllm_lists_model_and_streams(vllm_server: EngineServer) -> None:
    models = httpx.get(f"{vllm_server.base_url}/v1/models", timeout=10).json()
    assert [m["id"] for m in models["data"]] == ["smollm2"]

    payloads = _stream_completion(
        vllm_server,
        "/v1/completions",
        {
            "model": "smollm2",
            "prompt": "The capital of France is",
            "max_tokens": 8,
            "temperature": 0,
            "stream": True,
            "stream_options": {"include_usage": True},
        },
    )
    assert payloads[-1] == "[DONE]"
    chunks = [json.loads(p) for p in payloads[:-1]]
    text = "".join(c["choices"][0]["text"] for c in chunks if c.get("choices"))
    usage = next(c["usage"] for c in reversed(chunks) if c.get("usage"))
    assert text.strip()
    assert 1 <= usage["completion_tokens"] <= 8
    assert usage["prompt_tokens"] >= 5


def test_vllm_tokenize_and_metrics(vllm_server: EngineServer) -> None:
    tok = httpx.post(
        f"{vllm_server.base_url}/tokenize",
        json={"model": "smollm2", "prompt": "hello world hello world"},
        timeout=10,
    ).json()
    assert tok["count"] == len(tok["tokens"]) >= 4
    metrics = httpx.get(f"{vllm_server.base_url}/metrics", timeout=10).text
    assert "vllm:num_requests_running" in metrics


def test_vllm_chat_completion(vllm_server: EngineServer) -> None:
    reply = httpx.post(
        f"{vllm_server.base_url}/v1/chat/completions",
        json={
            "model": "smollm2",
            "messages": [{"role": "user", "content": "Say hello."}],
            "max_tokens": 8,
            "temperature": 0,
        },
        timeout=60,
    ).json()
    assert reply["choices"][0]["message"]["content"].strip()
    assert reply["usage"]["completion_tokens"] <= 8


# Runs the shim (`vllm bench serve ...`: vLLM's CLI imports every command module, its `preload`
# command with vLLM's kernels among them) with torch's CPU-flag probes, the ones vLLM's
# CpuPlatform reads, answering "no AVX-512"; then prints the vLLM kernel libraries mapped into
# the process. One vLLM client process proves both the result block and the kernel choice.
_SHIM_KERNEL_PROBE = r"""
import json, os, runpy, sys
import torch
torch.cpu._is_avx512_supported = lambda: False
torch.cpu._is_avx512_bf16_supported = lambda: False
shim = sys.argv[1]
sys.argv = [shim] + sys.argv[2:]
code = 0
try:
    runpy.run_path(shim, run_name="__main__")
except SystemExit as exc:
    code = exc.code
from vllm import platforms
with open("/proc/self/maps") as maps:
    libs = {os.path.basename(line.split()[-1]) for line in maps if "/vllm/_C" in line}
print("PROBE " + json.dumps({"code": code, "libs": sorted(libs),
                             "platform": type(platforms.current_platform).__name__}))
"""


def test_vllm_bench_shim_prints_result_block(vllm_server: EngineServer, tmp_path: Path) -> None:
    """vLLM's own client runs through the shim and loads only kernels the CPU can run.

    On a CPU without AVX-512 the shim must load `_C_AVX2`, never the AVX-512 `_C` (it died of
    SIGILL). The CPU flags are faked where vLLM's chooser reads them, so this holds on any
    x86-64 CPU.
    """
    info = engine_info()
    result_file = tmp_path / "bench.json"
    shim = str(REPO_ROOT / "tests/infra/vllm_bench_shim.py")
    argv = [str(info.vllm_python), "-c", _SHIM_KERNEL_PROBE, shim, "bench"]
    argv += ["serve", "--backend", "vllm", "--base-url", vllm_server.base_url]
    argv += ["--model", "smollm2", "--tokenizer", str(info.model_dir)]
    argv += ["--dataset-name", "random", "--random-input-len", "16", "--random-output-len", "4"]
    argv += ["--num-prompts", "2", "--max-concurrency", "2", "--ignore-eos", "--save-result"]
    argv += ["--result-dir", str(tmp_path), "--result-filename", result_file.name]
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env)
    out = proc.stdout[-3000:] + proc.stderr[-3000:]
    # -4 is SIGILL: an instruction this CPU lacks (AVX-512 kernels on an AVX2-only CPU).
    assert proc.returncode == 0, f"exit {proc.returncode}:\n{out}"
    line = next(x for x in proc.stdout.splitlines() if x.startswith("PROBE "))
    probe = json.loads(line[len("PROBE ") :])
    assert probe["code"] in (0, None), out
    assert probe["platform"] == "CpuPlatform"
    assert probe["libs"] == ["_C_AVX2.abi3.so"]
    assert "Serving Benchmark Result" in proc.stdout
    assert re.search(r"^Successful requests:\s+2\s*$", proc.stdout, re.MULTILINE)
    saved = json.loads(result_file.read_text())
    assert saved["completed"] == 2
    assert saved["total_output_tokens"] == 8


def test_vllm_wrong_model_path_exits_fast(tmp_path: Path) -> None:
    info = engine_info()
    bad = type(info)(**{**info.__dict__, "model_dir": tmp_path / "no-such-model"})
    with pytest.raises(RuntimeError, match="exited with"):
        start_vllm(free_port(), tmp_path / "bad.log", info=bad, timeout_s=120)


def test_transformers_serve_completion(tf_server: EngineServer) -> None:
    reply = httpx.post(
        f"{tf_server.base_url}/v1/chat/completions",
        json={
            "model": tf_server.model,
            "messages": [{"role": "user", "content": "Say hello."}],
            "max_tokens": 8,
        },
        timeout=120,
    )
    assert reply.status_code == 200, reply.text
    assert reply.json()["choices"][0]["message"]["content"].strip()


if __name__ == "__main__":  # pragma: no cover - manual use
    sys.exit(pytest.main([__file__, "-v"]))

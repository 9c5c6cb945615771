"""The flow against a real engine: vLLM for CPU serving SmolLM2-135M (see .ci/setup-engines.sh)."""

from __future__ import annotations

import json
from pathlib import Path

import psutil
import pytest

from tests.helpers import proctor
from tests.infra.engines import engine_info, free_port

pytestmark = [pytest.mark.engine, pytest.mark.slow]


def test_flow_with_real_vllm(isolated_runs: Path, tmp_path: Path) -> None:
    info = engine_info()
    port = free_port()
    body = json.dumps(
        {
            "model": info.served_model_name,
            "prompt": "The capital of France is",
            "max_tokens": 16,
            "stream": True,
        }
    )
    workload = tmp_path / "workload.sh"
    workload.write_text(
        f"curl -sN --fail http://127.0.0.1:{port}/v1/completions "
        f"-H 'Content-Type: application/json' -d '{body}'\n"
    )
    result = proctor(
        "flow",
        "--engine",
        "vllm",
        "--model",
        str(info.model_dir),
        "--python",
        str(info.vllm_python),
        "--served-model-name",
        info.served_model_name,
        "--port",
        str(port),
        "--poll",
        "2s",
        "--ready-timeout",
        "5m",
        "--env",
        "VLLM_CPU_KVCACHE_SPACE=1",
        "--workload-cmd",
        f"bash {workload}",
        "--json",
        "--",
        "--max-model-len",
        "2048",
        "--enforce-eager",
        "--dtype",
        "float32",
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    flow = json.loads(result.stdout)
    steps = {s["step"]: s for s in flow["steps"]}
    assert set(steps) == {"stop", "start", "ready", "workload", "drain", "teardown"}
    print(f"FIGURE vllm ready after {steps['ready']['elapsed_s']}s")
    server = isolated_runs / flow["server_run"]
    record = json.loads((server / "record.json").read_text())
    assert record["server"]["engine"] == "vllm"
    assert "--enforce-eager" in record["server"]["argv"]
    # Nothing of the server's tree is left: no process still has the server's pgid.
    pgid = record["process"]["pgid"]
    left = []
    for proc in psutil.process_iter(["pid"]):
        try:
            import os

            if os.getpgid(proc.pid) == pgid and proc.status() != psutil.STATUS_ZOMBIE:
                left.append(proc.pid)
        except (OSError, psutil.Error):
            continue
    assert not left, f"processes of the server's group left: {left}"
    wl = isolated_runs / flow["workload_run"]
    assert "data:" in next(wl.glob("*.log")).read_text()


def test_flow_with_real_transformers_serve(isolated_runs: Path, tmp_path: Path) -> None:
    """A second engine with other habits: no /metrics, no [DONE], model must be the path."""
    info = engine_info()
    if info.tf_python is None:
        pytest.skip("transformers serve venv not installed (PROCTOR_SKIP_TF_SERVE=1)")
    port = free_port()
    body = json.dumps(
        {
            "model": str(info.model_dir),
            "max_tokens": 8,
            "stream": True,
            "messages": [{"role": "user", "content": "Say hi"}],
        }
    )
    workload = tmp_path / "workload.sh"
    workload.write_text(
        f"curl -sN --fail http://127.0.0.1:{port}/v1/chat/completions "
        f"-H 'Content-Type: application/json' -d '{body}'\n"
    )
    result = proctor(
        "flow",
        "--engine",
        "transformers",
        "--model",
        str(info.model_dir),
        "--python",
        str(info.tf_python),
        "--port",
        str(port),
        "--poll",
        "2s",
        # transformers serve loads the model at the first request and prints nothing
        # meanwhile: on a loaded 2-core machine that took longer than 6 polls (CI).
        "--stuck-polls",
        "30",
        "--ready-timeout",
        "3m",
        "--workload-cmd",
        f"bash {workload}",
        "--json",
        "--",
        "--device",
        "cpu",
        timeout=400,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    flow = json.loads(result.stdout)
    steps = {s["step"]: s for s in flow["steps"]}
    print(f"FIGURE transformers serve ready after {steps['ready']['elapsed_s']}s")
    wl = isolated_runs / flow["workload_run"]
    assert "data:" in next(wl.glob("*.log")).read_text()

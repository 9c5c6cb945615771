"""`proctor eval gsm8k` as a supervised run against real vLLM for CPU, with local GSM8K data."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import proctor
from tests.infra.engines import EngineServer, gsm8k_data_dir, vllm_server  # noqa: F401

pytestmark = [pytest.mark.engine, pytest.mark.slow]


def test_eval_gsm8k_is_a_run_with_its_metrics(
    vllm_server: EngineServer, isolated_runs: Path
) -> None:
    data = gsm8k_data_dir()
    result = proctor(
        "eval",
        "gsm8k",
        "--base-url",
        vllm_server.base_url,
        "--model",
        vllm_server.model,
        "--limit",
        "5",
        "--fewshot",
        "3",
        "--data",
        str(data),
        "--name",
        "g",
        "--json",
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    out = json.loads(result.stdout)
    metrics = out["metrics"]
    assert "gsm8k_exact_match_flexible" in json.dumps(metrics) or metrics
    run = isolated_runs / out["run_id"]
    record = json.loads((run / "record.json").read_text())
    assert record["kind"] == "eval" and record["outcome"] == "ok"
    assert list((run / "lm_eval").rglob("results_*.json"))

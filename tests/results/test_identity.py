"""What a result measured (source, engine args, dataset, GPU), read from run directories."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from proctor.results.identity import identity_of, mismatches, unchecked


def server_run(
    runs: Path, run_id: str, *, commit: str = "a" * 40, gpu: Any = None, port: int = 8000
) -> None:
    d = runs / run_id
    d.mkdir(parents=True)
    record = {
        "kind": "server",
        "server": {
            "argv": [
                "/venv/bin/python",
                "-m",
                "vllm",
                "--port",
                str(port),
                "--host=0.0.0.0",
                "--tp",
                "2",
            ]
        },
        "source": {"is_git": True, "commit": commit, "diff_sha256": None},
        "gpu": gpu
        if gpu is not None
        else {
            "present": True,
            "gpus": [{"index": 0, "name": "NVIDIA H200"}, {"index": 1, "name": "NVIDIA H200"}],
        },
    }
    (d / "record.json").write_text(json.dumps(record))


def bench_run(runs: Path, run_id: str, server: str, dataset: str = "random:isl=8") -> Path:
    d = runs / run_id
    d.mkdir(parents=True)
    (d / "record.json").write_text(
        json.dumps(
            {
                "kind": "bench",
                "server_run": server,
                "gpu": {"present": False, "reason": "sampling off"},
            }
        )
    )
    (d / "metrics.json").write_text(
        json.dumps({"schema": "proctor.bench.metrics", "dataset": {"id": dataset}})
    )
    return d


def test_identity_follows_the_bench_to_its_server_run(tmp_path: Path) -> None:
    server_run(tmp_path, "s1", port=8000)
    server_run(tmp_path, "s2", port=9000)  # another port only: the same engine arguments
    a = identity_of(bench_run(tmp_path, "b1", "s1"))
    b = identity_of(bench_run(tmp_path, "b2", "s2") / "metrics.json")
    assert a["engine_args"] == "-m vllm --tp 2"
    assert a["gpu"] == "NVIDIA H200, NVIDIA H200"
    assert a["source"] == "a" * 40 + "+clean"
    assert a["dataset"] == "random:isl=8"
    assert mismatches(a, b) == [] and unchecked(a, b) == []


def test_source_and_gpu_differences_are_named(tmp_path: Path) -> None:
    server_run(tmp_path, "s1")
    server_run(
        tmp_path,
        "s2",
        commit="b" * 40,
        gpu={"present": True, "gpus": [{"index": 0, "name": "AMD Instinct MI300X"}]},
    )
    a = identity_of(bench_run(tmp_path, "b1", "s1"))
    b = identity_of(bench_run(tmp_path, "b2", "s2"))
    diff = mismatches(a, b)
    assert [d.split(":")[0] for d in diff] == ["source", "gpu"]
    assert "MI300X" in diff[1]


def test_unknown_fields_are_never_a_mismatch(tmp_path: Path) -> None:
    log = tmp_path / "bench.log"
    log.write_text("no run here\n")
    server_run(tmp_path, "s1")
    a = identity_of(bench_run(tmp_path, "b1", "s1"))
    b = identity_of(log)
    assert b == {"source": None, "engine_args": None, "dataset": None, "gpu": None}
    assert mismatches(a, b) == [] and unchecked(a, b) == ["source", "engine_args", "dataset", "gpu"]

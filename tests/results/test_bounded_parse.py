"""`results parse` stays bounded in memory and time on huge or endless input, and says what
it did not read."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from tests.helpers import REPO, proctor

CAP = 1024 * 1024
ENV = {"PROCTOR_RESULTS_MAX_BYTES": str(CAP)}
SUMMARY = REPO / "tests/data/captured/vllm-bench-serve/stdout.txt"


def test_a_huge_log_is_read_from_its_end_and_the_cut_is_said(tmp_path: Path) -> None:
    log = tmp_path / "huge.log"
    with log.open("wb") as f:
        f.write(b"z" * (8 * CAP))  # one enormous line, no newline
        f.write(b"\n" + SUMMARY.read_bytes())
    result = proctor("results", "parse", str(log), "--json", env=ENV)
    assert result.returncode == 0, result.stderr
    parsed = json.loads(result.stdout)
    assert parsed["metrics"]["output_throughput"]["value"] > 0
    size = log.stat().st_size
    cut = f"read only the last {CAP:,} of {size:,} bytes"
    assert cut in parsed["meta"]["input_cut"] and cut in result.stderr


def test_dev_zero_stops_at_the_cap_with_a_usage_error() -> None:
    result = proctor("results", "parse", "/dev/zero", env=ENV, timeout=60)
    assert result.returncode == 64
    assert f"stopped reading after {CAP:,} bytes: the input did not end" in result.stderr
    assert "Traceback" not in result.stderr


def test_an_endless_pipe_stops_at_the_cap(tmp_path: Path) -> None:
    fifo = tmp_path / "endless"
    os.mkfifo(fifo)
    writer = subprocess.Popen(["sh", "-c", f"yes 'endless line' > {fifo}"])
    try:
        result = proctor("results", "parse", str(fifo), env=ENV, timeout=60)
    finally:
        writer.kill()
        writer.wait()
    assert result.returncode == 64
    assert f"stopped reading after {CAP:,} bytes" in result.stderr


def test_a_result_json_over_the_cap_is_refused_by_size(tmp_path: Path) -> None:
    big = tmp_path / "result.json"
    big.write_text(json.dumps({"pad": "x" * (2 * CAP), "output_throughput": 1.0}))
    result = proctor("results", "parse", str(big), env=ENV)
    assert result.returncode == 64
    assert "more than the 1,048,576 bytes proctor reads" in result.stderr

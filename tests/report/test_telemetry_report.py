"""The report of a bench run shows the server's queue and the GPU's power on one time axis, the
validity verdict, the server against the client, and energy per token."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from tests.report import runs

pytestmark = pytest.mark.timeout(300)

FAKE_SMI = """#!{py}
import sys
args = " ".join(sys.argv[1:])
if "--query-gpu" in args:
    print("0, GPU-aaa, NVIDIA H200, 2237, 143771, 97, 570.1, 312.5, 1980, 61")
elif "--query-compute-apps" in args:
    pass
else:
    sys.exit(2)
"""


def test_bench_report_has_timeline_validity_server_and_energy(tmp_path: Path) -> None:
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "nvidia-smi").write_text(FAKE_SMI.format(py=sys.executable))
    (tools / "nvidia-smi").chmod(0o755)
    env = runs.Env(
        tmp_path / "runs",
        {
            **os.environ,
            "COLUMNS": "200",
            "PATH": f"{tools}{os.pathsep}{os.environ['PATH']}",
            "PROCTOR_RUNS_DIR": str(tmp_path / "runs"),
        },
        tmp_path / "state",
    )
    with runs.fake_server("--itl", "0.005", "--max-running", "2") as url:
        r = runs.proctor(
            env,
            "bench",
            "--base-url",
            url,
            "--isl",
            "8",
            "--osl",
            "16",
            "--concurrency",
            "6",
            "--num-prompts",
            "60",
            "--num-warmups",
            "2",
            "--tokenizer-mode",
            "approx",
            "--gpu-sample",
            "0.2",
            "--idle-power-w",
            "100",
        )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    out = tmp_path / "report.html"
    rep = runs.proctor(env, "report", "last", "-o", str(out), "--json")
    assert rep.returncode == 0, rep.stdout[-2000:] + rep.stderr[-2000:]
    figures = {f["id"]: f for f in json.loads(rep.stdout)["figures"]}
    assert figures["timeline"]["points"] > 0
    html = out.read_text()
    for words in (
        "Server and GPU over time",
        "server: running requests",
        "server: waiting requests",
        "GPU 0 power (W)",
        "<h2>Validity</h2>",
        "Server against client",
        "generated tokens",
        "energy per output token",
        "given (--idle-power-w)",
    ):
        assert words in html, words

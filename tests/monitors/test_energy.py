"""Energy per output token: from gpu.csv's power column over the measured window, idle power
subtracted; end to end through a bench whose GPU is a real `nvidia-smi` program on PATH."""

from __future__ import annotations

import csv
import json
import os
import sys
from pathlib import Path

import pytest

from proctor.monitors.energy import energy_summary
from proctor.monitors.gpu import CSV_COLUMNS
from tests.fixtures.fake_openai_server import FakeServer
from tests.helpers import proctor

pytestmark = pytest.mark.timeout(180)

T0 = 1_800_000_000.0


def write_gpu_csv(path: Path, rows: list[tuple[float, int, float | None]]) -> None:
    import datetime as dt

    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(CSV_COLUMNS)
        for t, index, watts in rows:
            when = dt.datetime.fromtimestamp(t, dt.timezone.utc).isoformat(timespec="milliseconds")
            w.writerow(
                [
                    when,
                    index,
                    f"GPU-{index}",
                    "Fake",
                    "1.0",
                    "2.0",
                    "50",
                    "",
                    "" if watts is None else f"{watts:.1f}",
                    "1980",
                    "40",
                ]
            )


def test_net_energy_per_token_two_gpus(tmp_path: Path) -> None:
    path = tmp_path / "gpu.csv"
    rows: list[tuple[float, int, float | None]] = []
    for t in range(3):  # idle, before the load: 2 x 60 W
        rows += [(T0 + t, 0, 60.0), (T0 + t, 1, 60.0)]
    for t in range(10, 21):  # loaded window 10..20 s: 2 x 160 W
        rows += [(T0 + t, 0, 160.0), (T0 + t, 1, 160.0)]
    write_gpu_csv(path, rows)
    e = energy_summary(path, T0 + 10, T0 + 20, 1000, idle_before=T0 + 5)
    assert e["available"] and e["gpus"] == 2 and e["samples"] == 11
    assert (e["mean_power_w"], e["idle_power_w"]) == (320.0, 120.0)
    assert e["net_energy_j"] == pytest.approx(2000.0) and e["energy_j"] == pytest.approx(3200.0)
    assert e["j_per_output_token"] == pytest.approx(2.0)
    given = energy_summary(path, T0 + 10, T0 + 20, 1000, idle_before=T0 + 5, idle_power_w=20.0)
    assert given["j_per_output_token"] == pytest.approx(3.0) and "given" in given["idle_source"]


def test_no_power_column_says_why(tmp_path: Path) -> None:
    path = tmp_path / "gpu.csv"
    write_gpu_csv(path, [(T0 + t, 0, None) for t in range(5)])
    e = energy_summary(path, T0, T0 + 4, 100, idle_before=T0)
    assert e == {
        "available": False,
        "reason": "no GPU power readings (no GPU, or its driver does not report power)",
    }
    missing = energy_summary(tmp_path / "absent.csv", T0, T0 + 4, 100, idle_before=T0)
    assert missing["available"] is False


# A stand-in for the NVIDIA tool (NVML is absent here, so detection falls back to it): 250 W.
FAKE_SMI = """#!{py}
import sys
args = " ".join(sys.argv[1:])
if "--query-gpu" in args:
    print("0, GPU-aaa, NVIDIA H200, 2237, 143771, 97, 570.1, 250.00, 1980, 61")
elif "--query-compute-apps" in args:
    print("GPU-aaa, 4242, 2228")
else:
    sys.exit(2)
"""


def test_bench_energy_per_token_through_the_gpu_backend(tmp_path: Path) -> None:
    tools = tmp_path / "bin"
    tools.mkdir()
    smi = tools / "nvidia-smi"
    smi.write_text(FAKE_SMI.format(py=sys.executable))
    smi.chmod(0o755)
    env = {"PATH": f"{tools}{os.pathsep}{os.environ['PATH']}"}
    out = tmp_path / "o"
    with FakeServer(itl=0.005) as srv:
        r = proctor(
            "bench",
            "--base-url",
            srv.base_url,
            "--output-dir",
            str(out),
            "--isl",
            "8",
            "--osl",
            "16",
            "--concurrency",
            "4",
            "--num-prompts",
            "40",
            "--num-warmups",
            "4",
            "--tokenizer-mode",
            "approx",
            "--gpu-sample",
            "0.2",
            "--idle-power-w",
            "50",
            env=env,
        )
    assert r.returncode == 0, r.stderr
    doc = json.loads((out / "metrics.json").read_text())
    energy = doc["energy"]
    assert energy["available"], energy
    assert energy["mean_power_w"] == 250.0 and energy["idle_power_w"] == 50.0
    tokens = doc["metrics"]["total_output_tokens"]
    expected = 200.0 * energy["window_s"] / tokens
    assert energy["j_per_output_token"] == pytest.approx(expected, rel=1e-3)
    assert doc["metrics"]["energy_per_output_token_j"] == energy["j_per_output_token"]
    assert "J/output token (mean 250.0 W on 1 GPU(s), idle 50.0 W given" in r.stdout
    rows = list(csv.DictReader((out / "gpu.csv").open()))
    assert rows and {r["power_w"] for r in rows} == {"250.0"}
    assert {r["sm_clock_mhz"] for r in rows} == {"1980"} and rows[0]["temperature_c"] == "61"

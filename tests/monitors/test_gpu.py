from __future__ import annotations

import csv
import os
import stat
import sys
from pathlib import Path

import pytest

from proctor.monitors.gpu import (
    CSV_COLUMNS,
    BackendUnavailable,
    GpuSample,
    GpuSampler,
    NvidiaSmiBackend,
    detect_backend,
    gpu_holders,
    inventory,
    memory_back_to_baseline,
    parse_amd_smi_metric,
    parse_rocm_smi,
)


class FakeBackend:
    """Scripted readings: each sample() returns the next list (the last one repeats)."""

    name = "fake"

    def __init__(self, script: list[list[GpuSample]]) -> None:
        self.script = script
        self.calls = 0
        self.closed = False

    def driver(self) -> str | None:
        return "999.1"

    def sample(self) -> list[GpuSample]:
        out = self.script[min(self.calls, len(self.script) - 1)]
        self.calls += 1
        return out

    def close(self) -> None:
        self.closed = True


def gpu(index: int, used: float, procs: tuple[tuple[int, float], ...] = ()) -> GpuSample:
    return GpuSample(index, f"GPU-{index}", "Fake H200", used, 143771.0, 50.0, procs)


def test_csv_rows_and_peaks(tmp_path: Path) -> None:
    backend = FakeBackend(
        [
            [gpu(0, 100), gpu(1, 10)],
            [gpu(0, 2000, ((123, 1900.0), (456, 12.5))), gpu(1, 5)],
            [gpu(0, 300), gpu(1, 7)],
        ]
    )
    sampler = GpuSampler(tmp_path / "gpu.csv", interval_s=3600, backend=backend, now=lambda: "T")
    inv = sampler.start()  # inventory + first sample
    sampler.sample_once()
    sampler.stop()  # final sample
    rows = list(csv.reader((tmp_path / "gpu.csv").open()))
    assert rows[0] == CSV_COLUMNS
    assert len(rows) == 1 + 2 * 3
    assert rows[3] == [
        "T",
        "0",
        "GPU-0",
        "Fake H200",
        "2000.0",
        "143771.0",
        "50",
        "123:1900;456:12",
        "",
        "",
        "",
    ]
    assert sampler.peaks[0].memory_used_mib == 2000 and sampler.peaks[1].memory_used_mib == 10
    assert (
        inv.backend == "fake"
        and inv.driver == "999.1"
        and [g.uuid for g in inv.gpus] == ["GPU-0", "GPU-1"]
    )
    assert sampler.summary()["samples"] == 3


def test_interval_zero_disables(tmp_path: Path) -> None:
    sampler = GpuSampler(tmp_path / "gpu.csv", interval_s=0, backend=FakeBackend([[gpu(0, 1)]]))
    inv = sampler.start()
    sampler.stop()
    assert not (tmp_path / "gpu.csv").exists()
    assert inv.reason and "disabled" in inv.reason


def test_thread_samples_on_interval(tmp_path: Path) -> None:
    backend = FakeBackend([[gpu(0, 1)]])
    with GpuSampler(tmp_path / "gpu.csv", interval_s=0.05, backend=backend):
        import time

        time.sleep(1.0)
    assert backend.calls >= 8  # 20 due; a 0.2 s interval would give 6 (slack for a loaded machine)


def test_no_gpu_reports_reason_and_run_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi / rocm-smi / amd-smi here
    backend, reason = detect_backend()
    if backend is not None:  # pragma: no cover - a machine with a GPU library
        pytest.skip("this machine has a GPU backend")
    assert reason and reason.startswith("no GPU found") and "nvidia-smi not found" in reason
    inv = inventory()
    assert inv.backend is None and inv.gpus == [] and inv.reason
    sampler = GpuSampler(tmp_path / "gpu.csv", interval_s=1)
    assert sampler.start().reason
    sampler.stop()
    assert not (tmp_path / "gpu.csv").exists()


FAKE_SMI = """#!{py}
import sys
args = " ".join(sys.argv[1:])
if "--query-gpu" in args:
    print("0, GPU-aaa, NVIDIA H200, 2237, 143771, 17, 570.1, 118.52, 1980, 34")
    print("1, GPU-bbb, NVIDIA H200, 0, 143771, 0, 570.1, [N/A], [N/A], [N/A]")
elif "--query-compute-apps" in args:
    print("GPU-aaa, 4242, 2228")
else:
    sys.exit(2)
"""


def test_nvidia_smi_fallback_parses_real_tool_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tool = tmp_path / "nvidia-smi"
    tool.write_text(FAKE_SMI.format(py=sys.executable))
    tool.chmod(tool.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    backend = NvidiaSmiBackend()
    samples = backend.sample()
    assert [(s.index, s.uuid, s.memory_used_mib, s.utilization_pct) for s in samples] == [
        (0, "GPU-aaa", 2237.0, 17.0),
        (1, "GPU-bbb", 0.0, 0.0),
    ]
    assert samples[0].processes == ((4242, 2228.0),)
    assert (samples[0].power_w, samples[0].sm_clock_mhz, samples[0].temperature_c) == (
        118.52,
        1980.0,
        34.0,
    )
    assert (samples[1].power_w, samples[1].sm_clock_mhz, samples[1].temperature_c) == (
        None,
        None,
        None,
    )
    assert backend.driver() == "570.1"
    assert gpu_holders([0], backend=backend) == [(4242, 2228.0)]
    assert gpu_holders([1], backend=backend) == []


def test_nvidia_smi_failing_is_unavailable(tmp_path: Path) -> None:
    tool = tmp_path / "nvidia-smi"
    tool.write_text("#!/bin/sh\necho 'NVIDIA-SMI has failed' >&2\nexit 9\n")
    tool.chmod(0o755)
    with pytest.raises(BackendUnavailable, match="exited 9"):
        NvidiaSmiBackend(tool=str(tool))


def test_memory_back_to_baseline() -> None:
    backend = FakeBackend([[gpu(0, 5000)], [gpu(0, 3000)], [gpu(0, 120)]])
    t = [0.0]

    def sleep(s: float) -> None:
        t[0] += s

    ok, last = memory_back_to_baseline(
        {0: 0.0},
        tolerance_mib=256,
        timeout_s=10,
        poll_s=1,
        backend=backend,
        sleep=sleep,
        clock=lambda: t[0],
    )
    assert ok and last == {0: 120}
    stuck = FakeBackend([[gpu(0, 5000)]])
    ok, last = memory_back_to_baseline(
        {0: 0.0}, timeout_s=3, poll_s=1, backend=stuck, sleep=sleep, clock=lambda: t[0]
    )
    assert not ok and last == {0: 5000}


def test_rocm_smi_and_amd_smi_json() -> None:
    rocm = (
        '{"card0": {"GPU use (%)": "35", "VRAM Total Memory (B)": "205822885888",'
        ' "VRAM Total Used Memory (B)": "1073741824", "Card Series": "AMD Instinct MI300X",'
        ' "Unique ID": "0x1234"}, "system": {"Driver version": "6.8"}}'
    )
    (s,) = parse_rocm_smi(rocm, {0: [(77, 512.0)]})
    assert (s.index, s.memory_used_mib, s.utilization_pct, s.name, s.uuid) == (
        0,
        1024.0,
        35.0,
        "AMD Instinct MI300X",
        "0x1234",
    )
    assert s.processes == ((77, 512.0),)
    amd = (
        '[{"gpu": 1, "usage": {"gfx_activity": {"value": 12, "unit": "%"}},'
        ' "mem_usage": {"total_vram": {"value": 196592, "unit": "MB"},'
        ' "used_vram": {"value": 283, "unit": "MB"}}}]'
    )
    (a,) = parse_amd_smi_metric(amd, {1: ("MI355X", "uuid-1")})
    assert (a.index, a.memory_used_mib, a.memory_total_mib, a.utilization_pct, a.name) == (
        1,
        283.0,
        196592.0,
        12.0,
        "MI355X",
    )

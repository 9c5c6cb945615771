"""On a real NVIDIA GPU: NVML v2 readings against nvidia-smi, and the per-process entry."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu


def smi_used(index: int) -> float:
    out = subprocess.run(
        ["nvidia-smi", f"--id={index}", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return float(out.strip())


def test_nvml_matches_nvidia_smi_and_names_our_pid(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available() or shutil.which("nvidia-smi") is None:
        pytest.skip("needs torch with CUDA and nvidia-smi")
    from proctor.monitors.gpu import GpuSampler, NvmlBackend, gpu_holders

    backend = NvmlBackend()
    block = torch.empty(4 * 1024**3, dtype=torch.uint8, device="cuda:0")  # 4 GiB
    torch.cuda.synchronize()
    time.sleep(1.0)
    (s0, *_) = backend.sample()
    reference = smi_used(0)
    assert abs(s0.memory_used_mib - reference) <= 0.01 * reference + 2  # within 1 %
    pids = dict(s0.processes)
    assert os.getpid() in pids and pids[os.getpid()] >= 4096
    assert (os.getpid(), pids[os.getpid()]) in gpu_holders([0], backend=backend)

    sampler = GpuSampler(tmp_path / "gpu.csv", interval_s=0.2, backend=backend)
    sampler.start()
    time.sleep(1.0)
    sampler.stop()
    assert sampler.peaks[0].memory_used_mib >= 4096
    assert f"{os.getpid()}:" in (tmp_path / "gpu.csv").read_text()
    del block

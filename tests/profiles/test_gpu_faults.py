"""Every built-in engine profile knows the generic GPU fault lines, as real failures print them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from proctor.errors import ConfigError
from proctor.monitors.logscan import LogScanner
from proctor.spec.profiles import load_profiles
from tests.fixtures.fake_openai_server import free_port
from tests.helpers import FAKE_ENGINE_TOML, proctor

CAPTURED = Path(__file__).resolve().parents[1] / "data" / "captured" / "gpu-faults"
ENGINES = ("vllm", "sglang", "atom", "transformers")


def _lines(name: str) -> list[str]:
    rows = (CAPTURED / name).read_text(encoding="utf-8").splitlines()
    return [row for row in rows if row.strip() and not row.startswith("#")]


def _faults_found(patterns: list[str], lines: list[str], tmp_path: Path) -> set[str]:
    """Write the lines to a log file and scan it as `serve ready`/`drain` do."""
    log = tmp_path / "server.log"
    log.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    scanner = LogScanner(patterns, max_matches=10_000)
    scanner.add(log)
    try:
        return {match.line for match in scanner.poll()}
    finally:
        scanner.close()


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("phase", ["startup", "runtime"])
def test_every_engine_finds_every_captured_gpu_fault(
    engine: str, phase: str, tmp_path: Path
) -> None:
    faults = _lines("faults.txt")
    assert len(faults) >= 20
    patterns = load_profiles().engine(engine).fault_patterns(phase)  # type: ignore[arg-type]
    found = _faults_found(patterns, faults, tmp_path)
    missed = [line for line in faults if line.rstrip() not in found]
    assert not missed, f"{engine} ({phase}) misses: {missed}"


@pytest.mark.parametrize("engine", ENGINES)
def test_normal_gpu_lines_are_not_faults(engine: str, tmp_path: Path) -> None:
    normal = _lines("normal.txt")
    patterns = load_profiles().engine(engine).fault_patterns("runtime")
    assert _faults_found(patterns, normal, tmp_path) == set()


def test_the_gpu_set_is_one_shared_table_that_users_can_extend_or_drop() -> None:
    profiles = load_profiles(
        {
            "fault_sets": {"site": {"patterns": ["MY_SITE_FAULT"]}},
            "engines": {
                "vllm": {"fault_sets": ["gpu", "site"]},
                "sglang": {"fault_sets": []},
            },
        }
    )
    vllm = profiles.engine("vllm").fault_patterns("runtime")
    assert "MY_SITE_FAULT" in vllm and "CUDA error: " in vllm
    assert "CUDA error: " not in profiles.engine("sglang").fault_patterns("runtime")
    # Built-ins hold no copies of the shared patterns.
    for engine in ENGINES:
        own = profiles.engine(engine).runtime_fault_patterns
        assert "CUDA error: " not in own and "NCCL error" not in own
    with pytest.raises(ConfigError, match="unknown fault set 'nope'"):
        load_profiles({"engines": {"vllm": {"fault_sets": ["nope"]}}})


def test_a_gpu_fault_no_engine_pattern_names_fails_the_flow(tmp_path: Path) -> None:
    """End to end: the fake engine's own patterns do not know CUDA errors; the shared set does."""
    Path("proctor.toml").write_text(FAKE_ENGINE_TOML)
    port = free_port()
    line = "torch.AcceleratorError: CUDA error: an illegal memory access was encountered"
    workload = tmp_path / "workload.sh"
    body = json.dumps({"model": "m", "prompt": "hi", "max_tokens": 5})
    workload.write_text(f"curl -sN http://127.0.0.1:{port}/v1/completions -d '{body}'\nsleep 60\n")
    result = proctor(
        "flow",
        "--engine",
        "fake",
        "--model",
        "m",
        "--port",
        str(port),
        "--workload-cmd",
        f"bash {workload}",
        "--json",
        "--",
        "--fault-after-requests",
        "1",
        "--fault-line",
        line,
    )
    assert result.returncode == 2, result.stderr
    drain = next(s for s in json.loads(result.stdout)["steps"] if s["step"] == "drain")
    assert "illegal memory access" in drain["message"]


# What each program printed on the H200 GPU machine (tests/data/captured/gpu-faults/README.md,
# "Captured on the GPU machine"): the line each capture must be caught by.
H200_KEY_LINES = {
    "device-assert.txt": ["torch.AcceleratorError: CUDA error: device-side assert triggered"],
    "illegal-address-torch.txt": [
        "torch.AcceleratorError: CUDA error: an illegal memory access was encountered",
        "cupy_backends.cuda.api.driver.CUDADriverError: CUDA_ERROR_ILLEGAL_ADDRESS: an illegal"
        " memory access was encountered",
    ],
    "illegal-address-cupy.txt": [
        "cupy_backends.cuda.api.runtime.CUDARuntimeError: cudaErrorIllegalAddress: an illegal"
        " memory access was encountered",
    ],
    "xid.txt": [
        "[   34.571324] NVRM: Xid (PCI:0000:00:06): 43, pid=447, name=python3, channel 0x0000000a",
    ],
}


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("capture", sorted(H200_KEY_LINES))
def test_every_engine_catches_what_a_real_gpu_fault_printed(
    engine: str, capture: str, tmp_path: Path
) -> None:
    """Whole outputs (tracebacks and all) of real faults on an H200, scanned as a server log."""
    lines = (CAPTURED / "h200" / capture).read_text(encoding="utf-8").splitlines()
    patterns = load_profiles().engine(engine).fault_patterns("runtime")
    found = _faults_found(patterns, lines, tmp_path)
    for key in H200_KEY_LINES[capture]:
        assert key in found, f"{engine} misses {key!r} in {capture}; found {sorted(found)}"
    assert not any(line.startswith(("Traceback", "  File ")) for line in found), found

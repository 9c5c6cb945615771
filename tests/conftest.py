"""Shared fixtures: every test gets its own runs directory and a config-free working directory."""

from __future__ import annotations

import os
import shutil
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(autouse=True)
def isolated_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    runs = tmp_path / "runs"
    monkeypatch.setenv("PROCTOR_RUNS_DIR", str(runs))
    # Crash logs of unexpected errors go here, never into the home directory.
    monkeypatch.setenv("PROCTOR_STATE_DIR", str(tmp_path / "state"))
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    yield runs


# ---- two workers (pytest-xdist, `-n 2` in .ci/run) -------------------------------------------
# Most of the suite waits on other processes (servers starting, drains, polls), so two workers
# on two cores cut CI's wall time. A session fixture is built once per worker: the tests that
# share an expensive one go to one worker together (`--dist loadgroup`), so it is built once.
SHARED_FIXTURE_GROUPS = {
    "vllm_server": "vllm",
    "tf_server": "transformers-serve",
    "report_env": "report-runs",
    "served": "report-runs",
    "gsm8k_id": "report-runs",
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        names = getattr(item, "fixturenames", ())
        group = next((g for f, g in SHARED_FIXTURE_GROUPS.items() if f in names), None)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))


# ---- a skip is a test that did not run ------------------------------------------------------
# With PROCTOR_NO_SKIPS=1 (set by .ci/run) every skip outside the `gpu` marker is a failure that
# names the missing part, so a broken install can never turn into a green run of fewer tests.
# PROCTOR_REQUIRE_<SUITE>=1 does the same for the tests of one marker.

REQUIRE_BY_MARKER = {
    "engine": "PROCTOR_REQUIRE_ENGINES",
    "browser": "PROCTOR_REQUIRE_BROWSER",
    "sshhosts": "PROCTOR_REQUIRE_SSH",
    "slurm": "PROCTOR_REQUIRE_SLURM",
}


def _no_skips() -> bool:
    return os.environ.get("PROCTOR_NO_SKIPS") == "1"


def _skip_fails(item: pytest.Item) -> str | None:
    """The variable that makes a skip of this test a failure, if one is set."""
    if item.get_closest_marker("gpu") is not None:
        return None
    for marker, var in REQUIRE_BY_MARKER.items():
        if item.get_closest_marker(marker) is not None and os.environ.get(var) == "1":
            return var
    return "PROCTOR_NO_SKIPS" if _no_skips() else None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, Any, None]:
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    if not report.skipped or hasattr(report, "wasxfail"):
        return
    var = _skip_fails(item)
    if var is None:
        return
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    report.outcome = "failed"
    report.longrepr = f"skipped under {var}=1, so it fails: {reason}"


def pytest_collectreport(report: pytest.CollectReport) -> None:
    if _no_skips() and report.skipped:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"module skipped under PROCTOR_NO_SKIPS=1, so it fails: {reason}"


@pytest.fixture
def nvidia() -> None:
    """A real NVIDIA GPU that torch can use (the GPU machine); the gpu-marked tests skip
    without one, and CI deselects them."""
    if shutil.which("nvidia-smi") is None:
        pytest.skip("no nvidia-smi: not the GPU machine")
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device")

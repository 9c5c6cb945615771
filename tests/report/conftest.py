"""Real runs shared by the report tests of this package (made once per session)."""

from __future__ import annotations

import importlib.util
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from proctor.report import find_chromium
from tests.helpers import GSM8K_DATA
from tests.report import runs


@pytest.fixture(scope="session")
def report_env(tmp_path_factory: pytest.TempPathFactory) -> runs.Env:
    return runs.make_env(tmp_path_factory.mktemp("report-runs"))


@pytest.fixture(scope="session")
def served(report_env: runs.Env) -> Iterator[dict[str, str]]:
    """Run ids: a bench (fast server), the same bench against a slower server, a sweep."""
    with runs.fake_server("--ttft", "0.01", "--itl", "0.002") as fast:
        ids = {"bench": runs.bench_run(report_env, fast, "bench-c4", 4, 40)}
        ids.update(
            {
                f"sweep{i}": rid
                for i, rid in enumerate(runs.sweep_runs(report_env, fast, "sweep-a", [1, 2, 4], 12))
            }
        )
    with runs.fake_server("--ttft", "0.06", "--itl", "0.006") as slow:
        ids["slow"] = runs.bench_run(report_env, slow, "bench-c4-slow", 4, 40)
    yield ids


@pytest.fixture(scope="session")
def gsm8k_id(report_env: runs.Env) -> str:
    if importlib.util.find_spec("lm_eval") is None:
        pytest.skip("lm-eval not installed (proctor[eval])")
    with runs.answer_key_url(GSM8K_DATA) as url:
        return runs.gsm8k_run(report_env, url, GSM8K_DATA)


@pytest.fixture(scope="session")
def chromium() -> str:
    found = find_chromium()
    if found is None:
        if os.environ.get("PROCTOR_REQUIRE_BROWSER") == "1":
            pytest.fail(
                "PROCTOR_REQUIRE_BROWSER=1 but no chromium on PATH (.ci/install-browser.sh)"
            )
        pytest.skip("no chromium on PATH (run .ci/install-browser.sh)")
    return found


@pytest.fixture(scope="session")
def artifacts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Screenshots go here (under pytest's tmp dir; never committed)."""
    path = tmp_path_factory.mktemp("report-artifacts")
    return path


def keep(path: Path, artifacts: Path) -> Path:
    dest = artifacts / path.name
    if path != dest:
        shutil.copy2(path, dest)
    print(f"report artifact: {dest}")
    return dest

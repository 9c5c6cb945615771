"""Shared fixtures: every test gets its own runs directory and a config-free working directory."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

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


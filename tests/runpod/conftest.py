"""Fixtures for the Runpod target: a spec-validating emulator and a canary API key."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures.runpod_emulator import RunpodEmulator, running

# A recognisable fake key: any artifact containing it is a leak.
CANARY_KEY = "rpa_CANARY7d1f0c2e9b8a4f6e3d5c7b9a1e2f4d6c8b0a"


@pytest.fixture
def canary_key() -> str:
    return CANARY_KEY


@pytest.fixture
def emulator() -> Iterator[RunpodEmulator]:
    yield from running(RunpodEmulator(api_key=CANARY_KEY))


@pytest.fixture(autouse=True)
def _isolated_runpod_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No real key or ~/.runpod/config.toml from the machine may leak into a test."""
    monkeypatch.delenv("RUNPOD_API_KEY", raising=False)
    monkeypatch.delenv("PROCTOR_RUNPOD_API_URL", raising=False)
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    assert os.environ["HOME"] == str(home)

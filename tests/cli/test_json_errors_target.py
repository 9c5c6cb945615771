"""Under --json an error across a `--target` hand-off is one JSON object on stdout too, with the
exit code and the far proctor's own reason and fix (not the exit code's meaning), on the test
target dir:// (tests/infra/dirtarget.py: the SSH target's agent path over local processes)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.cli.test_json_errors import the_error
from tests.fixtures.fake_openai_server import free_port
from tests.helpers import FAKE_ENGINE_TOML, REPO, TEST_PYTHON, git_project, proctor


@pytest.fixture
def far_project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A git project whose proctor.toml puts dir://gpu-box's workspace under tmp_path."""
    monkeypatch.setenv("PROCTOR_TARGETS", "tests.infra.dirtarget")
    path = os.environ.get("PYTHONPATH")
    monkeypatch.setenv("PYTHONPATH", str(REPO) + (os.pathsep + path if path else ""))
    toml = (
        f'[remote]\nworkspace = "{tmp_path / "far-dir"}"\nvenv_base = "{TEST_PYTHON}"\n\n'
        f"{FAKE_ENGINE_TOML}\n"
    )
    return git_project(tmp_path / "project", {"proctor.toml": toml}, "project")


def test_far_errors_under_json_are_one_object_with_the_far_reason(
    far_project: Path, isolated_runs: Path
) -> None:
    # A far command that fails on its own (nothing listens on the port): the bench's reason.
    bench = proctor(
        "bench",
        "--target",
        "dir://gpu-box",
        "--port",
        str(free_port()),
        "--model",
        "m",
        "--json",
        cwd=far_project,
        timeout=240,
    )
    assert bench.returncode == 69, bench.stderr
    error = the_error(bench)["error"]
    assert isinstance(error, dict)
    assert "cannot reach the server" in str(error["reason"]), error
    assert error["fix"], error
    # A command handed off without an answer of its own (drain): the far error still says why.
    drain = proctor(
        "drain", "no-such-run", "--target", "dir://gpu-box", "--json", cwd=far_project, timeout=240
    )
    assert drain.returncode == 64, drain.stderr
    error = the_error(drain)["error"]
    assert isinstance(error, dict)
    assert "no run 'no-such-run'" in str(error["reason"]), error
    assert error["fix"] == "see `proctor runs list`", error


def test_a_hand_off_that_fails_here_is_one_json_error(far_project: Path) -> None:
    bad = proctor("bench", "--target", "dir://a b", "--model", "m", "--json", cwd=far_project)
    assert bad.returncode == 64, bad.stderr
    error = the_error(bad)["error"]
    assert isinstance(error, dict)
    assert "invalid dir target" in str(error["reason"]) and error["fix"], error

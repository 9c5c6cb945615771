"""The sweep's summary table (stdout and summary.txt) says which points are no measurement:
a failed point's figures (requests that all failed) read like a good point's before."""

from __future__ import annotations

from pathlib import Path

from tests.fixtures.fake_openai_server import FakeServer
from tests.helpers import proctor

SMALL = ["--isl", "8", "--osl", "4", "--num-prompts", "4"]


def _rows(text: str) -> list[list[str]]:
    return [line.split() for line in text.strip().splitlines()[1:]]


def test_failed_points_are_marked_in_the_summary(tmp_path: Path) -> None:
    env = {"PROCTOR_RUNS_DIR": str(tmp_path / "runs")}
    with FakeServer(mode="http500") as srv:
        res = proctor(
            "sweep",
            "--base-url",
            srv.base_url,
            "--concurrency",
            "1,2",
            *SMALL,
            env=env,
            timeout=300,
        )
    assert res.returncode == 3, res.stdout + res.stderr[-3000:]
    header = res.stdout.strip().splitlines()[0].split()
    assert header[-1] == "status"
    assert [row[-1] for row in _rows(res.stdout)] == ["FAILED", "FAILED"]
    (summary,) = (tmp_path / "runs").glob("*/summary.txt")
    assert [row[-1] for row in _rows(summary.read_text())] == ["FAILED", "FAILED"]


def test_an_invalid_point_is_marked_invalid(tmp_path: Path) -> None:
    env = {"PROCTOR_RUNS_DIR": str(tmp_path / "runs")}
    with FakeServer(itl=0.001) as srv:  # 4 requests: fewer than --min-requests, INVALID
        res = proctor(
            "sweep", "--base-url", srv.base_url, "--concurrency", "1", *SMALL, env=env, timeout=300
        )
    assert res.returncode == 0, res.stdout + res.stderr[-3000:]
    assert [row[-1] for row in _rows(res.stdout)] == ["INVALID"]

"""`proctor sweep --slo`: a search that cannot judge says so, never "even LO misses it".
A condition on a metric the bench does not write (a typo: p99_ttft for p99_ttft_ms) failed
every probe, so the search reported that no load met the SLO (exit 3); a range or a
resolution of nan / inf is no bound. Against the real fake server, through the real CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.fixtures.fake_openai_server import FakeServer
from tests.helpers import proctor

SMALL = ["--isl", "8", "--osl", "4", "--num-prompts", "4"]


def test_a_condition_on_a_metric_the_bench_never_writes_is_no_answer(tmp_path: Path) -> None:
    env = {"PROCTOR_RUNS_DIR": str(tmp_path / "runs")}
    with FakeServer(itl=0.001) as srv:
        res = proctor(
            "sweep",
            "--slo",
            "p99_ttft<=500",
            "--search",
            "concurrency",
            "--lo",
            "1",
            "--hi",
            "4",
            "--base-url",
            srv.base_url,
            *SMALL,
            "--json",
            env=env,
            timeout=300,
        )
    assert res.returncode == 64, res.stdout + res.stderr[-3000:]
    assert "misses it" not in res.stderr
    assert "the bench wrote no p99_ttft" in res.stderr
    out = json.loads(res.stdout)
    assert out["answer"] is None and len(out["probes"]) == 1


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("--slo", "p99_ttft_ms<=500", "--hi", "inf"), "--hi inf"),
        (("--slo", "p99_ttft_ms<=500", "--hi", "nan"), "--hi nan"),
        (("--slo", "p99_ttft_ms<=500", "--resolution", "nan"), "--resolution nan"),
    ],
)
def test_no_bound_is_refused_before_any_probe(
    tmp_path: Path, args: tuple[str, ...], says: str
) -> None:
    runs = tmp_path / "runs"
    argv = ["sweep", "--search", "request-rate", "--lo", "1", *args]
    if "--hi" not in args:
        argv += ["--hi", "8"]
    res = proctor(
        *argv, "--base-url", "http://127.0.0.1:9", *SMALL, env={"PROCTOR_RUNS_DIR": str(runs)}
    )
    assert res.returncode == 64, res.stdout + res.stderr
    assert says in res.stderr
    assert not runs.exists() or not any(p.is_dir() for p in runs.iterdir())

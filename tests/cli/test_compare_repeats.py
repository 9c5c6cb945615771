"""`runs compare` and `check` with bench --repeat: measured noise instead of fixed tolerances,
and refusal (exit 77) of comparisons between results that measured different things, through
the real CLI: server runs of the fake engine, supervised bench runs against them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from proctor.stats import welch_half_width
from tests.cli.test_serve_flow import fake_engine, free_port  # noqa: F401 - fixture
from tests.helpers import REPO, proctor

# Every test here runs servers of the fake engine, its profile in the working proctor.toml.
pytestmark = [pytest.mark.timeout(300), pytest.mark.usefixtures("fake_engine")]

# A tiny bench is INVALID by the default validity thresholds (100 requests, 10 s): these tests
# are about noise and identity, so the thresholds are lowered.
SMALL = [
    "--isl",
    "8",
    "--osl",
    "4",
    "--concurrency",
    "2",
    "--num-prompts",
    "6",
    "--num-warmups",
    "1",
    "--repeat",
    "3",
    "--min-requests",
    "0",
    "--min-window",
    "0",
]
DATA = REPO / "tests" / "data" / "datasets"


def serve(*extra: str) -> str:
    port = free_port()
    r = proctor(
        "serve",
        "start",
        "--engine",
        "fake",
        "--model",
        "m",
        "--port",
        str(port),
        "--json",
        "--",
        "--no-access-log",
        *extra,
    )
    assert r.returncode == 0, r.stderr
    run_id = str(json.loads(r.stdout)["run_id"])
    ready = proctor("serve", "ready", run_id, "--timeout", "60s")
    assert ready.returncode == 0, ready.stderr
    return run_id


def bench(server: str, *extra: str) -> str:
    r = proctor("bench", "--server", server, *SMALL, *extra, "--json")
    assert r.returncode == 0, r.stderr
    return str(json.loads(r.stdout)["run_id"])


def stop(*servers: str) -> None:
    for s in servers:
        proctor("serve", "stop", s)


def compare(a: str, b: str, *extra: str) -> tuple[int, Any, str]:
    r = proctor("runs", "compare", a, b, "--json", *extra)
    return r.returncode, json.loads(r.stdout) if r.returncode == 0 else None, r.stderr


def test_same_setup_compares_with_the_measured_noise(isolated_runs: Path) -> None:
    server = serve("--itl", "0.002")
    try:
        a, b = bench(server), bench(server)
    finally:
        stop(server)
    code, rows, stderr = compare(a, b)
    assert code == 0, stderr
    by = {r["metric"]: r for r in rows}
    tput = by["output_throughput"]
    assert tput["method"] == "ci95" and tput["noise"] > 0
    # The noise is the 95% CI of the difference: a change inside it is within_noise.
    if abs(tput["delta"]) <= tput["noise"]:
        assert tput["assessment"] == "within_noise"
    else:
        assert tput["assessment"] in ("better", "worse")
    doc = json.loads((isolated_runs / a / "metrics.json").read_text())
    stats = doc["repeats"]["stats"]["output_throughput"]
    # What compare used as A's stderr is the one metrics.json holds.
    assert stats["n"] == 3 and stats["stderr"] > 0
    # `results compare|check` take the run ids `runs list` prints too, not only paths.
    same = proctor("results", "compare", a, "last", "--json")
    assert same.returncode == 0, same.stderr
    assert {r["metric"]: r["b"] for r in json.loads(same.stdout)} == {
        r["metric"]: r["b"] for r in rows
    }
    unknown = proctor("results", "compare", a, "no-such-run")
    assert unknown.returncode == 64 and "no run 'no-such-run'" in unknown.stderr
    parsed = proctor("results", "parse", a, "--json")
    assert parsed.returncode == 0, parsed.stderr
    assert "output_throughput" in json.loads(parsed.stdout)["metrics"]


def test_different_engine_args_or_dataset_are_refused_unless_allowed(isolated_runs: Path) -> None:
    fast, slow = serve("--itl", "0.001"), serve("--itl", "0.003")
    try:
        a = bench(fast)
        b = bench(slow)
        c = bench(fast, "--dataset", f"jsonl:{DATA / 'prompts.jsonl'}")
    finally:
        stop(fast, slow)
    code, _, stderr = compare(a, b)
    assert code == 77, stderr
    assert "engine_args" in stderr and "--itl 0.001" in stderr and "--allow-mismatch" in stderr
    code, _, stderr = compare(a, c)
    assert code == 77 and "dataset" in stderr and "engine_args" not in stderr
    code, rows, stderr = compare(a, b, "--allow-mismatch")
    assert code == 0 and "NOT COMPARABLE" in stderr and rows


def test_check_uses_measured_noise_and_refuses_another_dataset(
    isolated_runs: Path, tmp_path: Path
) -> None:
    # 10 ms between tokens: a starved client (a loaded CI machine) merges 2 ms tokens and is
    # rightly judged client-bound, so `check` says INVALID (6); this test is about noise.
    server = serve("--itl", "0.01")
    try:
        run = bench(server)
    finally:
        stop(server)
    doc = json.loads((isolated_runs / run / "metrics.json").read_text())
    # Even so, a CPU hog on each core can starve it (CI saw it): then `check` still judges the
    # metrics against the baseline (the verdicts below) and exits 6 whatever they say, the
    # run's verdict first. Only the client may be what made it INVALID.
    validity = doc["validity"]
    invalid = validity["verdict"] == "INVALID"
    if invalid:
        failed = {n for n, c in validity["checks"].items() if not c["ok"]}
        assert failed == {"client"}, validity
    s = doc["repeats"]["stats"]["output_throughput"]
    mean, se = s["mean"], s["stderr"]
    half = welch_half_width(se, 3, se, 3)  # the 95% CI of a difference of two such means
    base = tmp_path / "base.toml"

    def check_against(value: float) -> tuple[int, dict[str, Any]]:
        base.write_text(
            f'[meta]\ndataset = "{doc["dataset"]["id"]}"\n'
            f"[metrics.output_throughput]\nvalue = {value}\n"
            f"stderr = {se}\nn = 3\n"
        )
        r = proctor("check", run, "--baselines", str(base), "--json")
        return r.returncode, json.loads(r.stdout)["verdicts"][0]

    # Worse than a baseline from repeats by half the interval: noise, whatever the tolerance.
    code, verdict = check_against(mean + half / 2)
    assert (code, verdict["status"], verdict["method"]) == (
        6 if invalid else 0,
        "within_noise",
        "ci95",
    ), validity
    assert verdict["noise"] == pytest.approx(half, rel=1e-6)
    # Worse by twice the interval: a regression, even when a 5% tolerance would pass it.
    code, verdict = check_against(mean + 2 * half)
    assert (code, verdict["status"]) == (6 if invalid else 7, "regression"), validity
    assert "beyond the 95% CI" in verdict["message"]
    other = tmp_path / "other.toml"
    other.write_text(
        f'[meta]\ndataset = "sharegpt:sha256:0123"\n[metrics.output_throughput]\nvalue = {mean}\n'
    )
    r = proctor("check", run, "--baselines", str(other))
    assert r.returncode == 77 and "dataset" in r.stderr

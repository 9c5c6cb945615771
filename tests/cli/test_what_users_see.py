"""What a user sees (issue 22): results where they look (a flow's workloads, `runs show`, `runs
list` at 80 columns), and references that mean the newest run of the kind a command takes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli.test_serve_flow import fake_engine  # noqa: F401
from tests.fixtures.fake_openai_server import FakeServer
from tests.helpers import git_project, proctor, record

BENCH = ("--isl", "16", "--osl", "8", "--concurrency", "2", "--num-prompts", "6")


def metrics_of(run: Path) -> dict[str, float]:
    data: dict[str, float] = json.loads((run / "metrics.json").read_text())["metrics"]
    return data


def validity_of(run: Path) -> str:
    verdict: str = json.loads((run / "metrics.json").read_text())["validity"]["verdict"]
    return verdict


# -- a flow prints its workloads' results ------------------------------------------------------
def test_a_flow_prints_each_workloads_results_and_runs_show_has_its_steps(
    fake_engine: int, isolated_runs: Path, tmp_path: Path
) -> None:
    port = fake_engine
    work = git_project(tmp_path / "work")  # the flow's source: a commit runs list shows
    flow = work / "flow.toml"
    flow.write_text(
        f"""
[flow]
engine = "fake"
model = "m"
port = {port}
poll = "1s"
extra = ["--ttft", "0.01"]

[[flow.workload]]
name = "small"
bench = {{ isl = 16, osl = 8, concurrency = 2, num_prompts = 6, num_warmups = 0 }}

[[flow.workload]]
name = "larger"
bench = {{ isl = 16, osl = 8, concurrency = 2, num_prompts = 10, num_warmups = 1 }}
"""
    )
    result = proctor("flow", "--file", str(flow), timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    said = result.stdout + result.stderr
    flows = [p for p in isolated_runs.iterdir() if p.is_dir() and record(p).get("kind") == "flow"]
    assert len(flows) == 1
    rows = record(flows[0])["workload_runs"]
    assert [r["name"] for r in rows] == ["small", "larger"]
    for row in rows:
        run = isolated_runs / row["run_id"]
        m = metrics_of(run)
        # The oracle: the bench's own metrics.json, read here, against what the flow printed.
        figures = (
            f"output {m['output_throughput']:.1f} tok/s, TTFT p50 {m['median_ttft_ms']:.2f} ms"
        )
        lines = [line for line in said.splitlines() if f"{row['name']}: exit 0" in line]
        assert len(lines) == 2, said[-3000:]  # after its drain, and in the flow's results
        for line in lines:
            assert validity_of(run) in line and figures in line, line
            assert f"0 of {int(m['completed'])} failed" in line, line
        assert row["headline"]["verdict"] == validity_of(run)
    assert "[flow] results:" in said

    shown = proctor("runs", "show", flows[0].name)
    assert shown.returncode == 0, shown.stderr
    assert "None" not in shown.stdout  # what the record does not hold is left out
    for word in ("argv", "started_at", "duration", "source", "steps", "teardown", "workloads"):
        assert word in shown.stdout, shown.stdout
    assert "['proctor', 'flow', '--file'" in shown.stdout
    listed = json.loads(proctor("runs", "list", "--kind", "flow", "--json").stdout)
    assert [r["id"] for r in listed] == [flows[0].name]
    assert listed[0]["duration_s"] > 0 and listed[0]["source_commit"]


# -- runs show on a bench ------------------------------------------------------------------------
def test_runs_show_last_on_a_bench_shows_its_verdict_and_figures(isolated_runs: Path) -> None:
    with FakeServer() as server:
        bench = proctor("bench", "--base-url", server.base_url, "--model", "m", *BENCH)
    assert bench.returncode == 0, bench.stderr
    shown = proctor("runs", "show", "last")
    assert shown.returncode == 0, shown.stderr
    run = next(p for p in isolated_runs.iterdir() if p.is_dir() and not p.name.startswith("."))
    m = metrics_of(run)
    out = shown.stdout
    assert f"verdict {validity_of(run)}" in out, out
    assert f"output {m['output_throughput']:.1f} tok/s" in out, out
    assert f"TTFT p50 {m['median_ttft_ms']:.2f} ms" in out, out
    assert "None" not in out
    data = json.loads(proctor("runs", "show", "last", "--json").stdout)
    assert data["headline"]["verdict"] == validity_of(run)
    assert ["output", m["output_throughput"], "tok/s"] in data["headline"]["figures"]


# -- runs list at 80 columns ---------------------------------------------------------------------
def _list_piped(columns: int, *args: str, cwd: Path) -> str:
    """`proctor runs list` into a pipe, as `| cat` or `| less` gets it, at `columns`."""
    env = {**os.environ, "COLUMNS": str(columns)}
    result = subprocess.run(
        [sys.executable, "-m", "proctor.cli.main", "runs", "list", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_runs_list_piped_at_80_columns_keeps_its_headers_and_commits_whole(
    tmp_path: Path,
) -> None:
    project = git_project(tmp_path / "project", {"a.txt": "a\n"})
    commit = subprocess.run(
        ["git", "-C", str(project), "rev-parse", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    proctor("run", "--name", "a-long-name-that-cannot-fit-in-eighty-columns", "--", "true",
            cwd=project, check=True)  # fmt: skip
    proctor("run", "--", "false", cwd=project)
    out = _list_piped(80, cwd=project)
    header, *lines = out.splitlines()
    every_column = ["run", "id", "kind", "name", "outcome", "exit", "duration", "commit"]
    assert header.split() == every_column  # the name gave way, with an ellipsis
    assert all(len(line) <= 80 for line in out.splitlines()), out
    assert len(lines) == 2 and all(commit[:8] in line for line in lines), out
    assert all(" command " in line and "a-long-na" in line for line in lines[1:]), out
    assert "…" in out
    # Narrower: columns go whole (exit, kind, ...), a header word is never cut.
    narrow = _list_piped(60, cwd=project)
    assert set(narrow.splitlines()[0].split()) <= set(every_column)
    assert all(len(line) <= 60 for line in narrow.splitlines()), narrow
    # --kind: only the kinds asked for.
    only = json.loads(proctor("runs", "list", "--kind", "bench,flow", "--json").stdout)
    assert only == []
    every = json.loads(proctor("runs", "list", "--kind", "command", "--json").stdout)
    assert len(every) == 2 and {r["kind"] for r in every} == {"command"}
    bad = proctor("runs", "list", "--kind", "nope")
    assert bad.returncode == 64 and "one or more of: bench" in bad.stderr


@pytest.mark.parametrize("width", [40, 60, 80, 100, 200])
def test_the_columns_fit_whole_or_not_at_all(width: int) -> None:
    """A law of fit_columns: a shown column is never narrower than its header, the run id and
    the commit never narrower than their widest cell, and the table fits whenever the run id,
    the outcome and a ten-character name can."""
    from proctor.cli.runs import fit_columns

    cells = [
        {
            "run id": "20261206-001047-dfded0",
            "kind": "server-sweep",
            "name": "n" * 40,
            "outcome": "stopped",
            "exit": "130 SIGTERM",
            "duration": "1h02m",
            "commit": "0123abcd+dirty",
            "gpu": "8x NVIDIA H100 80GB HBM3",
        }
    ]
    widths = fit_columns(cells, width)
    assert {"run id", "name", "outcome"} <= set(widths)
    for col, size in widths.items():
        assert size >= len(col)
        if col != "name":
            assert size == max(len(col), len(cells[0][col]))
    total = sum(widths.values()) + 2 * (len(widths) - 1)
    if width >= 22 + 7 + 10 + 4:
        assert total <= width, widths


# -- a reference means the newest run of the kind the command takes -------------------------------
def test_last_means_the_newest_server_for_serve_and_drain(
    fake_engine: int, isolated_runs: Path
) -> None:
    port = fake_engine
    started = proctor(
        "serve", "start", "--engine", "fake", "--model", "m", "--port", str(port), "--json"
    )
    assert started.returncode == 0, started.stderr
    server = json.loads(started.stdout)["run_id"]
    try:
        # A newer run of another kind: `last` alone would name it.
        assert proctor("run", "--", "true").returncode == 0
        newest = json.loads(proctor("runs", "show", "last", "--json").stdout)
        assert newest["kind"] == "command"
        ready = proctor("serve", "ready", "last", "--json", "--timeout", "60s")
        assert ready.returncode == 0, ready.stdout + ready.stderr
        client = newest["run_id"]  # finished: the drain only waits for the server to idle
        drain = proctor(
            "drain", "last", "--client", client, "--json", "--poll", "1s", "--max", "120s"
        )
        assert drain.returncode == 0, drain.stdout + drain.stderr
        wrong = proctor("serve", "ready", newest["run_id"], "--json")
        assert wrong.returncode == 64
        error = json.loads(wrong.stdout)["error"]
        assert "is not a server run: it is a command run" in error["reason"], error
        assert "--kind server,slurm" in error["fix"]
    finally:
        stopped = proctor("serve", "stop", "last", "--json")
    assert stopped.returncode == 0, stopped.stderr
    assert [r["run_id"] for r in json.loads(stopped.stdout)] == [server]


def test_a_run_name_names_its_newest_run_and_report_takes_a_sweeps_name(
    isolated_runs: Path,
) -> None:
    with FakeServer() as server:
        sweep = proctor(
            "sweep", "--base-url", server.base_url, "--model", "m", "--name", "my-sweep",
            "--isl", "16", "--osl", "8", "--concurrency", "1,2", "--num-prompts", "4",
        )  # fmt: skip
    assert sweep.returncode == 0, sweep.stderr
    shown = json.loads(proctor("runs", "show", "my-sweep", "--json").stdout)
    assert shown["kind"] == "sweep"
    report = proctor("report", "my-sweep", "--json")
    assert report.returncode == 0, report.stderr
    data = json.loads(report.stdout)
    assert data["kind"] == "sweep" and len(data["runs"]) == 2
    missing = proctor("report", "no-such-sweep")
    assert missing.returncode == 64 and "no run 'no-such-sweep'" in missing.stderr
    # results take runs with results: `last` skips nothing here, a server would be refused
    parsed = proctor("results", "parse", "last", "--json")
    assert parsed.returncode == 0, parsed.stderr

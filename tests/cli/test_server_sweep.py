"""Server-config sweeps (each server point its own flow, resumable by group, Pareto front) and
the SLO search (bisection against one server), against the fake server whose latency grows
with load."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli.test_serve_flow import fake_engine, start  # noqa: F401
from tests.helpers import proctor


def grid(port: int, group: str, *axes: str, extra: tuple[str, ...] = ()) -> list[str]:
    args = [
        "sweep",
        "--engine",
        "fake",
        "--model",
        "m",
        "--port",
        str(port),
        "--group",
        group,
        "--concurrency",
        "4",
        "--isl",
        "8",
        "--osl",
        "4",
        "--num-prompts",
        "12",
        "--poll",
        "1s",
        "--json",
    ]
    for axis in axes:
        args += ["--server-grid", axis]
    return [*args, "--", "--ttft", "0.05", *extra]


def test_server_grid_is_a_flow_per_point_with_a_pareto_front(
    fake_engine: int,
    isolated_runs: Path,
) -> None:
    # A 10 ms gap between tokens: with none, a loaded client reads a whole stream at once, its
    # TPOT is 0 and the row has no tokens/s per user to put on the front.
    result = proctor(
        *grid(fake_engine, "mns", "max-num-seqs=1,4", extra=("--itl", "0.01")), timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads(result.stdout)
    rows = summary["rows"]
    assert [r["server"] for r in rows] == [{"max-num-seqs": 1}, {"max-num-seqs": 4}]
    assert all(r["exit_code"] == 0 and r["bench"] == {"concurrency": 4} for r in rows)
    # One slot queues the other three requests: later first tokens, less throughput.
    one, four = (r["metrics"] for r in rows)
    assert one["p99_ttft_ms"] > 2 * four["p99_ttft_ms"]
    assert one["output_throughput"] < four["output_throughput"]
    assert 1 in summary["pareto"]
    flows = {r["flow_run"] for r in rows}
    assert len(flows) == 2
    for flow_id in flows:
        flow = json.loads((isolated_runs / flow_id / "record.json").read_text())
        assert flow["kind"] == "flow" and flow["sweep"]["group"] == "mns"
        assert [s["step"] for s in flow["steps"]][-1] == "teardown"
        server = json.loads((isolated_runs / flow["server_run"] / "record.json").read_text())
        assert f"--max-num-seqs {flow['sweep']['params']['max-num-seqs']}" in " ".join(
            server["argv"]
        )
    home = isolated_runs / summary["sweep"]
    assert (home / "exit_code").read_text() == "0\n"
    # The sweep's record got its rows, and what it ran, through its recorder.
    written = json.loads((home / "record.json").read_text())
    assert written["kind"] == "server-sweep" and written["points"] == rows
    assert written["ran"] == ["max-num-seqs=1", "max-num-seqs=4"] and written["reused"] == []
    assert written["outcome"] == "ok" and written["exit_code"] == 0
    csv = (home / "summary.csv").read_text().splitlines()
    assert csv[0].startswith("server,bench,flow_run") and len(csv) == 3
    assert not list(home.glob("*.png"))  # the plots are its report (plotly)

    report = proctor("report", "mns", "--json")  # the group's newest sweep
    assert report.returncode == 0, report.stderr
    shown = json.loads(report.stdout)
    assert shown["kind"] == "server-sweep"
    assert {f["id"] for f in shown["figures"]} == {
        "server-sweep-throughput-latency",
        "server-sweep-pareto",
    }
    assert all(f["points"] >= 1 for f in shown["figures"])
    html = Path(shown["path"]).read_text()
    assert "max-num-seqs=1" in html and "Pareto" in html


def test_a_second_run_of_the_group_skips_finished_points_and_retries_failed_ones(
    fake_engine: int,
    isolated_runs: Path,
) -> None:
    args = grid(fake_engine, "resume", "mode=normal,http500")
    first = proctor(*args, timeout=300)
    assert first.returncode != 0, first.stderr[-3000:]
    one = json.loads(first.stdout)
    assert one["ran"] == ["mode=normal", "mode=http500"] and one["reused"] == []
    good = next(r for r in one["rows"] if r["server"] == {"mode": "normal"})
    assert good["exit_code"] == 0 and good["metrics"]["output_throughput"] > 0

    second = proctor(*args, timeout=300)
    assert second.returncode == first.returncode, second.stderr[-3000:]
    two = json.loads(second.stdout)
    assert two["reused"] == ["mode=normal"] and two["ran"] == ["mode=http500"]
    again = next(r for r in two["rows"] if r["server"] == {"mode": "normal"})
    assert again["flow_run"] == good["flow_run"]  # not run again: its flow is reused
    bad = [
        r["flow_run"] for s in (one, two) for r in s["rows"] if r["server"] == {"mode": "http500"}
    ]
    assert len(set(bad)) == 2  # retried: a new flow


def test_slo_search_bisects_to_the_highest_concurrency_that_meets_it(
    fake_engine: int,
    isolated_runs: Path,
) -> None:
    # TTFT = 10 ms + 50 ms per request already running: c=3 gives ~110 ms, c=4 ~160 ms.
    server = start(fake_engine, "--ttft", "0.01", "--ttft-per-running", "0.05")
    try:
        result = proctor(
            "sweep",
            "--slo",
            "p99_ttft_ms<=135",
            "--search",
            "concurrency",
            "--lo",
            "1",
            "--hi",
            "8",
            "--port",
            str(fake_engine),
            "--isl",
            "8",
            "--osl",
            "4",
            "--prompt-multiplier",
            "4",
            timeout=300,
        )
        assert result.returncode == 0, result.stderr[-3000:]
        assert result.stdout.strip() == "concurrency: 3"
        probes = [line for line in result.stderr.splitlines() if line.startswith("[slo] probe")]
        assert [p.split(":")[1].strip() for p in probes] == [
            "concurrency 1",
            "concurrency 8",
            "concurrency 4",
            "concurrency 2",
            "concurrency 3",
        ]
        assert "meets the SLO" in probes[0] and "misses the SLO" in probes[1]

        missed = proctor(
            "sweep",
            "--slo",
            "p99_ttft_ms<=1",
            "--search",
            "concurrency",
            "--lo",
            "1",
            "--hi",
            "8",
            "--port",
            str(fake_engine),
            "--isl",
            "8",
            "--osl",
            "4",
            "--prompt-multiplier",
            "4",
            "--json",
            timeout=300,
        )
        assert missed.returncode == 3, missed.stderr[-3000:]
        out = json.loads(missed.stdout)
        assert out["answer"] is None and len(out["probes"]) == 1
        assert "p99_ttft_ms" in out["probes"][0]["why"][0]
    finally:
        proctor("serve", "stop", server)


def test_a_flow_file_with_a_sweep_table_is_a_server_sweep(
    fake_engine: int,
    isolated_runs: Path,
    tmp_path: Path,
) -> None:
    path = tmp_path / "grid.toml"
    path.write_text(f"""
[flow]
engine = "fake"
model = "m"
port = {fake_engine}
poll = "1s"
extra = ["--ttft", "0.01"]

[sweep]
server = {{ itl = [0.001, 0.02] }}
bench = {{ concurrency = [2], request_rate = ["inf", 50], isl = 8, osl = 4, num_prompts = 6 }}
""")
    for command in ("flow", "sweep"):
        result = proctor(command, "--file", str(path), "--json", timeout=300)
        assert result.returncode == 0, result.stderr[-3000:]
        summary = json.loads(result.stdout)
        assert summary["group"] == "grid"  # the file's name when the table names none
        rows = summary["rows"]
        assert [(r["server"]["itl"], r["bench"]["request_rate"]) for r in rows] == [
            (0.001, "inf"),
            (0.001, 50),
            (0.02, "inf"),
            (0.02, 50),
        ]
        # A longer gap between tokens: a slower median TPOT for each user.
        assert rows[2]["metrics"]["median_tpot_ms"] > rows[0]["metrics"]["median_tpot_ms"]
    assert summary["reused"] == ["itl=0.001", "itl=0.02"]  # the second command reused both


def test_ctrl_c_tears_the_point_down_and_runs_no_later_point(
    fake_engine: int,
    isolated_runs: Path,
    tmp_path: Path,
) -> None:
    import signal
    import subprocess
    import sys
    import time

    from tests.helpers import as_from_a_shell

    args = grid(fake_engine, "stop", "max-num-seqs=1,2", extra=("--itl", "0.5"))
    # Output to files, not pipes: a pipe nobody reads while the test polls can fill and stall
    # the sweep mid-point.
    out_path, err_path = tmp_path / "sweep.out", tmp_path / "sweep.err"
    with out_path.open("w") as out, err_path.open("w") as err_file:
        sweep = subprocess.Popen(
            [sys.executable, "-m", "proctor.cli.main", *args],
            stdout=out,
            stderr=err_file,
            preexec_fn=as_from_a_shell,
        )
    deadline = time.monotonic() + 120
    flows: list[dict[str, object]] = []
    draining = False
    while time.monotonic() < deadline and sweep.poll() is None and not draining:
        flows = (
            [
                json.loads(r.read_text())
                for r in isolated_runs.glob("*/record.json")
                if '"kind": "flow"' in r.read_text()
            ]
            if isolated_runs.exists()
            else []
        )
        draining = any(s["step"] == "drain" for f in flows for s in f["steps"])  # type: ignore[attr-defined]
        time.sleep(0.1)
    seen = (
        f"exit {sweep.poll()}, steps {[[s['step'] for s in f['steps']] for f in flows]}, "  # type: ignore[attr-defined]
        f"stdout {out_path.read_text()[-2000:]!r}, stderr {err_path.read_text()[-2000:]!r}"
    )
    assert draining, f"the first point never reached its drain: {seen}"
    sweep.send_signal(signal.SIGINT)
    sweep.wait(timeout=120)
    assert sweep.returncode == 130, err_path.read_text()[-3000:]
    flows = [
        json.loads(r.read_text())
        for r in isolated_runs.glob("*/record.json")
        if '"kind": "flow"' in r.read_text()
    ]
    assert len(flows) == 1 and flows[0]["exit_code"] == 130
    home = [
        json.loads(r.read_text())
        for r in isolated_runs.glob("*/record.json")
        if '"kind": "server-sweep"' in r.read_text()
    ]
    assert home[0]["outcome"] == "stopped"

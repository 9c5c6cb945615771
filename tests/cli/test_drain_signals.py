"""The drain against signals proctor itself emits: its bench's progress lines, its own probes
of the server (/metrics, /health) in the server's log, and an idle server's stats lines. Each
pair run together, through the real CLI with real processes: progress is requests answered,
never bytes a heartbeat wrote, and a finished workload drains whatever the server prints."""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.cli.test_serve_flow import curl, fake_engine, fake_flow, start  # noqa: F401
from tests.helpers import log_tails, proctor


def _drain_step(flow: dict[str, object]) -> dict[str, object]:
    return next(s for s in flow["steps"] if s["step"] == "drain")  # type: ignore[attr-defined, index]


def test_bench_against_a_server_that_hangs_mid_run_is_a_hang_with_inspection(
    fake_engine: int,
    isolated_runs: Path,
    tmp_path: Path,
) -> None:
    """The bench writes a progress line every 0.5 s whether or not a request completes: the
    drain reads its done counts (and the engine's metrics), so the hang is a hang (1), with
    the server's stacks taken, not a drain that waits for the bench's own timeout."""
    port = fake_engine
    path = tmp_path / "flow.toml"
    path.write_text(f"""
[flow]
engine = "fake"
model = "m"
port = {port}
poll = "1s"
stuck_polls = 5
max = "90s"
extra = ["--hang-after-requests", "6", "--itl", "0.01"]

[[flow.workload]]
bench = {{ isl = 8, osl = 16, concurrency = 2, num_prompts = 40, num_warmups = 0, log_every = 0.5 }}
""")
    result = proctor("flow", "--file", str(path), "--json", timeout=300)
    assert result.returncode == 1, result.stderr[-3000:] + log_tails(isolated_runs)
    flow = json.loads(result.stdout)
    drain = _drain_step(flow)
    assert drain["outcome"] == "hang", drain
    assert [s["step"] for s in flow["steps"]][-2:] == ["inspect", "teardown"]
    assert list((isolated_runs / flow["server_run"] / "inspect").glob("*-pyspy.txt"))
    # The bench did write its heartbeat lines all along: they were not taken for progress.
    (bench_log,) = [
        p
        for p in (isolated_runs / flow["workload_runs"][0]["run_id"]).glob("*.log")
        if "[bench] benchmark:" in p.read_text()
    ]
    beats = re.findall(r"\[bench\] benchmark: (\d+)/40 done", bench_log.read_text())
    assert len(beats) >= 3 and len(set(beats[-3:])) == 1, beats
    flow_log = (isolated_runs / flow["run_id"] / "flow.log").read_text()
    assert "progress=metrics+bench" in flow_log


def test_idle_stats_lines_do_not_keep_a_finished_workload_from_draining(
    fake_engine: int,
    isolated_runs: Path,
) -> None:
    """The issue's reproducer: no /metrics, and the fake server prints a stats line every
    second (and an access line for each of proctor's own probes): the workload finished, so
    the flow drains (0), well before its --max (which was exit 4)."""
    port = fake_engine
    result = proctor(
        "flow",
        "--engine",
        "fake",
        "--model",
        "m",
        "--port",
        str(port),
        "--poll",
        "1s",
        "--max",
        "60s",
        "--workload-cmd",
        curl(port),
        "--json",
        "--",
        "--no-metrics",
        "--log-probes",
        "--stats-interval",
        "0.2",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    drain = _drain_step(json.loads(result.stdout))
    assert drain["outcome"] == "drained" and drain["exit_code"] == 0, drain


def test_hang_with_only_the_server_log_is_found_through_its_stats_lines(
    fake_engine: int,
    isolated_runs: Path,
) -> None:
    """No /metrics, no access lines the profile knows: the server's log is the only signal.
    It grows every 0.2 s with stats lines that say nothing is generated, and with proctor's
    own /metrics probes; neither is progress, so a stream stuck after its first token is a
    hang (1), where the log's growth alone hid it (exit 4 at --max)."""
    port = fake_engine
    result = proctor(
        "flow",
        "--engine",
        "fake",
        "--model",
        "m",
        "--port",
        str(port),
        "--poll",
        "1s",
        "--stuck-polls",
        "4",
        "--max",
        "60s",
        "--no-inspect",
        "--workload-cmd",
        curl(port, tokens=500, stream=True),
        "--json",
        "--",
        "--no-metrics",
        "--log-probes",
        "--no-access-log",
        "--stats-interval",
        "0.2",
        "--hang-after-requests",
        "0",
    )
    assert result.returncode == 1, result.stderr[-3000:]
    drain = _drain_step(json.loads(result.stdout))
    assert drain["outcome"] == "hang", drain


def test_drain_max_is_kept_between_polls(fake_engine: int, isolated_runs: Path) -> None:
    """`drain --max 3s` with a 10 s poll ends at its limit (4), and says so: not "after 10s"."""
    server = start(fake_engine)
    assert proctor("serve", "ready", server, "--timeout", "30s").returncode == 0
    try:
        client = json.loads(proctor("run", "-d", "--json", "--", "sleep", "60").stdout)["run_id"]
        result = proctor(
            "drain", server, "--client", client, "--max", "3s", "--poll", "10s", "--json"
        )
        assert result.returncode == 4, result.stderr
        answer = json.loads(result.stdout)
        assert answer["outcome"] == "timeout" and "within 3.0s" in answer["reason"]
        assert answer["elapsed_s"] < 10, answer  # the poll's length would be 10 s or more
        took = re.search(r"\(after ([0-9.]+)s\)", answer["message"])
        assert took and float(took.group(1)) < 10, answer["message"]
        proctor("runs", "stop", client)
    finally:
        assert proctor("serve", "stop", server).returncode == 0


def test_bad_client_pattern_is_one_line_and_64(isolated_runs: Path) -> None:
    for args in (
        ["drain", "--port", "1", "--client-pattern", "("],
        [
            "flow",
            "--engine",
            "fake",
            "--model",
            "m",
            "--workload-cmd",
            "true",
            "--client-pattern",
            "(",
        ],
    ):
        result = proctor(*args)
        assert result.returncode == 64, result.stderr
        assert "Traceback" not in result.stderr and "--client-pattern" in result.stderr
        assert not isolated_runs.exists() or not any(isolated_runs.iterdir())


def test_a_server_proctor_stopped_during_a_drain_is_stopped_not_died(
    fake_engine: int,
    isolated_runs: Path,
) -> None:
    """`runs stop SERVER` while a drain watches it: proctor's own reason (stopped, 130), not
    "server died" (3). The server's supervisor writes the stop before it signals."""
    from tests.helpers import proctor_popen

    server = start(fake_engine)
    assert proctor("serve", "ready", server, "--timeout", "30s").returncode == 0
    client = json.loads(proctor("run", "-d", "--json", "--", "sleep", "60").stdout)["run_id"]
    drain = proctor_popen("drain", server, "--client", client, "--poll", "1s", "--json")
    assert proctor("runs", "stop", server).returncode == 0
    out, err = drain.communicate(timeout=120)
    assert drain.returncode == 130, err
    answer = json.loads(out)
    assert answer["outcome"] == "stopped" and "stop requested" in answer["reason"], answer
    proctor("runs", "stop", client)


def test_requests_the_bench_gave_up_on_are_a_hang_not_error_answers(
    fake_engine: int,
    isolated_runs: Path,
    tmp_path: Path,
) -> None:
    """A server that stops answering while the bench's --idle-timeout (1 s) is shorter than
    the drain's stuck window (5 polls): every later request fails as a timeout. A timeout is
    no answer at all, not an error answer: the drain says hang (1), with the server's stacks
    taken, never fault (2). The progress line counts them apart (`N failed (T timed out)`)."""
    port = fake_engine
    path = tmp_path / "flow.toml"
    path.write_text(f"""
[flow]
engine = "fake"
model = "m"
port = {port}
poll = "1s"
stuck_polls = 5
max = "90s"
extra = ["--hang-after-requests", "6", "--hang-whole-engine", "--itl", "0.01"]

[[flow.workload]]
bench = {{ isl = 8, osl = 16, concurrency = 2, num_prompts = 400, num_warmups = 0, log_every = 0.5, idle_timeout = 1 }}
""")
    result = proctor("flow", "--file", str(path), "--json", timeout=300)
    assert result.returncode == 1, result.stderr[-3000:] + log_tails(isolated_runs)
    flow = json.loads(result.stdout)
    assert _drain_step(flow)["outcome"] == "hang", flow
    assert list((isolated_runs / flow["server_run"] / "inspect").glob("*-pyspy.txt"))
    (bench_log,) = [
        p
        for p in (isolated_runs / flow["workload_runs"][0]["run_id"]).glob("*.log")
        if "[bench] benchmark:" in p.read_text()
    ]
    timed_out = re.findall(r"(\d+) failed \((\d+) timed out\)", bench_log.read_text())
    assert timed_out and int(timed_out[-1][1]) >= 2, bench_log.read_text()[-2000:]

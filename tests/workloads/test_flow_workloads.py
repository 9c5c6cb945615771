"""The pure parts of listed flow workloads, server grids and SLO search: parsing, argv, Pareto
front, SLO judgement. The runs themselves are tested in tests/cli (fake server) and with vLLM."""

from __future__ import annotations

import json
import sys
from typing import Any

import pytest

from proctor.errors import UsageError
from proctor.jobs.flow import FlowJob
from proctor.jobs.serve import ServeJob
from proctor.server_sweep import apply_point, grid_job, pareto_front, parse_axis
from proctor.workloads.flow_workloads import command_for, parse_workload, parse_workloads
from proctor.workloads.slo import judge, parse_slo, percentiles_needed

URL = "http://127.0.0.1:9000"


def _job(argv: list[str]) -> dict[str, Any]:
    """The job a workload's run is started with (`python -m proctor.jobs run JOB`)."""
    assert argv[:4] == [sys.executable, "-m", "proctor.jobs", "run"]
    job: dict[str, Any] = json.loads(argv[4])
    return job


def test_bench_options_become_a_bench_job() -> None:
    w = parse_workload(
        {
            "bench": {
                "isl": 16,
                "num_prompts": 8,
                "ignore_eos": False,
                "goodput": ["ttft:500", "tpot:30"],
                "request-rate": "inf",
            }
        }
    )
    job = _job(command_for(w, URL, "m", runs_dir="runs"))
    assert job["kind"] == "bench" and job["base_url"] == URL and job["model"] is None
    assert (job["isl"], job["num_prompts"], job["ignore_eos"]) == (16, 8, False)
    assert job["goodput_slos_ms"] == {"ttft": 500.0, "tpot": 30.0}
    assert job["request_rate"] == "inf" and job["progress"] is False
    assert w.run_kind == "bench" and w.label == "bench"


def test_eval_gets_the_served_model_and_sweep_a_concurrency_list() -> None:
    ev = parse_workload({"eval": {"task": "gsm8k", "limit": 5, "num-concurrent": 2}, "name": "acc"})
    job = _job(command_for(ev, URL, "served", runs_dir="runs"))
    assert (job["kind"], job["task"], job["model"], job["base_url"]) == (
        "eval",
        "gsm8k",
        "served",
        URL,
    )
    assert (job["limit"], job["num_concurrent"], job["num_fewshot"]) == (5, 2, 3)
    assert ev.label == "acc" and ev.run_kind == "eval"
    own = parse_workload({"eval": {"model": "mine", "fewshot": 1}})
    job = _job(command_for(own, URL, "served", runs_dir="runs"))
    assert (job["model"], job["num_fewshot"]) == ("mine", 1)
    sw = parse_workload({"sweep": {"concurrency": [1, 4], "isl": 8, "repeat": 2}})
    job = _job(command_for(sw, URL, "m", runs_dir="R"))
    assert job["kind"] == "sweep" and job["concurrency"] == [1, 4] and job["runs_dir"] == "R"
    assert (job["bench"]["isl"], job["bench"]["repeat"], job["bench"]["base_url"]) == (8, 2, URL)


def test_offline_table_becomes_an_offline_job_resolved_where_it_runs() -> None:
    w = parse_workload(
        {
            "offline": {
                "engine": "vllm",
                "model": "/models/x",
                "min-free-disk": 0,
                "args": ["--enforce-eager", 1],
                "name": "off",
                "env": ["A=1"],
            },
            "env": ["B=2"],
        }
    )
    job = _job(command_for(w, URL, "m", runs_dir="runs"))
    assert (job["kind"], job["engine"], job["model"], job["cmd"]) == (
        "offline",
        "vllm",
        "/models/x",
        False,
    )
    assert job["args"] == ["--enforce-eager", "1"] and job["min_free_disk_gib"] == 0
    assert job["resolved"] is None  # the engine profile is read where the job runs
    # The table's name and env are its run's, as on any entry.
    assert (w.name, w.env, w.run_kind) == ("off", ["B=2", "A=1"], "offline")
    cmd = parse_workload({"offline": {"engine": "vllm", "cmd": True, "args": ["./run.sh"]}})
    job = _job(command_for(cmd, URL, "m", runs_dir="runs"))
    assert job["cmd"] is True and job["args"] == ["./run.sh"] and job["model"] is None


def test_cmd_is_split_as_a_shell_would() -> None:
    w = parse_workload({"cmd": "python x.py --msg 'a b'", "env": ["K=V"]})
    assert command_for(w, URL, "m", runs_dir=".") == ["python", "x.py", "--msg", "a b"]
    assert w.env == ["K=V"] and w.kind == "cmd"
    assert w.model_dump(exclude_defaults=True) == {
        "job": {"argv": ["python", "x.py", "--msg", "a b"]},
        "env": ["K=V"],
    }


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"bench": {}, "cmd": "x"}, "exactly one of"),
        ({"bnech": {}}, "unknown keys: bnech"),
        ({"cmd": "x", "env": ["NOEQUALS"]}, "NAME=VALUE"),
        ({"eval": {"task": "mmlu"}}, "eval task 'mmlu'"),
        ({"bench": {"concurency": 4}}, "concurency"),
        ({"bench": {"isl": "many"}}, "isl: Input should be a valid integer"),
        ({"eval": {"fewshot": 3, "bogus": 1}}, "bogus"),
        ({"eval": {"limit": 0}}, "--limit must be >= 1"),
        ({"offline": {"engine": "vllm", "timeout": "5m", "model": "/m"}}, "timeout"),
        ({"offline": {"engine": "vllm", "cmd": True}}, "--cmd needs the command"),
        ({"cmd": ""}, "cmd must be"),
    ],
)
def test_malformed_entries_are_usage_errors(entry: dict[str, object], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        parse_workload(entry)


def test_a_single_table_is_a_list_of_one() -> None:
    assert [w.kind for w in parse_workloads({"cmd": "true"})] == ["cmd"]
    assert parse_workloads(None) == []


FLOW = FlowJob(server=ServeJob(engine="vllm", model="m", extra=["--enforce-eager"]))


def test_server_grid_points_and_engine_flags() -> None:
    grid = grid_job(
        FLOW,
        {
            "server": {"max_num_seqs": [4, 8], "enable-chunked-prefill": [True, False]},
            "bench": {"concurrency": [1, 2], "isl": 8},
        },
        "g",
    )
    assert len(grid.server_points()) == 4 and len(grid.bench_points()) == 2
    assert grid.bench_points()[1] == {"isl": 8, "concurrency": 2}
    point = grid.point({"max-num-seqs": 4, "enable-chunked-prefill": False, "tp": 2})
    assert point.server.extra == [
        "--enforce-eager",
        "--max-num-seqs",
        "4",
        "--no-enable-chunked-prefill",
    ]
    assert point.server.tp == 2 and FLOW.server.extra == ["--enforce-eager"]
    assert [w.label for w in point.workloads] == ["bench-c1", "bench-c2"]
    assert point.continue_on_failure and not FLOW.continue_on_failure
    assert apply_point(FLOW.server, {"tp": 4}).tp == 4
    assert parse_axis("max-num-seqs=64,128") == ("max-num-seqs", [64, 128])
    with pytest.raises(UsageError, match="cannot be a list"):
        grid_job(FLOW, {"server": {"tp": [1]}, "bench": {"isl": [1, 2]}}, "g")
    with pytest.raises(UsageError, match="--server-grid"):
        parse_axis("max-num-seqs")


def test_pareto_front_keeps_the_rows_nothing_beats() -> None:
    rows = [
        {"exit_code": 0, "tok_s_per_user": u, "tok_s_per_gpu": g}
        for u, g in [(10, 100), (20, 80), (15, 70), (30, 20), (30, 10)]
    ]
    rows.append({"exit_code": 3, "tok_s_per_user": 99, "tok_s_per_gpu": 999})  # failed: out
    assert pareto_front(rows) == [0, 1, 3]


def test_slo_conditions_percentiles_and_judgement() -> None:
    slo = parse_slo("p99_ttft_ms<=500, p90_tpot_ms<30,output_throughput>=10")
    assert [str(c) for c in slo] == ["p99_ttft_ms<=500", "p90_tpot_ms<30", "output_throughput>=10"]
    assert percentiles_needed(slo) == ["90", "99"]
    ok, why = judge(slo, {"p99_ttft_ms": 500, "p90_tpot_ms": 29.9, "output_throughput": 10}, 0)
    assert ok and all("ok" in w for w in why)
    ok, why = judge(slo, {"p99_ttft_ms": 501, "p90_tpot_ms": 1, "output_throughput": 50}, 0)
    assert not ok and "p99_ttft_ms 501.00 FAILS <= 500" in why
    ok, why = judge(slo, {"p99_ttft_ms": 1, "p90_tpot_ms": 1, "output_throughput": 50}, 3)
    assert not ok and why[0] == "bench exited 3"
    for bad in ("p99_ttft_ms=500", "ttft<=fast", ""):
        with pytest.raises(UsageError):
            parse_slo(bad)


def test_a_probe_whose_client_fell_behind_does_not_meet_the_slo() -> None:
    """A rate the client did not reach is not that rate: the probe misses, and says why."""
    slo = parse_slo("p99_ttft_ms<=500")
    behind = {"schedule": {"target_rate": 100.0, "achieved_rate": 80.0}}
    ok, why = judge(slo, {"p99_ttft_ms": 10}, 0, behind)
    assert not ok and any("achieved 80.00 req/s of 100" in w for w in why)
    kept = {
        "schedule": {"target_rate": 100.0, "achieved_rate": 99.0},
        "client": {"client_bound": True, "reasons": ["loop lag p99 12 ms"]},
    }
    ok, why = judge(slo, {"p99_ttft_ms": 10}, 0, kept)
    assert ok and any(w.startswith("note: client-bound") for w in why)

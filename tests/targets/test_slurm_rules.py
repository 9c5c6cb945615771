"""Slurm target pieces without a cluster: target URLs, time limits, sacct output, outcomes."""

from __future__ import annotations

import pytest

from proctor.errors import ExitCode, UsageError
from proctor.spec.config import ProjectConfig
from proctor.targets.slurm.options import (
    SlurmFlags,
    parse_target,
    resolve_slurm_options,
    slurm_minutes,
)
from proctor.targets.slurm.outcome import NodeResult, decide
from proctor.targets.slurm.scheduler import elapsed_seconds, parse_kv, parse_sacct
from proctor.targets.slurm.script import RemoteLayout, render_script


def test_target_urls() -> None:
    assert parse_target("slurm://local").local
    assert parse_target("slurm://localhost").local
    spec = parse_target("slurm://alice@login.example.org:2222")
    assert (spec.host, spec.user, spec.port) == ("login.example.org", "alice", 2222)
    assert spec.display() == "slurm://alice@login.example.org:2222"
    for bad in ("ssh://host", "slurm://a:pw@host", "slurm://host/some/path"):
        with pytest.raises(UsageError):
            parse_target(bad)


@pytest.mark.parametrize(
    ("text", "minutes"),
    [
        ("1", 1),
        ("90", 90),
        ("30s", 1),
        ("61s", 2),
        ("2h", 120),
        ("1:30:00", 90),
        ("1-00:00:00", 1440),
    ],
)
def test_time_limits_in_whole_minutes(text: str, minutes: int) -> None:
    assert slurm_minutes(text) == minutes


def test_flags_over_config_over_defaults() -> None:
    config = ProjectConfig.model_validate(
        {"slurm": {"target": "slurm://local", "nodes": 4, "partition": "gpu", "time": "2h"}}
    )
    opts = resolve_slurm_options(SlurmFlags(nodes=2), config)
    assert (opts.nodes, opts.partition, opts.time_minutes, opts.gpus_per_node) == (2, "gpu", 120, 0)
    assert opts.origins["nodes"].origin == "flag"
    assert opts.origins["partition"].origin == "config"
    assert opts.origins["gpus_per_node"].origin == "default"
    with pytest.raises(UsageError, match="no Slurm target"):
        resolve_slurm_options(SlurmFlags(), ProjectConfig())
    with pytest.raises(UsageError, match=r"slurm\.nodes"):
        resolve_slurm_options(SlurmFlags(), ProjectConfig.model_validate({"slurm": {"nodes": 0}}))
    from_timeout = resolve_slurm_options(SlurmFlags(target="slurm://local"), ProjectConfig(), 150)
    assert (
        from_timeout.time_minutes == 3
        and from_timeout.origins["time_minutes"].origin == "from --timeout"
    )


def test_batch_script_runs_the_node_entry_once_per_node() -> None:
    opts = resolve_slurm_options(
        SlurmFlags(
            target="slurm://local",
            nodes=2,
            gpus_per_node=8,
            partition="gpu",
            time="10m",
            python="/opt/py/bin/python",
        ),
        ProjectConfig(),
    )
    text = render_script(opts, RemoteLayout("/shared/ws", "RID"), "proctor-x", "/shared/ws/src")
    assert "#SBATCH --nodes=2" in text and "#SBATCH --gpus-per-node=8" in text
    assert "#SBATCH --time=10" in text and "#SBATCH --partition=gpu" in text
    assert "#SBATCH --no-requeue" in text and "#SBATCH --ntasks-per-node=1" in text
    assert "/opt/py/bin/python -m proctor.targets.slurm.node /shared/ws/proctor/runs/RID" in text
    assert "#SBATCH --output=/shared/ws/proctor/runs/RID/slurm-%j.out" in text


SACCT = """\
42|proctor-x|TIMEOUT|0:0|00:01:17|77|n[1-2]|TimeLimit|2026-12-02T10:00:00|2026-12-02T10:01:17|00:01:00|gpu
42.batch|batch|CANCELLED|0:15|00:01:18|78|n1|None|2026-12-02T10:00:00|2026-12-02T10:01:18||
42.0|python|CANCELLED by 0|0:15|00:01:17|77|n[1-2]|None|2026-12-02T10:00:01|2026-12-02T10:01:18||
"""


def test_scontrol_one_line_output_is_read_as_key_values() -> None:
    line = "JobId=12 JobState=NODE_FAIL Reason=None Command=sh -c x=1 ExitCode=0:9\n"
    assert parse_kv(line) == {
        "JobId": "12",
        "JobState": "NODE_FAIL",
        "Reason": "None",
        "Command": "sh",
        "x": "1",
        "ExitCode": "0:9",
    }
    assert parse_kv("") == {}


def test_sacct_output_is_read_per_step() -> None:
    acct = parse_sacct(42, SACCT)
    assert acct is not None and acct.source == "sacct"
    assert (acct.state, acct.reason, acct.time_limit, acct.node_list) == (
        "TIMEOUT",
        "TimeLimit",
        "00:01:00",
        "n[1-2]",
    )
    assert [(s["step"], s["state"], s["exit_code"]) for s in acct.steps] == [
        ("batch", "CANCELLED", "0:15"),
        ("0", "CANCELLED", "0:15"),
    ]
    assert acct.as_dict()["elapsed_s"] == 77
    assert parse_sacct(7, SACCT) is None


def test_elapsed_formats() -> None:
    assert elapsed_seconds("00:01:17") == 77
    assert elapsed_seconds("1-02:00:00") == 93600
    assert elapsed_seconds("05:03") == 303
    assert elapsed_seconds("UNLIMITED") is None


def ok(node: str) -> NodeResult:
    return NodeResult(node, True, 0, None, "ok", True)


def test_outcomes_never_succeed_without_every_node_zero() -> None:
    assert decide("COMPLETED", [ok("n1"), ok("n2")]).outcome == "ok"
    lost = NodeResult("n2", True, None, None, "unknown")
    assert decide("COMPLETED", [ok("n1"), lost]).outcome == "unknown"
    assert decide("COMPLETED", []).outcome == "unknown"
    bad = decide("FAILED", [ok("n1"), NodeResult("n2", True, 3, None, "failed")])
    assert (bad.outcome, bad.exit_code, bad.failed_nodes, bad.decided_by) == (
        "failed",
        3,
        ["n2"],
        "command",
    )
    stopped = NodeResult("n1", True, 143, "SIGTERM", "stopped")
    timeout = decide("TIMEOUT", [stopped], reason="TimeLimit", time_limit="00:01:00")
    assert timeout.outcome == "timeout" and "TIMEOUT" in str(timeout.reason)
    assert "time limit 00:01:00" in str(timeout.reason)
    assert decide("CANCELLED", [stopped], stop_requested=True).outcome == "stopped"
    assert decide("CANCELLED", []).exit_code == 143
    node_fail = decide("NODE_FAIL", [stopped, lost], reason="NodeDown")
    assert (node_fail.outcome, node_fail.exit_code, node_fail.failed_nodes) == (
        "failed",
        int(ExitCode.FAULT),
        ["n2"],
    )
    for state in ("PREEMPTED", "OUT_OF_MEMORY", "BOOT_FAIL"):
        assert decide(state, [ok("n1")]).outcome == "failed"
    own_limit = NodeResult("n1", True, 143, "SIGTERM", "timeout")
    assert decide("COMPLETED", [own_limit, ok("n2")]).outcome == "timeout"

"""The GPU health preflight and the change after a run (issue 24 §4), judged on NVML answers
recorded on a real H100 (tests/data/gpu, README there) and replayed by RecordedReader. Where a
test needs a situation the H100 did not show (an ECC error, heat, a hardware Xid), it changes
one field of a real answer and says which. The same paths on the real GPU:
tests/monitors/test_gpu_health_gpu.py."""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any

import pytest

from proctor.errors import ExitCode, TargetUnavailable
from proctor.monitors.gpu_health import (
    RecordedReader,
    assess,
    change_line,
    compare,
    one_line,
    parse_xids,
    preflight,
    read_kernel_log,
    record_text,
    run_probe,
    validity_check,
    visible,
)
from proctor.record.schema import GpuHealth, parse_record
from proctor.results.validity import Validity, with_check
from proctor.spec.config import load_config
from proctor.spec.plan import RunFlags, resolve_run_plan
from proctor.store.db import Store, gpu_health_metrics
from proctor.supervise.launch import prepare_run
from tests.helpers import only_run, proctor

DATA = Path(__file__).resolve().parents[1] / "data" / "gpu"
FAULTS = Path(__file__).resolve().parents[1] / "data" / "captured" / "gpu-faults"
HOLDER_PID, HOLDER_MIB = 548, 2658.0  # what h100-held.json recorded
T0, T1 = "2026-12-06T00:20:00.000+00:00", "2026-12-06T00:20:24.000+00:00"


def answers(name: str) -> dict[str, Any]:
    return dict(json.loads((DATA / f"h100-{name}.json").read_text()))


def device(a: dict[str, Any]) -> dict[str, Any]:
    return dict(a["nvml"]["devices"][0])


def at(when: str) -> Any:
    return lambda: when


def test_idle_h100_passes_and_says_what_it_read() -> None:
    a = answers("idle")
    doc = assess(a, now=at(T0), env={})
    assert doc["ok"] is True and doc["status"] == "ok" and doc["selection"] == "all GPUs"
    [gpu] = doc["devices"]
    assert gpu["uuid"] == device(a)["uuid"] and gpu["processes"] == []
    assert gpu["probe"]["ok"] is True and gpu["probe"]["bytes"] == 8 * 2**20
    assert gpu["not_exposed"] == [
        "retired_pages.double_bit",
        "retired_pages.pending",
        "retired_pages.single_bit",
    ]
    line = one_line(doc)
    assert line.startswith("gpu health: ok on 1x NVIDIA H100 80GB HBM3: no other process")
    assert "no Xid since boot" in line and "power limit 700 W" in line and "CUDA copy ok" in line
    assert GpuHealth.model_validate(doc).devices[0].enforced_power_limit_w == 700.0


def test_another_process_holding_memory_fails_a_run_that_uses_the_gpu() -> None:
    doc = assess(answers("held"), env={}, process_name=lambda pid: "python3")
    assert doc["ok"] is False and doc["status"] == "failed"
    [problem] = doc["problems"]
    assert f"pid {HOLDER_PID} (python3) {HOLDER_MIB:.0f} MiB" in problem
    assert one_line(doc).startswith("gpu health: FAILED on 1x NVIDIA H100 80GB HBM3: GPU 0:")


def test_a_client_run_records_the_server_processes_without_judging_them() -> None:
    doc = assess(answers("held"), mode="counters", env={}, process_name=lambda pid: None)
    assert doc["ok"] is True
    assert doc["devices"][0]["processes"] == [
        {"pid": HOLDER_PID, "memory_mib": HOLDER_MIB, "name": None}
    ]
    assert doc["devices"][0]["probe"] is None  # no CUDA check for a client
    assert "1 process(es) on the GPUs (not judged" in one_line(doc)


def test_own_pids_are_not_other_processes() -> None:
    doc = assess(answers("held"), env={}, own_pids=[HOLDER_PID])
    assert doc["ok"] is True


@pytest.mark.parametrize(
    ("field", "value", "said"),
    [
        (("ecc", "volatile_uncorrected"), 2, "2 uncorrected ECC errors since the driver loaded"),
        (("remapped_rows", "pending"), True, "row remapping pending"),
        (("remapped_rows", "failure"), True, "row remapping failed"),
        (("clock_event_reasons",), 0x40 | 0x1, "clocks held down: hw_thermal_slowdown"),
        (("clock_event_reasons",), 0x8, "clocks held down: hw_slowdown"),
    ],
)
def test_each_hardware_problem_fails_the_preflight(
    field: tuple[str, ...], value: Any, said: str
) -> None:
    a = copy.deepcopy(answers("idle"))  # one field of the real answer changed
    target = a["nvml"]["devices"][0]
    for key in field[:-1]:
        target = target[key]
    target[field[-1]] = value
    doc = assess(a, env={})
    assert (
        doc["ok"] is False
        and len(doc["problems"]) == 1
        and doc["problems"][0].startswith(f"GPU 0: {said}")
    )


def test_power_cap_or_idle_reasons_are_no_problem() -> None:
    a = copy.deepcopy(answers("idle"))
    a["nvml"]["devices"][0]["clock_event_reasons"] = 0x1 | 0x4  # idle, power cap
    doc = assess(a, env={})
    assert doc["ok"] is True
    assert doc["devices"][0]["clock_event_reasons"] == ["gpu_idle", "sw_power_cap"]


def test_xids_since_boot_hardware_ones_fail_program_faults_are_recorded() -> None:
    h200 = (FAULTS / "h200" / "xid.txt").read_text()  # 43 and 31: a program's own faults
    a = copy.deepcopy(answers("idle"))
    a["kernel_log"]["text"] += "\n" + h200  # same PCI address (0000:00:06) as the H100
    doc = assess(a, env={})
    assert doc["ok"] is True
    assert [(x["xid"], x["count"]) for x in doc["devices"][0]["xids"]] == [(31, 2), (43, 1)]
    assert "3 Xid(s) since boot, none of hardware" in one_line(doc)
    [fell_off] = [ln for ln in (FAULTS / "faults.txt").read_text().splitlines() if ": 79," in ln]
    a["kernel_log"]["text"] += "\n" + fell_off  # a public thread's line, at PCI 0000:44:00
    assert assess(a, env={})["ok"] is True  # another GPU's Xid is not this one's
    a["nvml"]["devices"][0]["pci_bus_id"] = "00000000:44:00.0"
    doc = assess(a, env={})
    assert doc["ok"] is False
    assert "Xid since boot: 79 x1 (GPU has fallen off the bus)" in doc["problems"][0]


def test_xid_lines_of_every_dmesg_form_parse() -> None:
    text = (FAULTS / "faults.txt").read_text()
    found = {(x["pci"], x["xid"]) for x in parse_xids(text)}
    assert ("0000:44:00", 79) in found and ("0000:cb:00", 13) in found  # bare and dmesg -T
    [first] = parse_xids((FAULTS / "h200" / "xid.txt").read_text())[:1]
    assert first["at_s"] == pytest.approx(34.571324) and first["pci"] == "0000:00:06"


def test_a_kernel_log_that_cannot_be_read_is_said_not_exposed() -> None:
    log = read_kernel_log(run=lambda argv: None)
    assert log["reason"].startswith("not exposed")
    a = {**answers("idle"), "kernel_log": log}
    doc = assess(a, env={})
    assert doc["ok"] is True and doc["devices"][0]["xids"] is None
    assert "Xid not exposed" in one_line(doc)


def test_a_cuda_check_that_fails_refuses_the_run() -> None:
    # The real check on this machine, which has no NVIDIA driver: its real failure.
    # The run's own PYTHONPATH (here: one that hides proctor) must not break the check.
    probe = run_probe({**os.environ, "PYTHONPATH": "/nonexistent"})
    assert probe["ok"] is False and "libcuda" in probe["error"]
    doc = assess({**answers("idle"), "probe": probe}, env={})
    assert doc["ok"] is False
    assert any("CUDA check failed: libcuda not found" in p for p in doc["problems"])


@pytest.mark.parametrize(
    ("cvd", "chosen"),
    [
        (None, [0]),
        ("0", [0]),
        ("GPU-b6a081dd", [0]),  # a UUID prefix, as CUDA accepts
        ("", []),
        ("1", []),  # no such GPU: CUDA's list ends there
        ("0,0", [0]),
        ("MIG-0", []),
    ],
)
def test_the_gpus_a_run_uses_follow_cuda_visible_devices(
    cvd: str | None, chosen: list[int]
) -> None:
    assert visible(answers("idle")["nvml"]["devices"], cvd)[0] == chosen


def test_no_visible_gpu_passes() -> None:
    doc = assess(answers("held"), env={"CUDA_VISIBLE_DEVICES": ""})
    assert doc["ok"] is True and doc["status"] == "no GPU" and doc["devices"] == []
    assert one_line(doc).startswith("gpu health: no GPU (CUDA_VISIBLE_DEVICES= leaves no GPU)")


def test_the_change_after_a_real_load_says_the_power_limit_and_is_not_a_fault() -> None:
    before = assess(answers("idle"), now=at(T0), env={})
    after = assess(answers("after-load"), mode="counters", now=at(T1), env={})
    change = compare(before, after)
    assert change is not None and change["window_s"] == 24.0
    [gpu] = change["devices"]
    # Oracle: the two recorded NVML violation counters, ns -> s.
    power_ns = device(answers("after-load"))["throttle_ns"]["power"]
    assert gpu["throttled_s"]["power"] == round(power_ns / 1e9, 3) == 20.32
    assert change["ok"] is True
    assert change["notes"] == ["GPU 0: clocks held at the power limit 20.3 s (85% of 24.0 s)"]
    assert validity_check(change) == (
        True,
        "no new ECC error or Xid, no throttling for heat "
        "(GPU 0: clocks held at the power limit 20.3 s (85% of 24.0 s))",
    )
    metrics = {
        n: v for n, v, _ in gpu_health_metrics({"gpu_health": before, "gpu_health_change": change})
    }
    assert metrics == {
        "gpu_healthy": 1.0,
        "gpu_ecc_new_uncorrected": 0.0,
        "gpu_throttle_power_s": 20.32,
        "gpu_throttle_heat_s": 0.0,
        "gpu_xid_new": 0.0,
    }


def test_heat_ecc_and_xids_during_the_run_are_faults() -> None:
    before = assess(answers("idle"), now=at(T0), env={})
    late = copy.deepcopy(answers("after-load"))  # the real answer, with three things added
    gpu = late["nvml"]["devices"][0]
    gpu["throttle_ns"]["hw_thermal"] = 1_500_000_000
    gpu["ecc"]["volatile_uncorrected"] = 1
    gpu["ecc"]["volatile_corrected"] = 3
    late["kernel_log"]["text"] += (
        "\n[  60.1] NVRM: Xid (PCI:0000:00:06): 94, pid=1, name=python3, Contained ECC error"
    )
    change = compare(before, assess(late, mode="counters", now=at(T1), env={}))
    assert change is not None and change["ok"] is False
    assert change["problems"] == [
        "GPU 0: 1 uncorrected ECC errors appeared",
        "GPU 0: Xid during the run: 94 x1",
        "GPU 0: clocks throttled for heat or a power brake: hw_thermal 1.5 s",
    ]
    assert "GPU 0: 3 corrected ECC errors appeared" in change["notes"]
    assert change_line(change).startswith("gpu during the run: GPU 0: 1 uncorrected")
    assert dict((n, v) for n, v, _ in gpu_health_metrics({"gpu_health_change": change})) == {
        "gpu_ecc_new_uncorrected": 1.0,
        "gpu_xid_new": 1.0,
        "gpu_throttle_power_s": 20.32,
        "gpu_throttle_heat_s": 1.5,
    }


def test_no_gpu_compares_to_nothing() -> None:
    none = assess({"nvml": {"reason": "NVML: NVML Shared Library Not Found"}}, env={})
    assert none["status"] == "no GPU" and compare(none, none) is None
    assert validity_check(None) is None


def test_the_gpu_check_decides_a_bench_verdict() -> None:
    v = Validity()
    v.add("errors", True, "0 failed")
    v.add("window", True, "30 s")
    doc = v.to_dict()
    bad = with_check(doc, "gpu", False, "GPU 0: 1 uncorrected ECC errors appeared")
    assert bad["verdict"] == "INVALID"
    assert bad["reasons"] == ["gpu: GPU 0: 1 uncorrected ECC errors appeared"]
    assert list(bad["checks"]) == ["errors", "window", "gpu"]
    assert with_check(doc, "gpu", True, "fine")["verdict"] == "VALID"
    assert doc["verdict"] == "VALID" and "gpu" not in doc["checks"]  # not changed in place


def test_the_wrapper_writes_the_gpu_check_into_a_bench_metrics_json(tmp_path: Path) -> None:
    from proctor.supervise.wrapper import Wrapper

    run = tmp_path / "run"
    run.mkdir()
    (run / "plan.json").write_text(json.dumps({"argv": ["true"], "log": "x.log"}))
    v = Validity()
    v.add("errors", True, "0 failed")
    (run / "metrics.json").write_text(
        json.dumps({"metrics": {"valid": 1, "completed": 10}, "validity": v.to_dict()})
    )
    before = assess(answers("idle"), now=at(T0), env={})
    late = copy.deepcopy(answers("after-load"))
    late["nvml"]["devices"][0]["throttle_ns"]["thermal"] = 2_000_000_000
    change = compare(before, assess(late, mode="counters", now=at(T1), env={}))
    assert change is not None
    Wrapper(run)._judge_bench(change)
    doc = json.loads((run / "metrics.json").read_text())
    assert doc["validity"]["verdict"] == "INVALID" and doc["metrics"]["valid"] == 0
    assert doc["validity"]["checks"]["gpu"]["detail"].startswith(
        "GPU 0: clocks throttled for heat or a power brake: thermal 2.0 s"
    )


def _plan(runs: Path, allow: bool = False) -> Any:
    flags = RunFlags(argv=["true"], runs_dir=str(runs), allow_unhealthy_gpu=allow or None)
    return resolve_run_plan(flags, load_config())


def test_a_failed_preflight_is_recorded_and_refused_with_69(isolated_runs: Path) -> None:
    with pytest.raises(TargetUnavailable) as refused:
        prepare_run(_plan(isolated_runs), health_reader=RecordedReader(answers("held")))
    assert refused.value.exit_code == ExitCode.UNAVAILABLE == 69
    assert "gpu health: FAILED" in refused.value.message and f"pid {HOLDER_PID}" in (
        refused.value.message
    )
    assert "--allow-unhealthy-gpu" in str(refused.value.hint)
    run = only_run(isolated_runs)
    assert (run / "exit_code").read_text().split()[0] == "69"
    record = json.loads((run / "record.json").read_text())
    assert record["outcome"] == "failed" and record["exit"]["code"] == 69
    assert record["gpu_health"]["status"] == "failed" and record["gpu_health"]["allowed"] is False
    assert [e["event"] for e in record["events"]][-1] == "gpu_preflight_failed"
    typed = parse_record(record)
    assert typed.gpu_health is not None and typed.gpu_health.devices[0].processes[0].pid == 548  # type: ignore[attr-defined]
    with Store(isolated_runs / "proctor.sqlite") as store:
        [row] = store.runs()
        metrics = {m["name"]: m["value"] for m in store.metrics(run.name)}
    assert row["outcome"] == "failed" and row["exit_code"] == 69
    assert metrics["gpu_healthy"] == 0.0


def test_allow_unhealthy_gpu_prepares_the_run_and_says_so(isolated_runs: Path) -> None:
    plan = _plan(isolated_runs, allow=True)
    assert plan.allow_unhealthy_gpu.as_dict() == {"value": True, "origin": "flag"}
    run, _ = prepare_run(plan, health_reader=RecordedReader(answers("held")))
    record = json.loads((run.path / "record.json").read_text())
    assert record["outcome"] == "starting" and not (run.path / "exit_code").exists()
    assert record["gpu_health"]["allowed"] is True
    assert record["options"]["allow_unhealthy_gpu"]["value"] is True


def test_a_run_here_says_no_gpu_and_passes(isolated_runs: Path) -> None:
    # This machine has no NVIDIA driver: the real reader's real answer.
    assert preflight()["status"] == "no GPU"
    result = proctor("run", "--json", "--", "true")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["gpu_health"]["status"] == "no GPU" and doc["gpu_health"]["ok"] is True
    assert "proctor: gpu health: no GPU (" in result.stderr
    shown = proctor("runs", "show", doc["run_id"])
    assert "gpu health no GPU" in " ".join(shown.stdout.split()), shown.stdout
    record = json.loads((Path(doc["dir"]) / "record.json").read_text())
    assert record["gpu_health_change"] is None  # nothing to compare without a GPU


def test_proctor_toml_can_allow_an_unhealthy_gpu_for_every_run(isolated_runs: Path) -> None:
    from proctor.spec.config import ProjectConfig, RunDefaults

    config = ProjectConfig(run=RunDefaults(allow_unhealthy_gpu=True))
    plan = resolve_run_plan(RunFlags(argv=["true"], runs_dir=str(isolated_runs)), config)
    assert plan.allow_unhealthy_gpu.value is True
    assert plan.allow_unhealthy_gpu.origin.startswith("config")


def test_the_report_and_listing_text_reads_typed_records() -> None:
    before = GpuHealth.model_validate(assess(answers("held"), env={}, process_name=lambda p: None))
    before.allowed = True
    text = record_text(before, None)
    assert text.startswith("FAILED on 1x NVIDIA H100 80GB HBM3: GPU 0: 1 other process(es)")
    assert "(run anyway: --allow-unhealthy-gpu); during the run: not compared" in text
    assert record_text(None, None) == "not checked"

"""GPU health before and after a run: a preflight on every GPU the run will use, and the
difference of the same counters after it (docs/gpu-health.md).

Three layers, so the judgement is tested on recorded real answers (tests/data/gpu):

    HealthReader      raw answers: NVML per device (NvmlHealthReader), the kernel log (Xid
                      lines), a tiny CUDA allocation and copy (cuda_probe.py, in a child
                      process); RecordedReader replays answers captured on a GPU machine
    assess()          answers -> the health document: per device, what was read and which
                      checks failed; `ok` False refuses the run (exit 69)
    compare()         two documents (before, after) -> what changed during the run: new ECC
                      errors, retired pages, remapped rows, Xids, time throttled for power or heat

Everything here is plain JSON and imports no pydantic: the run wrapper takes the reading
after the run. The typed view of these documents is record/schema.py (GpuHealth...).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, Protocol

Mode = Literal["full", "counters"]

_MIB = 1024 * 1024
PROBE_TIMEOUT_S = 90.0
PROBE_BYTES = 8 * _MIB

# Clock-event reason bits (nvmlClocksEventReason*): names, and the ones that mean trouble
# when a GPU is idle before a run (the hardware slows itself: heat, an external signal, a
# power brake). A power cap or sync boost at idle is no fault.
REASON_BITS: dict[int, str] = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
BAD_REASONS = (
    "hw_slowdown",
    "sw_thermal_slowdown",
    "hw_thermal_slowdown",
    "hw_power_brake_slowdown",
)

# Xids that mean the hardware or its firmware failed (NVIDIA's Xid catalogue): seen since boot,
# the GPU needs a reset or a reboot before its results can be trusted. Others (13, 31, 43: a
# program's own fault) are recorded, not judged.
HARDWARE_XIDS: dict[int, str] = {
    48: "double-bit ECC error",
    62: "internal micro-controller halt",
    63: "ECC page retirement or row remapping recorded",
    64: "ECC page retirement or row remapping failure",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    92: "high single-bit ECC error rate",
    94: "contained ECC error",
    95: "uncontained ECC error",
    119: "GSP RPC timeout",
    120: "GSP error",
    121: "C2C link error",
    140: "unrecovered ECC error",
}

# NVML performance policies whose violation counters (ns, cumulative) say how long clocks were
# held down, and for what.
VIOLATION_POLICIES = {"power": 0, "thermal": 1, "sync_boost": 2, "board_limit": 3, "reliability": 5}
# Field values (ns, cumulative) that split thermal and brake slowdowns where the driver has them.
EVENT_FIELDS = {"sw_thermal": 269, "hw_thermal": 270, "hw_power_brake": 271}
#: Counters whose growth during a run fails its "gpu" check: the GPU slowed itself for heat,
#: or an external power brake held it down. Time at the power limit ("power") is said only.
HEAT_COUNTERS = ("thermal", "sw_thermal", "hw_thermal", "hw_power_brake")

_XID_LINE = re.compile(
    r"^\s*(?:\[\s*(?P<ts>\d+\.\d+)\])?.*?NVRM: Xid \((?P<pci>[^)]*)\): (?P<xid>\d+)(?P<rest>.*)$"
)


# -- readers -----------------------------------------------------------------------------------
class HealthReader(Protocol):
    """Where the answers come from. Every method returns JSON-able data, so a reading can be
    captured on one machine and replayed on another (RecordedReader)."""

    def devices(self) -> dict[str, Any]:
        """{"backend", "driver", "devices": [answers per GPU]} or {"reason": why none}."""
        ...

    def kernel_log(self) -> dict[str, Any]:
        """{"source": "dmesg"|..., "text": ..., "uptime_s": ...} or {"reason": not exposed}."""
        ...

    def probe(self, env: Mapping[str, str]) -> dict[str, Any]:
        """The CUDA check (cuda_probe.py) under the run's environment."""
        ...


def _err(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".strip()[:200]


class NvmlHealthReader:
    """NVML through nvidia-ml-py; each answer a driver refuses is kept as its error text."""

    def devices(self) -> dict[str, Any]:
        try:
            import pynvml as nv
        except ImportError:
            return {"reason": "nvidia-ml-py is not installed"}
        try:
            nv.nvmlInit()
        except Exception as exc:  # library missing, driver not loaded
            return {"reason": f"NVML: {exc}"}
        try:
            count = nv.nvmlDeviceGetCount()
            driver = _ask(nv.nvmlSystemGetDriverVersion, {}, "driver")
            return {
                "backend": "nvml",
                "driver": _text(driver) if driver is not None else None,
                "devices": [read_device(nv, i) for i in range(count)],
            }
        except Exception as exc:
            return {"reason": f"NVML: {_err(exc)}"}
        finally:
            with contextlib.suppress(Exception):
                nv.nvmlShutdown()

    def kernel_log(self) -> dict[str, Any]:
        return read_kernel_log()

    def probe(self, env: Mapping[str, str]) -> dict[str, Any]:
        return run_probe(env)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _ask(call: Callable[[], Any], refused: dict[str, str], name: str) -> Any:
    try:
        return call()
    except Exception as exc:  # NVMLError_NotSupported, _NoPermission...: said, never fatal
        refused[name] = _err(exc)
        return None


def read_device(nv: Any, index: int) -> dict[str, Any]:
    """Every answer the preflight needs from one GPU, as NVML gave it."""
    h = nv.nvmlDeviceGetHandleByIndex(index)
    refused: dict[str, str] = {}
    out: dict[str, Any] = {"index": index, "uuid": _text(nv.nvmlDeviceGetUUID(h))}
    out["name"] = _text(nv.nvmlDeviceGetName(h))
    pci = _ask(lambda: nv.nvmlDeviceGetPciInfo(h), refused, "pci")
    out["pci_bus_id"] = _text(pci.busId) if pci is not None else None

    def memory() -> tuple[float, float]:
        try:
            mem = nv.nvmlDeviceGetMemoryInfo(h, version=nv.nvmlMemory_v2)
        except Exception:
            mem = nv.nvmlDeviceGetMemoryInfo(h)
        return mem.used / _MIB, mem.total / _MIB

    mem = _ask(memory, refused, "memory")
    out["memory_used_mib"], out["memory_total_mib"] = mem if mem else (None, None)
    procs: dict[int, float] = {}
    for getter in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
        listed = _ask(lambda g=getter: getattr(nv, g)(h), refused, getter)  # type: ignore[misc]
        for p in listed or []:
            procs.setdefault(int(p.pid), (p.usedGpuMemory or 0) / _MIB)
    out["processes"] = [[pid, round(mib, 1)] for pid, mib in sorted(procs.items())]
    mode = _ask(lambda: nv.nvmlDeviceGetEccMode(h), refused, "ecc_mode")
    out["ecc_enabled"] = None if mode is None else bool(mode[0])
    ecc: dict[str, int | None] = {}
    for counter, counter_name in (
        (nv.NVML_VOLATILE_ECC, "volatile"),
        (nv.NVML_AGGREGATE_ECC, "aggregate"),
    ):
        for kind, kind_name in (
            (nv.NVML_MEMORY_ERROR_TYPE_CORRECTED, "corrected"),
            (nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, "uncorrected"),
        ):
            key = f"{counter_name}_{kind_name}"
            value = _ask(
                lambda k=kind, c=counter: nv.nvmlDeviceGetTotalEccErrors(h, k, c),  # type: ignore[misc]
                refused,
                f"ecc.{key}",
            )
            ecc[key] = None if value is None else int(value)
    out["ecc"] = ecc
    retired: dict[str, Any] = {}
    for cause, cause_name in (
        (nv.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS, "single_bit"),
        (nv.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR, "double_bit"),
    ):
        pages = _ask(
            lambda c=cause: nv.nvmlDeviceGetRetiredPages(h, c),  # type: ignore[misc]
            refused,
            f"retired_pages.{cause_name}",
        )
        retired[cause_name] = None if pages is None else len(pages)
    pending = _ask(
        lambda: nv.nvmlDeviceGetRetiredPagesPendingStatus(h), refused, "retired_pages.pending"
    )
    retired["pending"] = None if pending is None else bool(pending)
    out["retired_pages"] = retired
    rows = _ask(lambda: nv.nvmlDeviceGetRemappedRows(h), refused, "remapped_rows")
    out["remapped_rows"] = (
        None
        if rows is None
        else {
            "corrected": int(rows[0]),
            "uncorrected": int(rows[1]),
            "pending": bool(rows[2]),
            "failure": bool(rows[3]),
        }
    )
    reasons_call = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or (
        nv.nvmlDeviceGetCurrentClocksThrottleReasons
    )
    reasons = _ask(lambda: reasons_call(h), refused, "clock_event_reasons")
    out["clock_event_reasons"] = None if reasons is None else int(reasons)
    violations: dict[str, int | None] = {}
    for name, policy in VIOLATION_POLICIES.items():
        status = _ask(
            lambda p=policy: nv.nvmlDeviceGetViolationStatus(h, p),  # type: ignore[misc]
            refused,
            f"violation.{name}",
        )
        violations[name] = None if status is None else int(status.violationTime)
    fields = _ask(
        lambda: nv.nvmlDeviceGetFieldValues(h, list(EVENT_FIELDS.values())), refused, "event_fields"
    )
    for (name, _), value in zip(EVENT_FIELDS.items(), fields or [], strict=False):
        violations[name] = int(value.value.ullVal) if value.nvmlReturn == 0 else None
    out["throttle_ns"] = violations
    for key, call, scale in (
        ("power_limit_w", lambda: nv.nvmlDeviceGetPowerManagementLimit(h), 1000.0),
        ("enforced_power_limit_w", lambda: nv.nvmlDeviceGetEnforcedPowerLimit(h), 1000.0),
        ("default_power_limit_w", lambda: nv.nvmlDeviceGetPowerManagementDefaultLimit(h), 1000.0),
        ("power_w", lambda: nv.nvmlDeviceGetPowerUsage(h), 1000.0),
        ("temperature_c", lambda: nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU), 1.0),
        ("sm_clock_mhz", lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM), 1.0),
        ("max_sm_clock_mhz", lambda: nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_SM), 1.0),
    ):
        value = _ask(call, refused, key)
        out[key] = None if value is None else round(float(value) / scale, 1)
    out["refused"] = refused
    return out


def read_kernel_log(run: Callable[[Sequence[str]], str | None] | None = None) -> dict[str, Any]:
    """The kernel's log since boot, where this user may read it (Xid lines live there)."""
    run = run or _tool_output
    tried: list[str] = []
    for argv in (
        ["dmesg", "--kernel"],
        ["journalctl", "-k", "-b", "--no-pager", "-o", "short-monotonic"],
    ):
        if shutil.which(argv[0]) is None:
            tried.append(f"{argv[0]}: not installed")
            continue
        text = run(argv)
        if text is None or not text.strip():
            tried.append(f"{argv[0]}: refused or empty")
            continue
        return {"source": argv[0], "text": text, "uptime_s": _uptime()}
    return {"reason": "not exposed (" + "; ".join(tried) + ")", "uptime_s": _uptime()}


def _tool_output(argv: Sequence[str]) -> str | None:
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, timeout=15, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def _uptime() -> float | None:
    try:
        return float(Path("/proc/uptime").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def run_probe(env: Mapping[str, str], timeout_s: float = PROBE_TIMEOUT_S) -> dict[str, Any]:
    """cuda_probe.py in a child process: this process never holds a CUDA context (it would
    be one more process on the GPUs, and a hung driver call would hang proctor)."""
    # The script by its path, in isolated mode (-I): it needs only the standard library, and
    # the run's own PYTHONPATH or PYTHONHOME must not break the check of its GPUs.
    script = Path(__file__).with_name("cuda_probe.py")
    argv = [sys.executable, "-I", str(script), str(PROBE_BYTES)]
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=timeout_s, env=dict(env), check=False
        )
    except subprocess.TimeoutExpired:
        return {"ok": False, "error": f"the CUDA check did not answer in {timeout_s:g} s"}
    except OSError as exc:
        return {"ok": False, "error": f"the CUDA check could not start: {exc}"}
    try:
        answer = json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        tail = (done.stderr or done.stdout).strip()[-200:]
        return {"ok": False, "error": f"the CUDA check exited {done.returncode}: {tail}"}
    return dict(answer) if isinstance(answer, dict) else {"ok": False, "error": "no answer"}


class RecordedReader:
    """Answers captured on a GPU machine (tests/data/gpu/*.json), replayed."""

    def __init__(self, answers: Mapping[str, Any]) -> None:
        self.answers = dict(answers)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> RecordedReader:
        return cls(json.loads(Path(path).read_text(encoding="utf-8")))

    def devices(self) -> dict[str, Any]:
        return dict(self.answers["nvml"])

    def kernel_log(self) -> dict[str, Any]:
        return dict(self.answers.get("kernel_log") or {"reason": "not captured"})

    def probe(self, env: Mapping[str, str]) -> dict[str, Any]:
        return dict(self.answers.get("probe") or {"ok": False, "error": "not captured"})


def capture(reader: HealthReader, env: Mapping[str, str], *, probe: bool = True) -> dict[str, Any]:
    """Every raw answer of one reading, for a file RecordedReader replays. Of the kernel log
    only the driver's lines are kept (the rest is the machine's business, not the test's)."""
    log = reader.kernel_log()
    if log.get("text") is not None:
        kept = [line for line in str(log["text"]).splitlines() if "NVRM" in line]
        log = {**log, "text": "\n".join(kept), "lines_total": len(str(log["text"]).splitlines())}
    return {
        "nvml": reader.devices(),
        "kernel_log": log,
        "probe": reader.probe(env) if probe else None,
    }


# -- which GPUs the run uses --------------------------------------------------------------------
def visible(devices: Sequence[Mapping[str, Any]], cvd: str | None) -> tuple[list[int], str]:
    """Positions in `devices` a run with CUDA_VISIBLE_DEVICES=`cvd` can use, and how that was
    decided. CUDA's rule: a comma-separated list of indices or UUID prefixes; the list ends at
    the first entry that names no device; unset means all."""
    if cvd is None:
        return list(range(len(devices))), "all GPUs"
    chosen: list[int] = []
    for entry in (e.strip() for e in cvd.split(",")):
        match = _one_device(devices, entry)
        if match is None or match in chosen:
            break
        chosen.append(match)
    return chosen, f"CUDA_VISIBLE_DEVICES={cvd}"


def _one_device(devices: Sequence[Mapping[str, Any]], entry: str) -> int | None:
    if entry.isdigit():
        index = int(entry)
        return next((i for i, d in enumerate(devices) if d.get("index") == index), None)
    if entry.startswith("GPU-"):
        found = [i for i, d in enumerate(devices) if str(d.get("uuid", "")).startswith(entry)]
        return found[0] if len(found) == 1 else None
    return None  # MIG-... and anything else: not resolved to a whole GPU here


# -- judging -----------------------------------------------------------------------------------
def reason_names(bits: int | None) -> list[str] | None:
    if bits is None:
        return None
    return [name for bit, name in REASON_BITS.items() if bits & bit]


def _pci_key(bus_id: str | None) -> str | None:
    """ "00000000:3B:00.0" (NVML) and "PCI:0000:3b:00" (the kernel) as "0000:3b:00"."""
    if not bus_id:
        return None
    parts = bus_id.replace("PCI:", "").split(":")
    if len(parts) < 3:
        return None
    with contextlib.suppress(ValueError):
        return (
            f"{int(parts[0], 16):04x}:{int(parts[1], 16):02x}:{int(parts[2].split('.')[0], 16):02x}"
        )
    return None


def parse_xids(text: str) -> list[dict[str, Any]]:
    """Xid lines of a kernel log: time since boot (s, where printed), PCI key, Xid, the rest."""
    out: list[dict[str, Any]] = []
    for line in text.splitlines():
        m = _XID_LINE.match(line)
        if m is None:
            continue
        out.append(
            {
                "at_s": float(m["ts"]) if m["ts"] else None,
                "pci": _pci_key(m["pci"]) or m["pci"],
                "xid": int(m["xid"]),
                "line": line.strip()[:240],
            }
        )
    return out


def _xids_of(xids: list[dict[str, Any]], device: Mapping[str, Any]) -> list[dict[str, Any]]:
    key = _pci_key(device.get("pci_bus_id"))
    return [x for x in xids if key is not None and x["pci"] == key]


def _xid_summary(xids: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Xids of one GPU: count and last line per Xid number."""
    by: dict[int, dict[str, Any]] = {}
    for x in xids:
        entry = by.setdefault(x["xid"], {"xid": x["xid"], "count": 0})
        entry["count"] += 1
        entry["last_at_s"] = x["at_s"]
        entry["last_line"] = x["line"]
        if x["xid"] in HARDWARE_XIDS:
            entry["meaning"] = HARDWARE_XIDS[x["xid"]]
    return sorted(by.values(), key=lambda e: e["xid"])


def _probe_of(probe: Mapping[str, Any] | None, device: Mapping[str, Any]) -> dict[str, Any] | None:
    if probe is None:
        return None
    for entry in probe.get("devices") or []:
        if entry.get("uuid") and entry.get("uuid") == device.get("uuid"):
            return dict(entry)
    return None


def _process_name(pid: int) -> str | None:
    try:
        import psutil

        return str(psutil.Process(pid).name())
    except Exception:  # gone, another pid namespace, no permission
        return None


def assess(
    answers: Mapping[str, Any],
    *,
    mode: Mode = "full",
    env: Mapping[str, str] | None = None,
    own_pids: Iterable[int] = (),
    now: Callable[[], str] | None = None,
    process_name: Callable[[int], str | None] = _process_name,
) -> dict[str, Any]:
    """The health document of one reading (capture()'s answers).

    mode "full" (a run that uses the GPUs itself): other processes holding memory and a failed
    CUDA check are problems. mode "counters" (a client of a server, e.g. a bench: the server is
    supposed to hold the GPUs): processes are recorded, not judged, and no CUDA check runs.
    """
    from proctor.record.finish import now_iso

    env = os.environ if env is None else env
    nvml = answers.get("nvml") or {}
    doc: dict[str, Any] = {
        "checked_at": (now or now_iso)(),
        "mode": mode,
        "backend": nvml.get("backend"),
        "driver": nvml.get("driver"),
    }
    devices = list(nvml.get("devices") or [])
    if not devices:
        doc.update(ok=True, status="no GPU", reason=nvml.get("reason") or "no GPU", devices=[])
        return doc
    cvd = env.get("CUDA_VISIBLE_DEVICES")
    chosen, selection = visible(devices, cvd)
    doc["selection"] = selection
    if not chosen:
        doc.update(ok=True, status="no GPU", reason=f"{selection} leaves no GPU", devices=[])
        return doc
    log = answers.get("kernel_log") or {}
    xids = parse_xids(str(log.get("text") or "")) if log.get("text") is not None else None
    doc["xid_source"] = log.get("source") if xids is not None else None
    doc["xid_note"] = None if xids is not None else str(log.get("reason") or "not exposed")
    doc["kernel_uptime_s"] = log.get("uptime_s")
    probe = answers.get("probe") if mode == "full" else None
    if mode == "full" and probe is not None:
        doc["probe_error"] = probe.get("error")
    own = set(own_pids)
    out_devices: list[dict[str, Any]] = []
    problems: list[str] = []
    for position in chosen:
        dev = _device_health(devices[position], mode, xids, probe, own, process_name)
        out_devices.append(dev)
        problems += [f"GPU {dev['index']}: {p}" for p in dev["problems"]]
    if (
        mode == "full"
        and probe is not None
        and probe.get("error")
        and not any(d.get("probe") for d in out_devices)
    ):
        problems.append(f"CUDA check failed: {probe['error']}")
    doc["devices"] = out_devices
    doc["problems"] = problems
    doc["ok"] = not problems
    doc["status"] = "ok" if not problems else "failed"
    return doc


def _device_health(
    d: Mapping[str, Any],
    mode: Mode,
    xids: list[dict[str, Any]] | None,
    probe: Mapping[str, Any] | None,
    own: set[int],
    process_name: Callable[[int], str | None],
) -> dict[str, Any]:
    problems: list[str] = []
    procs = [
        {"pid": int(pid), "memory_mib": float(mib), "name": process_name(int(pid))}
        for pid, mib in d.get("processes") or []
        if int(pid) not in own
    ]
    if mode == "full" and procs:
        held = ", ".join(
            f"pid {p['pid']}"
            + (f" ({p['name']})" if p["name"] else "")
            + f" {p['memory_mib']:.0f} MiB"
            for p in procs
        )
        problems.append(f"{len(procs)} other process(es) hold memory: {held}")
    ecc = dict(d.get("ecc") or {})
    if (ecc.get("volatile_uncorrected") or 0) > 0:
        problems.append(
            f"{ecc['volatile_uncorrected']} uncorrected ECC errors since the driver loaded"
        )
    retired = dict(d.get("retired_pages") or {})
    if retired.get("pending"):
        problems.append("retired pages pending (the GPU needs a reset)")
    rows = d.get("remapped_rows")
    if isinstance(rows, dict):
        if rows.get("failure"):
            problems.append("row remapping failed (the GPU needs service)")
        elif rows.get("pending"):
            problems.append("row remapping pending (the GPU needs a reset)")
    reasons = reason_names(d.get("clock_event_reasons"))
    bad = [r for r in reasons or [] if r in BAD_REASONS]
    if bad:
        problems.append("clocks held down: " + ", ".join(bad))
    own_xids = None if xids is None else _xid_summary(_xids_of(xids, d))
    hardware = [x for x in own_xids or [] if x["xid"] in HARDWARE_XIDS]
    if hardware:
        problems.append(
            "Xid since boot: "
            + ", ".join(f"{x['xid']} x{x['count']} ({x['meaning']})" for x in hardware)
        )
    checked = _probe_of(probe, d)
    if mode == "full" and probe is not None:
        if checked is None:
            if not probe.get("error"):
                problems.append("the CUDA check did not see this GPU")
        elif not checked.get("ok"):
            problems.append(f"CUDA check failed: {checked.get('error')}")
    return {
        "index": d.get("index"),
        "uuid": d.get("uuid"),
        "name": d.get("name"),
        "pci_bus_id": d.get("pci_bus_id"),
        "ok": not problems,
        "problems": problems,
        "memory_used_mib": d.get("memory_used_mib"),
        "memory_total_mib": d.get("memory_total_mib"),
        "processes": procs,
        "ecc_enabled": d.get("ecc_enabled"),
        "ecc": ecc,
        "retired_pages": retired,
        "remapped_rows": rows if isinstance(rows, dict) else None,
        "clock_event_reasons": reasons,
        "throttle_ns": dict(d.get("throttle_ns") or {}),
        "power_limit_w": d.get("power_limit_w"),
        "enforced_power_limit_w": d.get("enforced_power_limit_w"),
        "default_power_limit_w": d.get("default_power_limit_w"),
        "power_w": d.get("power_w"),
        "temperature_c": d.get("temperature_c"),
        "sm_clock_mhz": d.get("sm_clock_mhz"),
        "xids": own_xids,
        "probe": checked,
        "not_exposed": sorted(dict(d.get("refused") or {})),
    }


def preflight(
    reader: HealthReader | None = None,
    *,
    mode: Mode = "full",
    env: Mapping[str, str] | None = None,
    own_pids: Iterable[int] = (),
) -> dict[str, Any]:
    """Read and judge every GPU the run will use (the run's environment decides which)."""
    reader = reader or NvmlHealthReader()
    env = dict(os.environ if env is None else env)
    nvml = reader.devices()
    answers: dict[str, Any] = {"nvml": nvml}
    if nvml.get("devices"):
        answers["kernel_log"] = reader.kernel_log()
        if mode == "full":
            answers["probe"] = reader.probe(env)
    return assess(answers, mode=mode, env=env, own_pids=own_pids)


# -- after the run -------------------------------------------------------------------------------
def _delta(after: Any, before: Any) -> int | None:
    if isinstance(after, bool) or isinstance(before, bool):
        return None
    if isinstance(after, (int, float)) and isinstance(before, (int, float)):
        return int(after - before)
    return None


def _seconds(iso_a: str | None, iso_b: str | None) -> float | None:
    from datetime import datetime

    try:
        return (
            datetime.fromisoformat(str(iso_b)) - datetime.fromisoformat(str(iso_a))
        ).total_seconds()
    except (TypeError, ValueError):
        return None


def compare(before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[str, Any] | None:
    """What changed on the run's GPUs between the preflight and the reading after the run;
    None where there is nothing to compare (no GPU, no reading)."""
    old = {d.get("uuid"): d for d in before.get("devices") or []}
    pairs = [(old[d.get("uuid")], d) for d in after.get("devices") or [] if d.get("uuid") in old]
    if not pairs:
        return None
    window = _seconds(before.get("checked_at"), after.get("checked_at"))
    since = before.get("kernel_uptime_s")
    devices: list[dict[str, Any]] = []
    problems: list[str] = []
    notes: list[str] = []
    for b, a in pairs:
        ecc = {
            k: _delta(a["ecc"].get(k), b["ecc"].get(k))
            for k in ("volatile_corrected", "volatile_uncorrected")
        }
        retired = {
            k: _delta((a.get("retired_pages") or {}).get(k), (b.get("retired_pages") or {}).get(k))
            for k in ("single_bit", "double_bit")
        }
        ra, rb = a.get("remapped_rows") or {}, b.get("remapped_rows") or {}
        remapped = {k: _delta(ra.get(k), rb.get(k)) for k in ("corrected", "uncorrected")}
        throttle_s = {
            k: round(d / 1e9, 3)
            for k in a.get("throttle_ns") or {}
            if (d := _delta(a["throttle_ns"].get(k), (b.get("throttle_ns") or {}).get(k)))
            is not None
        }
        new_xids = (
            None
            if a.get("xids") is None or b.get("xids") is None
            else [
                {"xid": x["xid"], "count": x["count"] - _count(b["xids"], x["xid"])}
                for x in a["xids"]
                if x["count"] > _count(b["xids"], x["xid"])
            ]
        )
        mine: list[str] = []
        if (ecc["volatile_uncorrected"] or 0) > 0:
            mine.append(f"{ecc['volatile_uncorrected']} uncorrected ECC errors appeared")
        if (ecc["volatile_corrected"] or 0) > 0:
            notes.append(
                f"GPU {a['index']}: {ecc['volatile_corrected']} corrected ECC errors appeared"
            )
        if any((v or 0) > 0 for v in retired.values()) or any(
            (v or 0) > 0 for v in remapped.values()
        ):
            mine.append("pages were retired or rows remapped")
        if new_xids:
            mine.append(
                "Xid during the run: " + ", ".join(f"{x['xid']} x{x['count']}" for x in new_xids)
            )
        heat = {k: v for k, v in throttle_s.items() if k in HEAT_COUNTERS and v > 0}
        if heat:
            mine.append(
                "clocks throttled for heat or a power brake: "
                + ", ".join(f"{k} {v:.1f} s" for k, v in heat.items())
            )
        power = throttle_s.get("power") or 0.0
        if power > 0:
            # Said, not judged: a compute-bound load at the board's power limit is the GPU
            # working as configured (an 8192^3 bf16 matmul loop on an H100 at 700 W: capped
            # 85 % of the time, docs/gpu-health.md). The limit itself is in the preflight.
            share = f" ({power / window:.0%} of {window:.1f} s)" if window else ""
            notes.append(f"GPU {a['index']}: clocks held at the power limit {power:.1f} s{share}")
        problems += [f"GPU {a['index']}: {p}" for p in mine]
        devices.append(
            {
                "index": a.get("index"),
                "uuid": a.get("uuid"),
                "ecc_new": ecc,
                "retired_pages_new": retired,
                "remapped_rows_new": remapped,
                "xids_new": new_xids,
                "throttled_s": throttle_s,
                "problems": mine,
            }
        )
    return {
        "window_s": None if window is None else round(window, 3),
        "since_uptime_s": since,
        # Totals over the GPUs, for the store's metrics table (store/db.py).
        "ecc_new_uncorrected": sum(d["ecc_new"]["volatile_uncorrected"] or 0 for d in devices),
        "xids_new": sum(x["count"] for d in devices for x in d["xids_new"] or []),
        "throttled_power_s": round(sum(d["throttled_s"].get("power", 0.0) for d in devices), 3),
        "throttled_heat_s": round(
            sum(v for d in devices for k, v in d["throttled_s"].items() if k in HEAT_COUNTERS), 3
        ),
        "ok": not problems,
        "problems": problems,
        "notes": notes,
        "devices": devices,
    }


def _count(xids: list[dict[str, Any]], xid: int) -> int:
    return sum(int(x["count"]) for x in xids if x["xid"] == xid)


def after_run(
    before: Mapping[str, Any], reader: HealthReader | None = None
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The same counters after the run (no CUDA check: the run's own processes may still be
    going away), on the GPUs the preflight read, and the change."""
    reader = reader or NvmlHealthReader()
    nvml = reader.devices()
    answers = {"nvml": nvml, "kernel_log": reader.kernel_log() if nvml.get("devices") else None}
    selection = str(before.get("selection") or "")
    env = (
        {"CUDA_VISIBLE_DEVICES": selection.split("=", 1)[1]}
        if selection.startswith("CUDA_VISIBLE_DEVICES=")
        else {}
    )
    after = assess(answers, mode="counters", env=env)
    return after, compare(before, after)


# -- what users read ----------------------------------------------------------------------------
def one_line(doc: Mapping[str, Any] | None) -> str:
    """The preflight in one line (printed at the start of a run, shown by runs show)."""
    if not doc:
        return "gpu health: not checked"
    if doc.get("status") == "no GPU":
        return f"gpu health: no GPU ({doc.get('reason')}): passes"
    devices = doc.get("devices") or []
    names = sorted({str(d.get("name")) for d in devices})
    head = f"{len(devices)}x {'/'.join(names)}"
    if not doc.get("ok"):
        return f"gpu health: FAILED on {head}: " + "; ".join(doc.get("problems") or [])
    ecc = [d.get("ecc") or {} for d in devices]
    facts = [
        "no other process" if doc.get("mode") == "full" else _holders(devices),
        _ecc_text(ecc),
        _xid_text(doc),
        "clocks not held down",
        _limit_text(devices),
    ]
    if doc.get("mode") == "full":
        facts.append(f"{PROBE_BYTES // _MIB} MiB CUDA copy ok")
    return f"gpu health: ok on {head}: " + ", ".join(f for f in facts if f)


def _holders(devices: Sequence[Mapping[str, Any]]) -> str:
    n = sum(len(d.get("processes") or []) for d in devices)
    return f"{n} process(es) on the GPUs (not judged: a client run)"


def _ecc_text(ecc: Sequence[Mapping[str, Any]]) -> str:
    if all(e.get("volatile_corrected") is None for e in ecc):
        return "ECC counters not exposed"
    corrected = sum(e.get("volatile_corrected") or 0 for e in ecc)
    lifetime = sum(e.get("aggregate_uncorrected") or 0 for e in ecc)
    return f"ECC {corrected} corrected/0 uncorrected since load ({lifetime} uncorrected lifetime)"


def _xid_text(doc: Mapping[str, Any]) -> str:
    if doc.get("xid_note"):
        return f"Xid {doc['xid_note']}"
    n = sum(sum(x["count"] for x in d.get("xids") or []) for d in doc.get("devices") or [])
    return "no Xid since boot" if n == 0 else f"{n} Xid(s) since boot, none of hardware"


def _limit_text(devices: Sequence[Mapping[str, Any]]) -> str:
    """The enforced power limits, and the default where someone changed it (a lowered limit
    makes results incomparable with the same GPU at its default)."""
    parts = set()
    for d in devices:
        limit: Any = d.get("enforced_power_limit_w")
        default: Any = d.get("default_power_limit_w")
        if limit is None:
            continue
        changed = default is not None and abs(float(default) - float(limit)) >= 1
        parts.add(
            f"{float(limit):.0f} W" + (f" (default {float(default):.0f} W)" if changed else "")
        )
    return "power limit " + "/".join(sorted(parts)) if parts else ""


def change_line(change: Mapping[str, Any] | None) -> str:
    if not change:
        return "gpu during the run: not compared"
    if change.get("ok"):
        extra = "; ".join(change.get("notes") or [])
        return "gpu during the run: no new ECC error or Xid, no throttling for heat" + (
            f" ({extra})" if extra else ""
        )
    return "gpu during the run: " + "; ".join(change.get("problems") or [])


def record_text(before: Any, change: Any) -> str:
    """Both lines for a report or a listing, from a record's fields (typed models or dicts)."""
    before, change = _plain(before), _plain(change)
    if before is None:
        return "not checked"
    text = one_line(before).removeprefix("gpu health: ")
    if before.get("allowed"):
        text += " (run anyway: --allow-unhealthy-gpu)"
    if before.get("devices"):
        text += "; " + change_line(change).removeprefix("gpu ")
    return text


def _plain(value: Any) -> dict[str, Any] | None:
    dump = getattr(value, "model_dump", None)
    if dump is not None:
        value = dump(mode="json")
    return dict(value) if isinstance(value, dict) else None


def validity_check(change: Mapping[str, Any] | None) -> tuple[bool, str] | None:
    """The bench validity check "gpu" (results/validity.py): None where not measured."""
    if not change:
        return None
    return bool(change.get("ok")), change_line(change).removeprefix("gpu during the run: ")


def main(argv: list[str] | None = None) -> int:
    """`python -m proctor.monitors.gpu_health [--capture FILE] [--no-probe]`: print the
    preflight's JSON, or write one reading's raw answers for tests/data/gpu."""
    args = list(sys.argv[1:] if argv is None else argv)
    reader = NvmlHealthReader()
    if args[:1] == ["--capture"] and len(args) >= 2:
        data = capture(reader, os.environ, probe="--no-probe" not in args)
        data["captured_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        Path(args[1]).write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
        return 0
    doc = preflight(reader)
    print(json.dumps(doc, indent=1))
    print(one_line(doc), file=sys.stderr)
    return 0 if doc.get("ok") else 69


if __name__ == "__main__":
    sys.exit(main())

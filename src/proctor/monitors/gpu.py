"""GPU inventory and sampling (gpu.csv: memory, utilisation, power, SM clock, temperature),
behind one small backend protocol.

Backends, tried in order: NVML (nvidia-ml-py), amdsmi (Python), `amd-smi` JSON, `rocm-smi`
JSON, `nvidia-smi` CSV. None available is not an error: the inventory says why, and a run goes
on without samples. NVML memory is read with the v2 structure where the driver supports it:
v1's "used" includes the driver's reservation (~600 MiB on an idle H200), so "used == 0" is
never true with v1; per-process memory comes from the compute-process list.
"""

from __future__ import annotations

import contextlib
import csv
import datetime as dt
import json
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from proctor.monitors.periodic import Periodic

CSV_COLUMNS = [
    "time",
    "index",
    "uuid",
    "name",
    "memory_used_mib",
    "memory_total_mib",
    "utilization_pct",
    "processes",
    # Appended after `processes` so readers keyed by position on the old columns still work.
    "power_w",
    "sm_clock_mhz",
    "temperature_c",
]
_MIB = 1024 * 1024
_CLI_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class GpuInfo:
    index: int
    uuid: str
    name: str
    memory_total_mib: float


@dataclass(frozen=True)
class GpuSample:
    index: int
    uuid: str
    name: str
    memory_used_mib: float
    memory_total_mib: float
    utilization_pct: float | None
    processes: tuple[tuple[int, float], ...] = ()  # (pid, MiB) where the driver says
    power_w: float | None = None  # board power now (None: the driver does not say)
    sm_clock_mhz: float | None = None
    temperature_c: float | None = None

    def info(self) -> GpuInfo:
        return GpuInfo(self.index, self.uuid, self.name, self.memory_total_mib)


@dataclass
class GpuInventory:
    backend: str | None
    driver: str | None
    gpus: list[GpuInfo] = field(default_factory=list)
    reason: str | None = None  # why there are no GPUs, when there are none

    def to_dict(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "driver": self.driver,
            "gpus": [g.__dict__ for g in self.gpus],
            "reason": self.reason,
        }


class GpuBackend(Protocol):
    name: str

    def driver(self) -> str | None: ...

    def sample(self) -> list[GpuSample]: ...

    def close(self) -> None: ...


class BackendUnavailable(Exception):
    """This backend cannot be used here (library missing, no device, tool absent)."""


# (power W, SM clock MHz, temperature C), each None where the driver does not say.
Physics = tuple[float | None, float | None, float | None]


def _try(read: Callable[[], Any]) -> float | None:
    try:
        return float(read())
    except Exception:  # NVMLError_NotSupported and friends: the column stays empty
        return None


# -- NVML ------------------------------------------------------------------------------------
class NvmlBackend:
    name = "nvml"

    def __init__(self) -> None:
        try:
            import pynvml
        except ImportError as exc:
            raise BackendUnavailable("nvidia-ml-py is not installed") from exc
        try:
            pynvml.nvmlInit()
        except Exception as exc:  # NVMLError_LibraryNotFound, _DriverNotLoaded, ...
            raise BackendUnavailable(f"NVML: {exc}") from exc
        self._nv = pynvml
        count = pynvml.nvmlDeviceGetCount()
        if count == 0:
            pynvml.nvmlShutdown()
            raise BackendUnavailable("NVML found no NVIDIA GPU")
        self._handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        self._v2 = hasattr(pynvml, "nvmlMemory_v2")

    def driver(self) -> str | None:
        try:
            return _text(self._nv.nvmlSystemGetDriverVersion())
        except Exception:
            return None

    def _memory(self, handle: Any) -> tuple[float, float]:
        nv = self._nv
        if self._v2:
            try:
                mem = nv.nvmlDeviceGetMemoryInfo(handle, version=nv.nvmlMemory_v2)
                return mem.used / _MIB, mem.total / _MIB
            except Exception:
                self._v2 = False  # old driver: fall back to v1 for the rest of the run
        mem = nv.nvmlDeviceGetMemoryInfo(handle)
        return mem.used / _MIB, mem.total / _MIB

    def sample(self) -> list[GpuSample]:
        nv = self._nv
        out: list[GpuSample] = []
        for index, handle in enumerate(self._handles):
            used, total = self._memory(handle)
            try:
                util: float | None = float(nv.nvmlDeviceGetUtilizationRates(handle).gpu)
            except Exception:
                util = None
            procs: list[tuple[int, float]] = []
            for getter in (
                "nvmlDeviceGetComputeRunningProcesses",
                "nvmlDeviceGetGraphicsRunningProcesses",
            ):
                try:
                    for p in getattr(nv, getter)(handle):
                        mib = (p.usedGpuMemory or 0) / _MIB
                        if all(pid != p.pid for pid, _ in procs):
                            procs.append((int(p.pid), mib))
                except Exception:
                    continue
            power, clock, temperature = self._physics(handle)
            out.append(
                GpuSample(
                    index=index,
                    uuid=_text(nv.nvmlDeviceGetUUID(handle)),
                    name=_text(nv.nvmlDeviceGetName(handle)),
                    memory_used_mib=used,
                    memory_total_mib=total,
                    utilization_pct=util,
                    processes=tuple(procs),
                    power_w=power,
                    sm_clock_mhz=clock,
                    temperature_c=temperature,
                )
            )
        return out

    def _physics(self, handle: Any) -> Physics:
        """Power (mW -> W), SM clock, temperature; each None where the driver refuses it."""
        nv = self._nv
        return (
            _try(lambda: nv.nvmlDeviceGetPowerUsage(handle) / 1000.0),
            _try(lambda: nv.nvmlDeviceGetClockInfo(handle, nv.NVML_CLOCK_SM)),
            _try(lambda: nv.nvmlDeviceGetTemperature(handle, nv.NVML_TEMPERATURE_GPU)),
        )

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._nv.nvmlShutdown()


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


# -- amdsmi (Python) ---------------------------------------------------------------------------
class AmdSmiBackend:
    name = "amdsmi"

    def __init__(self) -> None:
        try:
            import amdsmi
        except ImportError as exc:
            raise BackendUnavailable("amdsmi is not installed") from exc
        try:
            amdsmi.amdsmi_init()
            self._handles = list(amdsmi.amdsmi_get_processor_handles())
        except Exception as exc:
            raise BackendUnavailable(f"amdsmi: {exc}") from exc
        if not self._handles:
            raise BackendUnavailable("amdsmi found no AMD GPU")
        self._a = amdsmi

    def driver(self) -> str | None:
        try:
            info = self._a.amdsmi_get_gpu_driver_info(self._handles[0])
            return str(info.get("driver_version"))
        except Exception:
            return None

    def sample(self) -> list[GpuSample]:
        a = self._a
        out: list[GpuSample] = []
        for index, h in enumerate(self._handles):
            vram = a.amdsmi_get_gpu_vram_usage(h)  # MiB: {"vram_used", "vram_total"}
            try:
                util: float | None = float(a.amdsmi_get_gpu_activity(h)["gfx_activity"])
            except Exception:
                util = None
            try:
                uuid = str(a.amdsmi_get_gpu_device_uuid(h))
            except Exception:
                uuid = ""
            try:
                name = str(a.amdsmi_get_gpu_asic_info(h).get("market_name", "AMD GPU"))
            except Exception:
                name = "AMD GPU"
            procs: list[tuple[int, float]] = []
            try:
                for p in a.amdsmi_get_gpu_process_list(h):
                    mem = p.get("memory_usage", {}).get("vram_mem", p.get("mem", 0))
                    procs.append((int(p["pid"]), float(mem) / _MIB))
            except Exception:
                pass
            out.append(
                GpuSample(
                    index,
                    uuid,
                    name,
                    float(vram["vram_used"]),
                    float(vram["vram_total"]),
                    util,
                    tuple(procs),
                    *_amdsmi_physics(a, h),
                )
            )
        return out

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._a.amdsmi_shut_down()


def _amdsmi_physics(a: Any, h: Any) -> Physics:
    def power() -> float:
        info = a.amdsmi_get_power_info(h)  # W; the key moved between ROCm releases
        for key in ("current_socket_power", "average_socket_power", "socket_power"):
            value = _num(info.get(key))
            if value is not None:
                return value
        raise KeyError("no power key")

    def clock() -> float:
        info = a.amdsmi_get_clock_info(h, a.AmdSmiClkType.GFX)
        return float(info.get("clk", info.get("cur_clk")))

    def temperature() -> float:
        return float(
            a.amdsmi_get_temp_metric(
                h, a.AmdSmiTemperatureType.HOTSPOT, a.AmdSmiTemperatureMetric.CURRENT
            )
        )

    return _try(power), _try(clock), _try(temperature)


# -- command-line tools ----------------------------------------------------------------------
Runner = Callable[[Sequence[str]], str]


def _run_tool(argv: Sequence[str]) -> str:
    try:
        proc = subprocess.run(
            list(argv), capture_output=True, text=True, timeout=_CLI_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BackendUnavailable(f"{argv[0]}: {exc}") from exc
    if proc.returncode != 0:
        raise BackendUnavailable(
            f"{argv[0]} exited {proc.returncode}: {(proc.stderr or proc.stdout).strip()[:200]}"
        )
    return proc.stdout


def _num(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value)
    text = str(value).strip().split()[0] if str(value).strip() else ""
    try:
        return float(text)
    except ValueError:
        return None


class NvidiaSmiBackend:
    """`nvidia-smi --query-gpu ... --format=csv`: the NVIDIA fallback when NVML is unusable."""

    name = "nvidia-smi"
    _QUERY = (
        "index,uuid,name,memory.used,memory.total,utilization.gpu,driver_version,"
        "power.draw,clocks.sm,temperature.gpu"
    )

    def __init__(self, tool: str | None = None, run: Runner = _run_tool) -> None:
        self._tool = tool or shutil.which("nvidia-smi")
        if self._tool is None:
            raise BackendUnavailable("nvidia-smi not found on PATH")
        self._run = run
        self._driver: str | None = None
        if not self.sample():
            raise BackendUnavailable("nvidia-smi lists no GPU")

    def driver(self) -> str | None:
        return self._driver

    def sample(self) -> list[GpuSample]:
        assert self._tool is not None
        text = self._run(
            [self._tool, f"--query-gpu={self._QUERY}", "--format=csv,noheader,nounits"]
        )
        gpus: list[GpuSample] = []
        by_uuid: dict[str, list[tuple[int, float]]] = {}
        try:
            apps = self._run(
                [
                    self._tool,
                    "--query-compute-apps=gpu_uuid,pid,used_memory",
                    "--format=csv,noheader,nounits",
                ]
            )
            for row in csv.reader(apps.splitlines()):
                if len(row) >= 3:
                    mib = _num(row[2])
                    if row[1].strip().isdigit():
                        by_uuid.setdefault(row[0].strip(), []).append(
                            (int(row[1].strip()), mib or 0.0)
                        )
        except BackendUnavailable:
            pass
        for row in csv.reader(text.splitlines()):
            if len(row) < 6 or not row[0].strip().isdigit():
                continue
            cells = [c.strip() for c in row]
            uuid = cells[1]
            if len(cells) > 6:
                self._driver = cells[6]
            gpus.append(
                GpuSample(
                    index=int(cells[0]),
                    uuid=uuid,
                    name=cells[2],
                    memory_used_mib=_num(cells[3]) or 0.0,
                    memory_total_mib=_num(cells[4]) or 0.0,
                    utilization_pct=_num(cells[5]),
                    processes=tuple(by_uuid.get(uuid, [])),
                    # "[N/A]" where the board does not report it: _num makes that None.
                    power_w=_num(cells[7]) if len(cells) > 7 else None,
                    sm_clock_mhz=_num(cells[8]) if len(cells) > 8 else None,
                    temperature_c=_num(cells[9]) if len(cells) > 9 else None,
                )
            )
        return gpus

    def close(self) -> None:
        pass


def _bytes_to_mib(value: Any) -> float | None:
    n = _num(value)
    return None if n is None else n / _MIB


class RocmSmiBackend:
    """`rocm-smi --showmeminfo vram --showuse --showproductname --showuniqueid --json`."""

    name = "rocm-smi"

    def __init__(self, tool: str | None = None, run: Runner = _run_tool) -> None:
        self._tool = tool or shutil.which("rocm-smi")
        if self._tool is None:
            raise BackendUnavailable("rocm-smi not found on PATH")
        self._run = run
        if not self.sample():
            raise BackendUnavailable("rocm-smi lists no GPU")

    def driver(self) -> str | None:
        assert self._tool is not None
        try:
            data = json.loads(self._run([self._tool, "--showdriverversion", "--json"]))
            for body in data.values():
                if isinstance(body, dict):
                    for key, value in body.items():
                        if "driver" in key.lower():
                            return str(value)
        except (BackendUnavailable, ValueError):
            pass
        return None

    def sample(self) -> list[GpuSample]:
        assert self._tool is not None
        raw = self._run(
            [
                self._tool,
                "--showmeminfo",
                "vram",
                "--showuse",
                "--showproductname",
                "--showuniqueid",
                "--json",
            ]
        )
        pids = self._pids()
        return parse_rocm_smi(raw, pids)

    def _pids(self) -> dict[int, list[tuple[int, float]]]:
        assert self._tool is not None
        try:
            return parse_rocm_smi_pids(self._run([self._tool, "--showpids", "--json"]))
        except (BackendUnavailable, ValueError):
            return {}

    def close(self) -> None:
        pass


def parse_rocm_smi(
    raw: str, pids: dict[int, list[tuple[int, float]]] | None = None
) -> list[GpuSample]:
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise BackendUnavailable(f"rocm-smi printed no JSON: {exc}") from exc
    out: list[GpuSample] = []
    for key, body in data.items():
        if not key.startswith("card") or not isinstance(body, dict):
            continue
        index = int(key[4:]) if key[4:].isdigit() else len(out)
        used = _bytes_to_mib(body.get("VRAM Total Used Memory (B)"))
        total = _bytes_to_mib(body.get("VRAM Total Memory (B)"))
        name = str(
            body.get("Card Series") or body.get("Card series") or body.get("Card SKU") or "AMD GPU"
        )
        out.append(
            GpuSample(
                index=index,
                uuid=str(body.get("Unique ID") or ""),
                name=name,
                memory_used_mib=used or 0.0,
                memory_total_mib=total or 0.0,
                utilization_pct=_num(body.get("GPU use (%)")),
                processes=tuple((pids or {}).get(index, [])),
            )
        )
    return out


def parse_rocm_smi_pids(raw: str) -> dict[int, list[tuple[int, float]]]:
    """`rocm-smi --showpids --json`: {"system": {"PID123": "name, ngpus, vram_bytes, ..."}}."""
    data = json.loads(raw)
    out: dict[int, list[tuple[int, float]]] = {}
    for body in data.values():
        if not isinstance(body, dict):
            continue
        for key, value in body.items():
            if not key.startswith("PID") or not key[3:].isdigit():
                continue
            fields = [f.strip() for f in str(value).split(",")]
            vram = _bytes_to_mib(fields[2]) if len(fields) > 2 else None
            # The per-GPU split is not printed; attribute to GPU 0 only when one GPU is used.
            if len(fields) > 1 and fields[1] == "1":
                out.setdefault(0, []).append((int(key[3:]), vram or 0.0))
    return out


class AmdSmiCliBackend:
    """`amd-smi metric --mem-usage --usage --json` (+ `static --asic` for names)."""

    name = "amd-smi"

    def __init__(self, tool: str | None = None, run: Runner = _run_tool) -> None:
        self._tool = tool or shutil.which("amd-smi")
        if self._tool is None:
            raise BackendUnavailable("amd-smi not found on PATH")
        self._run = run
        self._names: dict[int, tuple[str, str]] = {}
        try:
            static = json.loads(self._run([self._tool, "static", "--asic", "--json"]))
            for entry in static if isinstance(static, list) else static.get("gpu_data", []):
                asic = entry.get("asic", {})
                self._names[int(entry.get("gpu", 0))] = (
                    str(asic.get("market_name", "AMD GPU")),
                    str(asic.get("asic_serial", "")),
                )
        except (BackendUnavailable, ValueError, AttributeError):
            pass
        if not self.sample():
            raise BackendUnavailable("amd-smi lists no GPU")

    def driver(self) -> str | None:
        return None

    def sample(self) -> list[GpuSample]:
        assert self._tool is not None
        raw = self._run([self._tool, "metric", "--mem-usage", "--usage", "--json"])
        return parse_amd_smi_metric(raw, self._names)

    def close(self) -> None:
        pass


def _amd_value(node: Any) -> float | None:
    # amd-smi writes either {"value": N, "unit": "MB"} or a bare number or "N MB".
    if isinstance(node, dict):
        return _num(node.get("value"))
    return _num(node)


def parse_amd_smi_metric(
    raw: str, names: dict[int, tuple[str, str]] | None = None
) -> list[GpuSample]:
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise BackendUnavailable(f"amd-smi printed no JSON: {exc}") from exc
    entries = data if isinstance(data, list) else data.get("gpu_data", [])
    out: list[GpuSample] = []
    for entry in entries:
        index = int(entry.get("gpu", len(out)))
        mem = entry.get("mem_usage", {})
        usage = entry.get("usage", {})
        name, uuid = (names or {}).get(index, ("AMD GPU", ""))
        out.append(
            GpuSample(
                index=index,
                uuid=uuid,
                name=name,
                memory_used_mib=_amd_value(mem.get("used_vram")) or 0.0,
                memory_total_mib=_amd_value(mem.get("total_vram")) or 0.0,
                utilization_pct=_amd_value(usage.get("gfx_activity")),
            )
        )
    return out


# -- detection -------------------------------------------------------------------------------
_FACTORIES: list[Callable[[], GpuBackend]] = [
    NvmlBackend,
    AmdSmiBackend,
    AmdSmiCliBackend,
    RocmSmiBackend,
    NvidiaSmiBackend,
]


def detect_backend(
    factories: Iterable[Callable[[], GpuBackend]] | None = None,
) -> tuple[GpuBackend | None, str | None]:
    """The first backend that works here, or None with every reason it was refused."""
    reasons: list[str] = []
    for factory in factories if factories is not None else _FACTORIES:
        try:
            return factory(), None
        except BackendUnavailable as exc:
            reasons.append(str(exc))
    return None, "no GPU found: " + "; ".join(reasons)


def inventory(backend: GpuBackend | None = None) -> GpuInventory:
    """What GPUs this machine has (or why none), for the record's target identity."""
    owned = backend is None
    reason: str | None = None
    if backend is None:
        backend, reason = detect_backend()
    if backend is None:
        return GpuInventory(backend=None, driver=None, gpus=[], reason=reason)
    try:
        samples = backend.sample()
        return GpuInventory(
            backend=backend.name, driver=backend.driver(), gpus=[s.info() for s in samples]
        )
    except Exception as exc:
        return GpuInventory(backend=backend.name, driver=None, reason=f"sampling failed: {exc}")
    finally:
        if owned:
            backend.close()


@dataclass
class GpuPeak:
    index: int
    uuid: str
    memory_used_mib: float
    at: str  # ISO time of the peak sample

    def to_dict(self) -> dict[str, Any]:
        return self.__dict__.copy()


def _iso_now() -> str:
    return dt.datetime.now(dt.timezone.utc).astimezone().isoformat(timespec="milliseconds")


def _cell(value: float | None, digits: int) -> str:
    return "" if value is None else f"{value:.{digits}f}"


def format_processes(procs: Iterable[tuple[int, float]]) -> str:
    return ";".join(f"{pid}:{mib:.0f}" for pid, mib in procs)


class GpuSampler(Periodic):
    """Writes gpu.csv: a header, then one row per GPU every `interval_s` seconds.

    `interval_s <= 0` disables sampling (no thread, no file). With no GPU the inventory holds
    the reason and nothing else happens; the run goes on.
    """

    def __init__(
        self,
        csv_path: str | os.PathLike[str],
        interval_s: float = 3.0,
        *,
        backend: GpuBackend | None = None,
        now: Callable[[], str] = _iso_now,
    ) -> None:
        super().__init__(interval_s, thread_name="proctor-gpu")
        self.csv_path = Path(csv_path)
        self._backend = backend
        self._owned = backend is None
        self._now = now
        self.peaks: dict[int, GpuPeak] = {}
        self.samples_written = 0
        self.errors: list[str] = []
        self.inventory: GpuInventory | None = None
        self._lock = threading.Lock()
        self._halted = False

    def start(self) -> GpuInventory:
        if self.interval_s <= 0:
            self.inventory = GpuInventory(None, None, reason="GPU sampling disabled (interval 0)")
            return self.inventory
        if self._backend is None:
            self._backend, reason = detect_backend()
            if self._backend is None:
                self.inventory = GpuInventory(None, None, reason=reason)
                return self.inventory
        new = not self.csv_path.exists() or self.csv_path.stat().st_size == 0
        with self.csv_path.open("a", newline="") as fh:
            if new:
                csv.writer(fh).writerow(CSV_COLUMNS)
        # The first sample is also the inventory: one driver call, not two.
        first = self.sample_once()
        self.inventory = GpuInventory(
            backend=self._backend.name,
            driver=self._backend.driver(),
            gpus=[s.info() for s in first],
            reason=None if first else f"first sample failed: {self.errors[-1:]}",
        )
        self._start_thread()
        return self.inventory

    def halt(self) -> None:
        """End the sampling thread only; `sample_once` still works until `stop`. The wrapper
        halts it before it looks for processes a command left (the thread's nvidia-smi is
        the wrapper's child too)."""
        self._halted = self._join_thread(timeout=self.interval_s + 15) or self._halted

    def stop(self) -> None:
        if self._join_thread(timeout=self.interval_s + 15) or self._halted:
            self.sample_once()  # the state at the end belongs in the record too
        if self._owned and self._backend is not None:
            self._backend.close()
            self._backend = None

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample_once()

    def sample_once(self) -> list[GpuSample]:
        """Take one sample now, append it, update peaks (also callable without the thread)."""
        if self._backend is None:
            return []
        with self._lock:
            when = self._now()
            try:
                samples = self._backend.sample()
            except Exception as exc:  # a driver hiccup is evidence, not a reason to stop
                self.errors.append(f"{when}: {exc}")
                return []
            with self.csv_path.open("a", newline="") as fh:
                writer = csv.writer(fh)
                for s in samples:
                    writer.writerow(
                        [
                            when,
                            s.index,
                            s.uuid,
                            s.name,
                            f"{s.memory_used_mib:.1f}",
                            f"{s.memory_total_mib:.1f}",
                            "" if s.utilization_pct is None else f"{s.utilization_pct:.0f}",
                            format_processes(s.processes),
                            _cell(s.power_w, 1),
                            _cell(s.sm_clock_mhz, 0),
                            _cell(s.temperature_c, 0),
                        ]
                    )
                    peak = self.peaks.get(s.index)
                    if peak is None or s.memory_used_mib > peak.memory_used_mib:
                        self.peaks[s.index] = GpuPeak(s.index, s.uuid, s.memory_used_mib, when)
            self.samples_written += 1
            return samples

    def summary(self) -> dict[str, Any]:
        """For the record: inventory, peaks per GPU, sample count, errors."""
        return {
            "inventory": self.inventory.to_dict() if self.inventory else None,
            "interval_s": self.interval_s,
            "samples": self.samples_written,
            "peaks": [p.to_dict() for _, p in sorted(self.peaks.items())],
            "errors": self.errors[-20:],
        }


# -- helpers for stop ------------------------------------------------------------------------
def _with_backend(backend: GpuBackend | None) -> tuple[GpuBackend | None, bool]:
    if backend is not None:
        return backend, False
    found, _ = detect_backend()
    return found, True


def memory_snapshot(backend: GpuBackend | None = None) -> dict[int, float]:
    """Used MiB per GPU index, now ({} without GPUs)."""
    b, owned = _with_backend(backend)
    if b is None:
        return {}
    try:
        return {s.index: s.memory_used_mib for s in b.sample()}
    finally:
        if owned:
            b.close()


def gpu_holders(
    indices: Iterable[int] | None = None, backend: GpuBackend | None = None
) -> list[tuple[int, float]]:
    """(pid, MiB) of processes holding memory on the given GPUs (all GPUs when None)."""
    b, owned = _with_backend(backend)
    if b is None:
        return []
    wanted = set(indices) if indices is not None else None
    try:
        held: dict[int, float] = {}
        for s in b.sample():
            if wanted is None or s.index in wanted:
                for pid, mib in s.processes:
                    held[pid] = held.get(pid, 0.0) + mib
        return sorted(held.items())
    finally:
        if owned:
            b.close()


def memory_back_to_baseline(
    baseline: dict[int, float],
    *,
    tolerance_mib: float = 256.0,
    timeout_s: float = 60.0,
    poll_s: float = 1.0,
    backend: GpuBackend | None = None,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> tuple[bool, dict[int, float]]:
    """Wait until every GPU in `baseline` is back within `tolerance_mib` of its baseline.

    Returns (ok, last reading). With no GPU backend there is nothing to wait for: (True, {}).
    """
    b, owned = _with_backend(backend)
    if b is None:
        return True, {}
    try:
        deadline = clock() + timeout_s
        while True:
            now = {s.index: s.memory_used_mib for s in b.sample()}
            if all(now.get(i, 0.0) <= base + tolerance_mib for i, base in baseline.items()):
                return True, now
            if clock() >= deadline:
                return False, now
            sleep(poll_s)
    finally:
        if owned:
            b.close()

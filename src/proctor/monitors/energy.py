"""Energy per output token from gpu.csv's power column.

Over the measured window [start, end] (unix seconds): the mean of the summed board power of
every GPU at each sample time inside the window, times the window's length, is the energy
drawn; minus the idle power times the same length, the energy the load cost. Idle power is
what the caller gives (`--idle-power-w`), else the mean of the samples taken before the load
began (the bench samples the GPUs before its first request). J/token = net energy / output
tokens counted by the client. Board power is what NVML/amdsmi report: the GPUs only, not the
host, fans or network.
"""

from __future__ import annotations

import csv
import datetime as dt
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def _unix(text: str | None) -> float | None:
    """gpu.csv's ISO time (with its offset) as unix seconds."""
    try:
        return dt.datetime.fromisoformat(str(text).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def power_by_time(path: Path) -> Iterator[tuple[float, float, int]]:
    """(unix time, summed power W, GPUs with a reading) per sample time, in file order."""
    try:
        handle = path.open(newline="", encoding="utf-8", errors="replace")
    except OSError:
        return
    with handle:
        when: str | None = None
        total, gpus = 0.0, 0
        for row in csv.DictReader(handle):
            try:
                power = float(row.get("power_w") or "nan")
            except ValueError:
                continue
            if row.get("time") != when:
                t = _unix(when) if when is not None and gpus else None
                if t is not None:
                    yield t, total, gpus
                when, total, gpus = row.get("time"), 0.0, 0
            if math.isfinite(power):
                total += power
                gpus += 1
        t = _unix(when) if when is not None and gpus else None
        if t is not None:
            yield t, total, gpus


def energy_summary(
    gpu_csv: Path,
    start: float,
    end: float,
    output_tokens: int,
    *,
    idle_before: float,
    idle_power_w: float | None = None,
) -> dict[str, Any]:
    """metrics.json "energy": J/token over [start, end]; `available: false` with a reason when
    there is no power reading. Samples before `idle_before` measure idle power."""
    idle: list[float] = []
    loaded: list[float] = []
    gpu_count = 0
    for t, watts, gpus in power_by_time(gpu_csv):
        gpu_count = max(gpu_count, gpus)
        if t < idle_before:
            idle.append(watts)
        elif start <= t <= end:
            loaded.append(watts)
    seconds = max(0.0, end - start)
    if not loaded:
        reason = (
            "no GPU power samples in the measured window"
            if gpu_count
            else "no GPU power readings (no GPU, or its driver does not report power)"
        )
        return {"available": False, "reason": reason}
    if idle_power_w is not None:
        idle_w, idle_source = idle_power_w, "given (--idle-power-w)"
    elif idle:
        idle_w = sum(idle) / len(idle)
        idle_source = f"measured before the load ({len(idle)} samples)"
    else:
        idle_w, idle_source = 0.0, "not measured: no sample before the load (net = gross)"
    mean_w = sum(loaded) / len(loaded)
    gross_j = mean_w * seconds
    net_j = max(0.0, mean_w - idle_w) * seconds
    out: dict[str, Any] = {
        "available": True,
        "gpus": gpu_count,
        "window_s": round(seconds, 3),
        "samples": len(loaded),
        "mean_power_w": round(mean_w, 2),
        "idle_power_w": round(idle_w, 2),
        "idle_source": idle_source,
        "energy_j": round(gross_j, 3),
        "net_energy_j": round(net_j, 3),
        "output_tokens": output_tokens,
    }
    if output_tokens > 0:
        out["j_per_output_token"] = net_j / output_tokens
        out["gross_j_per_output_token"] = gross_j / output_tokens
    return out


def format_energy(energy: dict[str, Any]) -> str:
    if not energy.get("available"):
        return f"Energy: not measured ({energy.get('reason')})"
    per = energy.get("j_per_output_token")
    per_text = f"{per:.4f} J/output token" if per is not None else "no output tokens"
    return (
        f"Energy: {per_text} (mean {energy['mean_power_w']:.1f} W on {energy['gpus']} GPU(s), "
        f"idle {energy['idle_power_w']:.1f} W {energy['idle_source']}, "
        f"{energy['net_energy_j']:.1f} J over {energy['window_s']:.1f} s)"
    )

"""What a command left running when it exited, as the record keeps it and the user reads it.

The wrapper stops such processes (they may hold GPU memory the next run needs); a run that
exited 0 is still "ok", but the user must be told what proctor stopped: each process's pid,
name, command line (masked) and the GPU memory it held when the wrapper looked, if known.
No pydantic or rich here: the wrapper imports this.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import psutil

from proctor import redact

#: Longest command line kept per process (a shell may carry a whole script).
CMDLINE_MAX = 200


def describe(proc: psutil.Process, gpu_mib: Mapping[int, float] | None) -> dict[str, Any]:
    """One process as the record keeps it; `gpu_mib` is None when GPU memory is not known."""
    name: str | None = None
    cmdline: str | None = None
    try:
        name = proc.name()
        words = redact.process_redactor().argv(proc.cmdline())
        # One line: a `-c` script's newlines would cut the notice the user reads.
        cmdline = " ".join(" ".join(words).split())[:CMDLINE_MAX] or None
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        pass
    held = None if gpu_mib is None else round(float(gpu_mib.get(proc.pid, 0.0)), 1)
    return {"pid": proc.pid, "name": name, "cmdline": cmdline, "gpu_memory_mib": held}


def gpu_by_pid(samples: Iterable[Any]) -> dict[int, float]:
    """MiB per pid over every GPU of a sample (GpuSample.processes: (pid, MiB) pairs)."""
    held: dict[int, float] = {}
    for sample in samples:
        for pid, mib in sample.processes:
            held[pid] = held.get(pid, 0.0) + float(mib)
    return held


def _one(entry: Mapping[str, Any]) -> str:
    what = entry.get("cmdline") or entry.get("name") or "?"
    text = f"pid {entry.get('pid')} ({what})"
    mib = entry.get("gpu_memory_mib")
    if mib:
        text += f" holding {float(mib):.0f} MiB of GPU memory"
    elif mib is None:
        text += ", GPU memory not known"
    if entry.get("signal"):
        text += f", {entry['signal']}"
    if entry.get("survived"):
        text += ", STILL ALIVE"
    return text


def notice(entries: Iterable[Mapping[str, Any]]) -> str | None:
    """The line a user reads at the end of a run; None when nothing was left."""
    found = list(entries)
    if not found:
        return None
    alive = [e for e in found if e.get("survived")]
    head = f"the command exited and left {len(found)} process(es) running; proctor stopped "
    head += "them" if not alive else f"{len(found) - len(alive)}, {len(alive)} survived"
    return head + ": " + "; ".join(_one(e) for e in found)


__all__ = ["CMDLINE_MAX", "describe", "gpu_by_pid", "notice"]

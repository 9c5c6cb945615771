"""Identity of the machine a run executes on (hostname, OS, CPU, memory, timezone)."""

from __future__ import annotations

import os
import platform
import socket
import time
from typing import Any

import psutil


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def host_info() -> dict[str, Any]:
    return {
        "hostname": socket.gethostname(),
        "os": platform.platform(terse=False),
        "kernel": platform.release(),
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count() or 0,
        "memory_total_bytes": psutil.virtual_memory().total,
        "python": platform.python_version(),
        "timezone": time.strftime("%Z%z"),
    }

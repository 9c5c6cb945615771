"""What a monitor needs to know about a process: alive, and how it ended.

`PopenWatch` wraps a child proctor started (its exit status is exact); `IdentityWatch` follows
a process by pid + start time (pid reuse cannot fool it) and reads the exit status from the
run's `exit_code` file when the process was started by proctor's detached wrapper.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import psutil

from proctor.monitors.proctree import ProcessIdentity


@dataclass(frozen=True)
class ProcStatus:
    alive: bool
    exit_code: int | None = None  # known only once it has ended, and only where recorded
    # Ended by proctor itself, and why ("stop: stop requested", "timeout: time limit of 5s
    # reached"): its supervisor records it before it signals, so a monitor that sees the end
    # reads proctor's reason, not a death.
    stopped_by: str | None = None


class Watched(Protocol):
    def status(self) -> ProcStatus: ...


class PopenWatch:
    def __init__(self, proc: subprocess.Popen[bytes] | subprocess.Popen[str]) -> None:
        self.proc = proc

    @property
    def pid(self) -> int:
        return self.proc.pid

    def status(self) -> ProcStatus:
        code = self.proc.poll()
        return ProcStatus(alive=code is None, exit_code=code)


class IdentityWatch:
    def __init__(
        self, identity: ProcessIdentity, exit_code_file: str | os.PathLike[str] | None = None
    ) -> None:
        self.identity = identity
        self.exit_code_file = Path(exit_code_file) if exit_code_file is not None else None

    @property
    def pid(self) -> int:
        return self.identity.pid

    def status(self) -> ProcStatus:
        if self.identity.is_alive():
            return ProcStatus(alive=True)
        code: int | None = None
        if self.exit_code_file is not None:
            try:
                code = int(self.exit_code_file.read_text().strip())
            except (OSError, ValueError):
                code = None  # absent means unknown, never "ok"
        return ProcStatus(alive=False, exit_code=code)


def count_matching(pattern: str, *, exclude: set[int] | None = None) -> int:
    """Live processes whose command line matches `pattern` (observing only; kills nothing)."""
    rx = re.compile(pattern)
    skip = {os.getpid(), *(exclude or set())}
    n = 0
    for proc in psutil.process_iter(["pid", "cmdline"]):
        try:
            if proc.info["pid"] in skip:
                continue
            cmd = " ".join(proc.info["cmdline"] or [])
            if cmd and rx.search(cmd) and proc.status() != psutil.STATUS_ZOMBIE:
                n += 1
        except psutil.Error:
            continue
    return n

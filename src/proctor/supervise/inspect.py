"""Hang inspection: stacks of live worker processes, before teardown destroys the evidence.

For each pid: `py-spy dump` (Python stacks), then the first debugger on PATH among rocgdb,
cuda-gdb and gdb in batch mode, with `detach` before `quit` so the process goes on running.
Each tool runs in its own session under a timeout; a tool that overruns is ended (the tool,
never the target), and the target gets SIGCONT in case the debugger left it stopped.
Output goes to out_dir/PID-TOOL.txt. Nothing here kills an inspected process.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from proctor.errors import TargetUnavailable

#: Debugger commands per tool; `detach` always precedes `quit`.
GDB_COMMANDS: dict[str, list[str]] = {
    "rocgdb": [
        "info agents",
        "info queues",
        "info dispatches",
        "info threads",
        "thread apply all bt",
    ],
    "cuda-gdb": ["info cuda kernels", "info threads", "thread apply all bt"],
    "gdb": ["info threads", "thread apply all bt"],
}
DEBUGGERS = ("rocgdb", "cuda-gdb", "gdb")


@dataclass(frozen=True)
class InspectResult:
    pid: int
    tool: str
    path: Path
    returncode: int | None  # None when it timed out or could not start
    timed_out: bool
    duration_s: float
    error: str | None = None  # e.g. "ptrace refused" or "tool not found"

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out

    def to_dict(self) -> dict[str, object]:
        return {
            "pid": self.pid,
            "tool": self.tool,
            "path": str(self.path),
            "returncode": self.returncode,
            "timed_out": self.timed_out,
            "duration_s": round(self.duration_s, 3),
            "error": self.error,
        }


def find_py_spy() -> str | None:
    """py-spy from this interpreter's environment (its wheel ships the binary), else PATH."""
    here = Path(sys.executable).parent / "py-spy"
    if here.is_file() and os.access(here, os.X_OK):
        return str(here)
    return shutil.which("py-spy")


def available_tools() -> dict[str, str]:
    """Tool name -> path for py-spy and the first debugger present."""
    tools: dict[str, str] = {}
    spy = find_py_spy()
    if spy:
        tools["py-spy"] = spy
    for name in DEBUGGERS:
        found = shutil.which(name)
        if found:
            tools[name] = found
            break
    return tools


def _argv(tool: str, path: str, pid: int) -> list[str]:
    if tool == "py-spy":
        return [path, "dump", "--pid", str(pid)]
    argv = [path, "-p", str(pid), "-batch", "-nx"]
    for cmd in [*GDB_COMMANDS.get(tool, GDB_COMMANDS["gdb"]), "detach", "quit"]:
        argv += ["-ex", cmd]
    return argv


def _diagnose(text: str) -> str | None:
    lowered = text.lower()
    if "operation not permitted" in lowered or ("ptrace" in lowered and "denied" in lowered):
        return "ptrace refused (needs root, CAP_SYS_PTRACE or kernel.yama.ptrace_scope=0)"
    if "no such process" in lowered:
        return "process gone"
    return None


def _run_tool(tool: str, path: str, pid: int, out: Path, timeout_s: float) -> InspectResult:
    argv = _argv(tool, path, pid)
    start = time.monotonic()
    timed_out = False
    try:
        proc = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # so a timeout can end the tool's whole group
        )
    except OSError as exc:
        out.write_text(f"$ {shlex.join(argv)}\n\ncould not start {tool}: {exc}\n")
        return InspectResult(pid, tool, out, None, False, 0.0, f"could not start: {exc}")
    try:
        data, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        timed_out = True
        # End the tool (SIGTERM lets gdb detach), then force it; the target is left alone.
        for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                data, _ = proc.communicate(timeout=wait)
                break
            except subprocess.TimeoutExpired:
                continue
        else:
            data = b""
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGCONT)  # a debugger killed mid-attach can leave it stopped
    duration = time.monotonic() - start
    text = (data or b"").decode(errors="replace")
    code = None if timed_out else proc.returncode
    error = f"timed out after {timeout_s:.0f}s" if timed_out else None
    if not timed_out and code != 0:
        error = _diagnose(text) or f"{tool} exited {code}"
    out.write_text(
        f"$ {shlex.join(argv)}\n"
        f"# pid {pid}, {tool}, {duration:.2f}s, exit {code}"
        f"{', ' + error if error else ''}\n\n{text}"
    )
    return InspectResult(pid, tool, out, code, timed_out, duration, error)


def inspect(
    pids: Iterable[int],
    out_dir: str | os.PathLike[str],
    timeout_s: float = 90.0,
    *,
    tools: Sequence[str] | None = None,
) -> list[InspectResult]:
    """Dump stacks of each pid into out_dir/PID-TOOL.txt; one result per (pid, tool).

    `tools` limits which tools run (names from `available_tools()`); default: py-spy and the
    first debugger found. With no tool at all, TargetUnavailable (say what to install).
    """
    present = available_tools()
    chosen = {t: p for t, p in present.items() if tools is None or t in tools}
    if not chosen:
        raise TargetUnavailable(
            "no inspection tool available (py-spy, rocgdb, cuda-gdb, gdb)",
            hint="install py-spy (a proctor dependency) or gdb",
        )
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    results: list[InspectResult] = []
    for pid in pids:
        for tool, path in chosen.items():
            name = "pyspy" if tool == "py-spy" else tool
            results.append(_run_tool(tool, path, pid, out / f"{pid}-{name}.txt", timeout_s))
    return results

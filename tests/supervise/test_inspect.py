from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from proctor.supervise.inspect import available_tools, inspect

SLEEPER = (
    "import time\n"
    "def deep_sleep_marker():\n"
    "    print('sleeping', flush=True)\n"
    "    time.sleep(60)\n"
    "deep_sleep_marker()\n"
)


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen([sys.executable, "-c", SLEEPER], stdout=subprocess.PIPE)
    # Inside deep_sleep_marker once it says so (a fixed pause can end before Python started).
    assert proc.stdout is not None and proc.stdout.readline() == b"sleeping\n"
    yield proc
    proc.kill()
    proc.wait()


def test_pyspy_dump_of_sleeping_python_and_process_survives(
    tmp_path: Path, sleeper: subprocess.Popen[bytes]
) -> None:
    if "py-spy" not in available_tools():
        pytest.skip("py-spy missing")
    results = inspect([sleeper.pid], tmp_path / "inspect", timeout_s=30, tools=["py-spy"])
    (res,) = results
    out = tmp_path / "inspect" / f"{sleeper.pid}-pyspy.txt"
    assert res.path == out and out.exists()
    text = out.read_text()
    if res.error and "ptrace" in res.error:  # sandbox without ptrace: recorded, not hidden
        assert "ptrace" in text or "permitted" in text.lower()
    else:
        assert res.ok, text
        assert "deep_sleep_marker" in text
    assert sleeper.poll() is None  # inspection kills nothing


def test_gdb_batch_detaches(tmp_path: Path, sleeper: subprocess.Popen[bytes]) -> None:
    tools = available_tools()
    debugger = next((t for t in ("rocgdb", "cuda-gdb", "gdb") if t in tools), None)
    if debugger is None:
        pytest.skip("no debugger on PATH")
    (res,) = inspect([sleeper.pid], tmp_path, timeout_s=60, tools=[debugger])
    text = res.path.read_text()
    assert "-ex detach -ex quit" in text.splitlines()[0]
    if res.ok:
        assert "Inferior 1" in text and "detached" in text
    time.sleep(0.2)
    assert sleeper.poll() is None
    # Still running (not left stopped): its state is sleeping, not traced/stopped.
    import psutil

    assert psutil.Process(sleeper.pid).status() in (psutil.STATUS_SLEEPING, psutil.STATUS_RUNNING)


def test_timeout_bounds_the_tool_and_leaves_target(
    tmp_path: Path, sleeper: subprocess.Popen[bytes]
) -> None:
    if "gdb" not in available_tools() and "py-spy" not in available_tools():
        pytest.skip("no tool")
    tool = "gdb" if "gdb" in available_tools() else "py-spy"
    t0 = time.monotonic()
    (res,) = inspect([sleeper.pid], tmp_path, timeout_s=0.01, tools=[tool])
    assert time.monotonic() - t0 < 15
    assert res.timed_out or res.returncode is not None
    if res.timed_out:
        assert "timed out" in res.path.read_text()
    time.sleep(0.2)
    assert sleeper.poll() is None


def test_gone_pid_is_recorded_not_raised(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    results = inspect([proc.pid], tmp_path, timeout_s=20, tools=["py-spy"])
    assert results and not results[0].ok
    assert results[0].path.exists()

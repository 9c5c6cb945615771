from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from proctor.errors import TargetUnavailable
from proctor.monitors.proctree import (
    ProcessIdentity,
    TreeTracker,
    descendants,
    find_workers,
    listener_on_port,
    load_tracked,
    stdout_log_of,
)

# A parent that starts a child in a new session (setsid), which then sleeps; parent waits.
TREE = textwrap.dedent(
    """
    import subprocess, sys, time
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)  # worker-mark"],
                             start_new_session=True)
    print(child.pid, flush=True)
    time.sleep(60)
    """
)


@pytest.fixture
def tree() -> Iterator[tuple[subprocess.Popen[str], int]]:
    proc = subprocess.Popen([sys.executable, "-c", TREE], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    child = int(proc.stdout.readline())
    yield proc, child
    for pid in (child,):
        try:
            import os
            import signal

            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    proc.kill()
    proc.wait()


def test_identity_guards_pid_reuse() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    ident = ProcessIdentity.of(proc.pid)
    assert ident.is_alive()
    fake = ProcessIdentity(proc.pid, ident.create_time - 100)  # same pid, other start time
    assert not fake.is_alive()
    proc.kill()
    proc.wait()
    assert not ident.is_alive()
    with pytest.raises(TargetUnavailable):
        ProcessIdentity.of(proc.pid)


def test_descendants_include_setsid_child(tree: tuple[subprocess.Popen[str], int]) -> None:
    proc, child = tree
    pids = [d.pid for d in descendants(proc.pid)]
    assert child in pids


def test_tracker_remembers_orphaned_setsid_child(
    tmp_path: Path, tree: tuple[subprocess.Popen[str], int]
) -> None:
    proc, child = tree
    path = tmp_path / "tree.json"
    tracker = TreeTracker(ProcessIdentity.of(proc.pid), path=path, interval_s=0.05)
    tracker.start()
    time.sleep(0.2)
    proc.kill()  # the child is re-parented away from the root, out of its process group
    proc.wait()
    time.sleep(0.2)
    tracker.stop()
    assert child not in [d.pid for d in descendants(proc.pid)]
    assert child in [i.pid for i in tracker.seen]
    assert child in [i.pid for i in tracker.alive()]
    root, seen = load_tracked(path)
    assert root.pid == proc.pid and child in [i.pid for i in seen]
    data = json.loads(path.read_text())
    assert any("worker-mark" in " ".join(e["cmdline"]) for e in data["seen"])


def test_a_worker_still_inside_execve_is_found_once_its_command_line_is_set(
    tree: tuple[subprocess.Popen[str], int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A child's command line reads empty between the moment its parent learns it started
    (execve closed the close-on-exec pipe) and the moment execve set it up; a loaded machine
    stretches that window (CI under a CPU hog found no worker). The read is tried again."""
    proc, child = tree
    real = psutil.Process.cmdline
    reads: list[int] = []

    def racing(self: psutil.Process) -> list[str]:
        if self.pid == child and len(reads) < 3:  # the first three reads: inside execve
            reads.append(self.pid)
            return []
        return real(self)

    monkeypatch.setattr(psutil.Process, "cmdline", racing)
    assert [w.pid for w in find_workers(ProcessIdentity.of(proc.pid), ["worker-mark"])] == [child]
    assert len(reads) == 3


def test_find_workers_only_inside_tree(tree: tuple[subprocess.Popen[str], int]) -> None:
    proc, child = tree
    outsider = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(30)  # worker-mark"]
    )
    try:
        found = [w.pid for w in find_workers(ProcessIdentity.of(proc.pid), ["worker-mark"])]
        assert found == [child]
        assert find_workers(ProcessIdentity.of(proc.pid), ["no-such-thing"]) == []
    finally:
        outsider.kill()
        outsider.wait()


def test_stdout_log_of(tmp_path: Path) -> None:
    log = tmp_path / "out.log"
    with log.open("w") as fh:
        proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], stdout=fh)
    piped = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(30)"], stdout=subprocess.PIPE
    )
    try:
        time.sleep(0.1)
        assert stdout_log_of(proc.pid) == log
        assert stdout_log_of(piped.pid) is None  # a pipe is not a log to follow
    finally:
        for p in (proc, piped):
            p.kill()
            p.wait()


def test_listener_on_port() -> None:
    from tests.fixtures.fake_openai_server import free_port

    port = free_port()
    code = (
        "import socket,time\ns=socket.socket()\n"
        "s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)\n"
        f"s.bind(('127.0.0.1',{port}));s.listen();print('up',flush=True);time.sleep(30)"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "up"
        ident = listener_on_port(port)
        assert ident is not None and ident.pid == proc.pid
    finally:
        proc.kill()
        proc.wait()
    assert listener_on_port(port) is None

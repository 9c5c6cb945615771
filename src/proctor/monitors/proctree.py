"""Process identities and process trees: what a server started, so stop can end all of it.

A pid alone is not an identity: pids are reused. `ProcessIdentity` pairs the pid with the
kernel's start time, so a later check never mistakes a new process for the old one.
`TreeTracker` remembers every descendant seen while a server runs, including those that left
the process group with setsid() or were re-parented to init when their parent died, and keeps
the list in a JSON file so a later proctor can still find them. Nothing here kills anything and
nothing here looks machine-wide: worker recognition is limited to the tree under one root.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from proctor.errors import ConfigError, TargetUnavailable
from proctor.monitors.periodic import Periodic

#: Start times read twice can differ by rounding; anything closer than this is the same process.
_CREATE_TIME_SLACK_S = 0.05
#: How long find_workers waits for a live descendant's command line that reads empty: the
#: process is still inside execve (the kernel closes the close-on-exec descriptors, which is
#: how a parent learns its child started, before it sets up the new command line), a window
#: that a loaded machine stretches to tens of milliseconds.
_EXEC_SETTLE_S = 1.0


@dataclass(frozen=True)
class ProcessIdentity:
    pid: int
    create_time: float

    @classmethod
    def of(cls, pid: int) -> ProcessIdentity:
        """The identity of a live process; TargetUnavailable when there is none."""
        try:
            return cls(pid=pid, create_time=psutil.Process(pid).create_time())
        except (psutil.NoSuchProcess, psutil.ZombieProcess) as exc:
            raise TargetUnavailable(
                f"no process with pid {pid}", hint="check the pid, or the run's pid file"
            ) from exc
        except psutil.AccessDenied as exc:
            raise TargetUnavailable(
                f"cannot read process {pid}", hint="run proctor as the process's user"
            ) from exc

    def process(self) -> psutil.Process | None:
        """The psutil handle if this identity still names a running (non-zombie) process."""
        try:
            proc = psutil.Process(self.pid)
            if abs(proc.create_time() - self.create_time) > _CREATE_TIME_SLACK_S:
                return None  # pid reused by another process
            if proc.status() == psutil.STATUS_ZOMBIE:
                return None
            return proc
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            return None
        except psutil.AccessDenied:
            return None

    def is_alive(self) -> bool:
        return self.process() is not None

    def cmdline(self, settle_s: float = 0.0) -> list[str]:
        """The command line; [] once the process is gone. One that reads empty while the
        process lives is read again for up to `settle_s` (it is inside execve)."""
        deadline = time.monotonic() + settle_s
        while True:
            proc = self.process()
            if proc is None:
                return []
            try:
                parts = [str(part) for part in proc.cmdline()]
            except (psutil.Error, OSError):
                return []
            if parts or time.monotonic() >= deadline:
                return parts
            time.sleep(0.01)

    def to_dict(self) -> dict[str, Any]:
        return {"pid": self.pid, "create_time": self.create_time}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ProcessIdentity:
        return cls(pid=int(data["pid"]), create_time=float(data["create_time"]))


def _identity(proc: psutil.Process) -> ProcessIdentity | None:
    try:
        return ProcessIdentity(proc.pid, proc.create_time())
    except psutil.Error:
        return None


def descendants(pid: int | ProcessIdentity) -> list[ProcessIdentity]:
    """A snapshot of every live descendant (children, grandchildren...) of `pid`."""
    try:
        proc = pid.process() if isinstance(pid, ProcessIdentity) else psutil.Process(pid)
        if proc is None:
            return []
        children = proc.children(recursive=True)
    except psutil.Error:
        return []
    return [ident for ident in (_identity(c) for c in children) if ident is not None]


class TreeTracker(Periodic):
    """Records every descendant of `root` seen while it runs; optionally persists to JSON.

    Poll interval 0.5 s by default: a worker that lives shorter than that may be missed, but
    such a worker also cannot hold a GPU for long. `snapshot()` can be called at any time.
    """

    def __init__(
        self,
        root: ProcessIdentity,
        *,
        path: str | os.PathLike[str] | None = None,
        interval_s: float = 0.5,
    ) -> None:
        super().__init__(interval_s, thread_name="proctor-tree")
        self.root = root
        self.path = Path(path) if path is not None else None
        self._seen: dict[ProcessIdentity, list[str]] = {}
        self._lock = threading.Lock()

    def start(self) -> None:
        self.snapshot()
        self._start_thread()

    def stop(self) -> None:
        self._join_thread(timeout=5)
        self.snapshot()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.snapshot()
            if not self.root.is_alive():
                # Orphans re-parented to init are no longer under root; keep polling the ones
                # already known is pointless (they are recorded), so stop here.
                break

    def snapshot(self) -> list[ProcessIdentity]:
        """Add the current descendants to the record and return everything seen so far."""
        new: list[tuple[ProcessIdentity, list[str]]] = []
        for ident in descendants(self.root):
            if ident not in self._seen:
                new.append((ident, ident.cmdline()[:20]))
        # Descendants of already-known processes that were re-parented away from root.
        with self._lock:
            known = list(self._seen)
        for ident in known:
            for sub in descendants(ident):
                if sub not in self._seen and all(sub != n for n, _ in new):
                    new.append((sub, sub.cmdline()[:20]))
        # A command line that could not be read at first sight (the process was busy being
        # created, or the machine was loaded) is read again while the process lives.
        with self._lock:
            unread = [ident for ident, cmd in self._seen.items() if not cmd]
        found = [(ident, cmd) for ident in unread if (cmd := ident.cmdline()[:20])]
        with self._lock:
            for ident, cmd in new + found:
                self._seen[ident] = cmd
            if new or found:
                self._persist()
            return list(self._seen)

    @property
    def seen(self) -> list[ProcessIdentity]:
        with self._lock:
            return list(self._seen)

    def alive(self) -> list[ProcessIdentity]:
        return [ident for ident in self.seen if ident.is_alive()]

    def _persist(self) -> None:
        if self.path is None:
            return
        data = {
            "root": self.root.to_dict(),
            "seen": [{**i.to_dict(), "cmdline": c} for i, c in self._seen.items()],
        }
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(json.dumps(data, indent=1, allow_nan=False))
        os.replace(tmp, self.path)  # atomic: a reader never sees half a file


def load_tracked(path: str | os.PathLike[str]) -> tuple[ProcessIdentity, list[ProcessIdentity]]:
    """Read a `TreeTracker` file: (root, every descendant recorded)."""
    try:
        data = json.loads(Path(path).read_text())
        root = ProcessIdentity.from_dict(data["root"])
        seen = [ProcessIdentity.from_dict(d) for d in data["seen"]]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigError(
            f"cannot read process-tree file {path}: {exc}",
            hint="the run directory may be incomplete; stop by process group instead",
        ) from exc
    return root, seen


def find_workers(root: ProcessIdentity, patterns: Iterable[str]) -> list[ProcessIdentity]:
    """Descendants of `root` whose command line matches any pattern (regex search).

    With no patterns every descendant is a worker. Never looks outside the tree.
    """
    compiled = [re.compile(p) for p in patterns]
    out: list[ProcessIdentity] = []
    for ident in descendants(root):
        line = " ".join(ident.cmdline(settle_s=_EXEC_SETTLE_S) if compiled else ())
        if not compiled or any(rx.search(line) for rx in compiled):
            out.append(ident)
    return out


def stdout_log_of(pid: int) -> Path | None:
    """The regular file a process writes its stdout to (/proc/PID/fd/1), if it is one."""
    try:
        target = os.readlink(f"/proc/{pid}/fd/1")
    except OSError:
        return None
    path = Path(target)
    # Pipes, ttys and deleted files are not logs we can follow.
    if not target.startswith("/") or target.endswith(" (deleted)") or not path.is_file():
        return None
    return path


def listener_on_port(port: int) -> ProcessIdentity | None:
    """The process listening on TCP `port` on this machine, if proctor may see it."""
    try:
        conns = psutil.net_connections(kind="tcp")
    except (psutil.AccessDenied, OSError):
        return None
    for conn in conns:
        if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == port:
            if conn.pid is None:
                return None
            try:
                return ProcessIdentity.of(conn.pid)
            except TargetUnavailable:
                return None
    return None

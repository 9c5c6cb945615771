"""The kill ladder: SIGTERM to everything a run owns, a grace period, then SIGKILL.

"Everything a run owns" is its process group plus every descendant of the given roots, so a
grandchild that left the group (setsid) is stopped too. Nothing is matched by name. Zombies
count as gone: they hold no memory and die with their parent's reaping.

Top down: the group gets SIGTERM first, and until it is gone (or the grace is spent) nothing
outside it is signalled; then the rest gets SIGTERM (at least LATE_GRACE_S of grace), then
SIGKILL. A command that started runs of its own (a flow's server and workload, each with its
own supervisor) is told it is stopped before they die, so its own reason (stopped) wins over
what its monitors would see (a server that died), every time, not by a race.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import psutil

LATE_GRACE_S = 5.0  # the grace of processes outside the group, once the group is gone


@dataclass
class LadderReport:
    terminated: list[int] = field(default_factory=list)
    killed: list[int] = field(default_factory=list)
    survivors: list[int] = field(default_factory=list)

    @property
    def count(self) -> int:
        return len(set(self.terminated) | set(self.killed))


def _alive(proc: psutil.Process) -> bool:
    try:
        return bool(proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE)
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def members(
    pgid: int | None, roots: Iterable[int] = (), exclude: Iterable[int] = ()
) -> list[psutil.Process]:
    """Live processes in group `pgid` and below `roots` (the roots themselves excluded)."""
    skip = {os.getpid(), *exclude}
    found: dict[int, psutil.Process] = {}
    if pgid is not None and pgid > 1:
        # getpgid on every pid, a psutil.Process only for the group's: process_iter would
        # read /proc/PID/stat of every process on the machine (tens of ms on a busy host, at
        # the end of every run).
        for pid in psutil.pids():
            try:
                if os.getpgid(pid) == pgid:
                    found[pid] = psutil.Process(pid)
            except (OSError, psutil.NoSuchProcess, psutil.AccessDenied):
                continue
    for root in roots:
        try:
            for child in psutil.Process(root).children(recursive=True):
                found[child.pid] = child
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return [p for pid, p in found.items() if pid not in skip and _alive(p)]


def _group(pgid: int, exclude: Iterable[int]) -> list[psutil.Process]:
    return members(pgid, (), exclude)


def _signal(procs: Iterable[psutil.Process], sig: int) -> list[int]:
    sent: list[int] = []
    for proc in procs:
        try:
            proc.send_signal(sig)
            sent.append(proc.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return sent


def kill_ladder(
    pgid: int | None,
    roots: Iterable[int] = (),
    *,
    grace: float = 10.0,
    kill_wait: float = 5.0,
    exclude: Iterable[int] = (),
    reap: Callable[[], None] | None = None,
    poll: float = 0.05,
    extra: Callable[[], Iterable[psutil.Process]] | None = None,
) -> LadderReport:
    """Stop a process group and the descendants of `roots`. Returns who got which signal.

    `reap` is called while waiting, so a caller that is the parent (or subreaper) of these
    processes can collect their exit statuses instead of leaving zombies. `extra` names more
    processes of the run, asked again at every step (see supervise/orphans.py).
    """
    roots = tuple(roots)
    exclude = tuple(exclude)
    report = LadderReport()

    def current() -> list[psutil.Process]:
        if reap is not None:
            reap()
        found = members(pgid, roots, exclude)
        if extra is not None:
            seen = {p.pid for p in found}
            found += [p for p in extra() if p.pid not in seen and _alive(p)]
        return found

    procs = current()
    if not procs:
        return report
    started = time.monotonic()
    deadline = started + grace
    if pgid is not None and pgid > 1:
        # The command first: its group gets SIGTERM and the grace to act on it (a flow tears
        # its server down, having noted that it was stopped) before anything it started
        # outside its group is signalled, so a monitor inside never sees those die first.
        report.terminated = _signal(_group(pgid, exclude), signal.SIGTERM)
        while time.monotonic() < deadline:
            if reap is not None:
                reap()
            group = _group(pgid, exclude)
            if not group:
                break
            fresh = [p for p in group if p.pid not in report.terminated]
            report.terminated += _signal(fresh, signal.SIGTERM)
            time.sleep(poll)
        # What is left outside the group gets a short grace of its own even when the
        # group used all of it.
        deadline = max(deadline, time.monotonic() + min(grace, LATE_GRACE_S))
    while time.monotonic() < deadline:
        procs = current()
        if not procs:
            return report
        # Children forked after the first SIGTERM get theirs too.
        fresh = [p for p in procs if p.pid not in report.terminated]
        report.terminated += _signal(fresh, signal.SIGTERM)
        time.sleep(poll)
    deadline = time.monotonic() + kill_wait
    while time.monotonic() < deadline:
        procs = current()
        if not procs:
            return report
        report.killed += [pid for pid in _signal(procs, signal.SIGKILL) if pid not in report.killed]
        time.sleep(poll)
    report.survivors = [p.pid for p in current()]
    return report

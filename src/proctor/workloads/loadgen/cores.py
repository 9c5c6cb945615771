"""--client-cores: each client process on a CPU core of its own.

Unpinned, the kernel moves the client's processes between the cores it may use, and now and
then puts two of them (or a worker and the parent) on one core: that worker's loop then waits
for tens of milliseconds, and every request it should have sent meanwhile leaves late
(bench/NOTES.md, *Workers pinned*). With --client-cores, worker i runs on the i-th core
named, a single process on the first, and the parent of workers (it only waits while they
run) on the cores after the last worker's, if any are named.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from proctor.errors import UsageError


def pin(cores: list[int]) -> None:
    """This process onto `cores` (none: left as it is). UsageError where it cannot be."""
    if not cores:
        return
    setter = getattr(os, "sched_setaffinity", None)
    if setter is None:
        raise UsageError("--client-cores needs Linux (os.sched_setaffinity)")
    try:
        setter(0, cores)
    except (OSError, ValueError) as e:
        raise UsageError(
            f"cannot pin the client to cores {','.join(map(str, cores))}: {e}",
            hint="name cores this machine has and lets this process use (nproc, taskset -p $$)",
        ) from e


def allowed() -> list[int] | None:
    """The cores this process may run on (None: the platform cannot say)."""
    getter = getattr(os, "sched_getaffinity", None)
    return sorted(getter(0)) if getter is not None else None


def spans(cores: list[int]) -> str:
    """[0, 1, 2, 5] -> "0-2,5": --client-cores's own form."""
    runs: list[list[int]] = []
    for core in sorted(set(cores)):
        if runs and core == runs[-1][-1] + 1:
            runs[-1].append(core)
        else:
            runs.append([core])
    return ",".join(str(r[0]) if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs)


def check(cores: list[int]) -> None:
    """UsageError unless every core of `cores` can take this process: the cores it may not use
    named with those it may, else each tried in turn. Checked before a bench or sweep starts
    here (jobs/submit.py) and again in the run (runner.run_benchmark): on a far target only
    there, since the cores are that machine's."""
    if not cores:
        return
    usable = allowed()
    lacking = [c for c in cores if usable is not None and c not in usable]
    if usable is not None and lacking:
        raise UsageError(
            f"cannot pin the client to cores {spans(lacking)}: "
            f"this process may use cores {spans(usable)} only",
            hint=f"--client-cores with cores of {spans(usable)}, one per --workers; "
            "or leave it out (not pinned)",
        )
    with pinned(cores[:1]):
        for core in cores[1:]:
            pin([core])


@contextlib.contextmanager
def pinned(cores: list[int]) -> Iterator[None]:
    """This process on `cores` meanwhile, back where it was allowed before after."""
    getter = getattr(os, "sched_getaffinity", None)
    before = getter(0) if getter is not None else None
    try:
        pin(cores)
        yield
    finally:
        if before is not None and cores:
            os.sched_setaffinity(0, before)

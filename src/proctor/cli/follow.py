"""The foreground end of a supervised workload command (eval, offline, ...): say where the run
is, copy its log while it runs, then the summary line and the run's exit status."""

from __future__ import annotations

import os
import sys

from proctor.cli.output import err_console
from proctor.record.rundir import RunDir
from proctor.record.status import RunState
from proctor.targets.service import Interrupts, SupervisedRun, run_failure


def follow(run: RunDir, kind: str, *, quiet: bool) -> tuple[SupervisedRun, RunState]:
    """Follow the `kind` run to its end; `quiet` (--json) keeps stdout for the JSON alone."""
    err_console.print(f"proctor: {kind} run {run.run_id} -> {run.path}", highlight=False)
    supervised = SupervisedRun(run)
    with open(os.devnull, "wb") as devnull:
        return supervised, supervised.follow_to_end(devnull if quiet else sys.stdout.buffer)


def finish(
    supervised: SupervisedRun, interrupts: Interrupts, state: RunState, kind: str = "workload"
) -> None:
    """The summary line on stderr, then exit with the run's status (an interrupt's if one came),
    as an error that says why: the run's own last error line (under --json, in the JSON)."""
    err_console.print(f"proctor: {supervised.summary(state)}", highlight=False)
    if code := interrupts.exit_code(supervised.run, state):
        raise run_failure(supervised.run, code, kind)

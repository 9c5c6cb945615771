"""A run whose controller is the process itself: a flow, a sweep, a server sweep, an SLO search.

Such a run has no wrapper: the process that runs `proctor flow` (or `bench --sweep`, ...) is
its live owner. Like a wrapper, it holds the run's owner lock (record/owner.py) from the
directory's creation and writes `wrapper.pid` (pid and start time), so `runs show/list` read
it as running, `runs wait` waits for it, and `runs stop` sends it SIGTERM, which it turns into
its own interrupt path: stop what it started, record `stopped`, exit 130.

It records what every run records (the seed's list): the command that ran it, the exact
source, the host, the start time with its timezone; the recorder adds the end and duration.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from proctor import redact
from proctor.record import owner
from proctor.record.finish import now_iso
from proctor.record.recorder import Recorder
from proctor.record.rundir import write_atomic
from proctor.supervise.sigterm import SigtermStop, sigterm_stop


class Stopped(KeyboardInterrupt):
    """SIGTERM to a controller (`proctor runs stop` of its run): handled where Ctrl-C is."""


def command_line() -> list[str]:
    """This process's command line as the user typed it (`proctor flow ...`), masked."""
    argv = list(sys.argv)
    if argv and (argv[0].endswith(("proctor", "main.py", "__main__.py")) or argv[0] == "-m"):
        argv[0] = "proctor"
    return redact.process_redactor().argv(argv)


def controller_fields(cwd: Path, runs_dir: Path, store_path: Path | None) -> dict[str, Any]:
    """The record fields every controller-run starts with."""
    from proctor.record.hostinfo import host_info
    from proctor.supervise.launch import collect_source, proctor_outputs

    return {
        "argv": command_line(),
        "cwd": str(cwd),
        "source": collect_source(cwd, proctor_outputs(runs_dir, store_path)),
        "host": host_info(),
        "started_at": now_iso(),
    }


def hold(recorder: Recorder) -> None:
    """This process is the run's controller: its pid file, for readers and `runs stop`."""
    record = owner.pid_record(pgid=None)
    write_atomic(recorder.run.wrapper_pid_path, json.dumps(record))
    # In place: a flow keeps a reference to its recorder's record and saves it whole.
    recorder.record["controller"] = record
    recorder.save()


@contextlib.contextmanager
def controlling(recorder: Recorder) -> Iterator[SigtermStop]:
    """Control the run for the block: pid file written, the first SIGTERM raises Stopped (main
    thread only); `disarm()` the handler it yields before ending the run, so a second SIGTERM
    cannot cut the ending short. The run stays held after it: `Recorder.finish` (after
    exit_code) lets it go, or this process's exit does, so there is no moment without a status
    and without an owner."""
    hold(recorder)
    with sigterm_stop(Stopped) as term:
        yield term


__all__ = ["Stopped", "command_line", "controller_fields", "controlling", "hold"]

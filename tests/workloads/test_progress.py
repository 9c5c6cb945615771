"""Live progress: a bar with done/failed/rate on a terminal, plain lines anywhere else."""

from __future__ import annotations

import io
import time

from rich.console import Console

from proctor.workloads.loadgen.progress import PollingProgress


class Counts:
    done = 0
    failed = 0


def test_terminal_bar_shows_done_failed_and_rate() -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=160)
    c = Counts()
    with PollingProgress(True, interval=0.05, log_every_s=5.0, console=console) as bar:
        assert bar.bar and not bar.lines
        bar.phase("benchmark", 10, lambda: c.done, lambda: c.failed)
        c.done, c.failed = 7, 3
        time.sleep(0.3)
    text = out.getvalue()
    assert "7/10" in text and "3 failed" in text and "req/s" in text


def test_without_a_terminal_lines_go_to_the_stream_as_it_runs() -> None:
    stream = io.StringIO()
    console = Console(file=io.StringIO(), force_terminal=False)
    c = Counts()
    with PollingProgress(
        True, interval=0.02, log_every_s=0.1, stream=stream, console=console
    ) as bar:
        assert bar.lines and not bar.bar
        bar.phase("benchmark", 10, lambda: c.done, lambda: c.failed)
        c.done, c.failed = 4, 1
        # Written before the end: waited for while the phase still runs (a fixed pause can be
        # too short for the thread on a loaded machine).
        deadline = time.monotonic() + 30
        while "[bench] benchmark: 4/10 done, 1 failed" not in stream.getvalue():
            assert time.monotonic() < deadline, stream.getvalue()
            time.sleep(0.02)
        c.done, c.failed = 10, 2
    assert stream.getvalue().splitlines()[-1].startswith("[bench] benchmark: 10/10 done, 2 failed")

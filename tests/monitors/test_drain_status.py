"""The drain's status lines: one at the first poll, one on each change of what they show, else
one every status_every_s; never one per poll (a --poll 1s drain printed a line a second).

The watched job is a script of states (alive for N polls, then ended) on a clock that moves
one second per tick, so the lines are exact, whatever the machine's load."""

from __future__ import annotations

import re
from pathlib import Path

from proctor.monitors.drain import DrainConfig, DrainOutcome, drain
from proctor.monitors.watch import ProcStatus


class ScriptedJob:
    """Alive for `polls` status reads, then ended with exit 0."""

    def __init__(self, polls: int) -> None:
        self.left = polls

    def status(self) -> ProcStatus:
        self.left -= 1
        return ProcStatus(alive=True) if self.left >= 0 else ProcStatus(alive=False, exit_code=0)


def ticking() -> object:
    now = [-1.0]

    def clock() -> float:
        now[0] += 1.0
        return now[0]

    return clock


def times(lines: list[str]) -> list[int]:
    return [int(re.match(r"\[t=(\d+)s\]", line).group(1)) for line in lines]  # type: ignore[union-attr]


def test_nothing_new_prints_a_line_per_interval_not_per_poll(tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    log.write_text("")
    lines: list[str] = []
    result = drain(
        DrainConfig(poll_s=1, offline=True, offline_hang=False),
        offline=ScriptedJob(100),
        server_log=log,
        tick_s=0.001,
        on_status=lines.append,
        status_every_s=15,
        clock=ticking(),  # type: ignore[arg-type]
    )
    assert result.outcome is DrainOutcome.DRAINED, result.to_dict()
    # A full poll at every tick (t=1..101): the first, one per 15 s of nothing new, the end.
    assert times(lines) == [1, 16, 31, 46, 61, 76, 91, 101], lines
    assert lines[-1].endswith("-> drained")


def test_a_change_prints_at_once(tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    log.write_text("")
    lines: list[str] = []
    result = drain(
        DrainConfig(poll_s=1, offline=True, offline_hang=True, stuck_polls=5),
        offline=ScriptedJob(100),
        server_log=log,
        tick_s=0.001,
        on_status=lines.append,
        status_every_s=15,
        clock=ticking(),  # type: ignore[arg-type]
    )
    assert result.outcome is DrainOutcome.HANG, result.to_dict()
    # The stuck count moves at every poll: each is a line, up to the hang.
    assert times(lines) == [1, 2, 3, 4, 5], lines
    assert [re.search(r"stuck=(\d)/5", line).group(1) for line in lines] == list("12345")  # type: ignore[union-attr]

"""Drain: wait for a workload to finish against a server (or offline), catching faults and hangs.

Outcomes and exit codes: drained 0, hang 1, fault 2, server died / offline job failed 3,
time limit or no client within startup-max 4. A fault is a fault pattern in a log, or a server
alive but answering generation requests with errors (see answers.py), pattern or not.

`DrainMachine` holds every rule and is fed `DrainObservation`s with an injected clock. Two
kinds of observation: fast ones (every ~0.1 s: new fault lines, liveness) decide faults and
deaths within a second; full ones (every `poll_s`: progress counters, clients) drive the stuck
counter, drained and time limits. `drain` gathers them for real.

Status lines: the first full poll prints one (the drain is watching), then one when the state
it shows changes (progress source, progressing or not, clients, work in flight, the stuck
count, the outcome), else one every `status_every_s` (15 s) of nothing new; a --poll 1s drain
of a ten-minute bench prints a few dozen lines, not six hundred.

What counts as progress is progress.py's: requests answered or tokens generated (the engine's
metrics or markers, proctor's bench's done counts), never the bytes of a heartbeat or of an
idle server's stats lines. Clients gone: drained once the engine says nothing is in flight
(its running gauge at 0, or its markers quiet for a poll); with no signal from the engine,
drained at once, whatever lines the server goes on printing. The time limits (--max,
--startup-max) are checked on every tick, so `--max 3s` ends after 3 s, not at the next poll.
The log tails shown on a failure leave out the access lines of proctor's own requests (its
/metrics scrapes, the ready gate's /health probes): they are not what the server was doing.
"""

from __future__ import annotations

import enum
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import httpx

from proctor.errors import (
    ExitCode,
    FaultDetected,
    HangDetected,
    Interrupted,
    ProctorError,
    TimeLimitReached,
    UsageError,
    WorkloadFailed,
)
from proctor.monitors.answers import AnswerTally
from proctor.monitors.logscan import LogFollower, LogMatch, LogScanner, own_requests
from proctor.monitors.progress import (
    BenchCounts,
    ServerActivity,
    choose_signals,
    fetch_metrics_text,
    is_engine_signal,
    parse_metrics,
)
from proctor.monitors.watch import ProcStatus, Watched, count_matching
from proctor.spec.durations import format_duration
from proctor.spec.profiles.models import EngineProfile


class DrainOutcome(str, enum.Enum):
    DRAINED = "drained"
    HANG = "hang"
    FAULT = "fault"
    SERVER_DIED = "server-died"
    OFFLINE_FAILED = "offline-failed"
    TIMEOUT = "timeout"
    NO_CLIENT = "no-client"
    STOPPED = "stopped"  # proctor stopped the server or job itself (a stop, not a death)

    @property
    def exit_code(self) -> int:
        return int(_EXIT[self])


_EXIT = {
    DrainOutcome.DRAINED: ExitCode.OK,
    DrainOutcome.HANG: ExitCode.HANG,
    DrainOutcome.FAULT: ExitCode.FAULT,
    DrainOutcome.SERVER_DIED: ExitCode.WORKLOAD_FAILED,
    DrainOutcome.OFFLINE_FAILED: ExitCode.WORKLOAD_FAILED,
    DrainOutcome.TIMEOUT: ExitCode.TIME_LIMIT,
    DrainOutcome.NO_CLIENT: ExitCode.TIME_LIMIT,
    DrainOutcome.STOPPED: ExitCode.INTERRUPTED,
}


#: With nothing new to show, a status line this often (seconds; at most one per full poll).
STATUS_EVERY_S = 15.0


@dataclass(frozen=True)
class DrainConfig:
    max_s: float = 1800.0
    poll_s: float = 10.0
    stuck_polls: int = 6
    startup_max_s: float = 900.0  # no client seen by then: exit 4
    offline: bool = False
    # Offline jobs: process alive counts as in-flight work, so silence is a hang.
    offline_hang: bool = True
    # Server mode: this many generation answers in a row that are errors (5xx in the access
    # log, failed requests in the load generator's progress) is a fault, pattern or not.
    error_streak: int = 5


@dataclass(frozen=True)
class DrainObservation:
    now: float
    faults: Sequence[LogMatch] = ()
    server: ProcStatus | None = None  # server mode: the server process
    offline: ProcStatus | None = None  # offline mode: the offline job
    # Full observations only (None on fast ticks):
    progress: Mapping[str, float] | None = None
    clients_alive: int | None = None
    clients_known: int = 0  # clients proctor started: they count as seen even if already gone
    running: float | None = None  # in-flight requests per /metrics, when known
    answers: AnswerTally | None = None  # server mode: generation answers seen in the logs


class DrainMachine:
    def __init__(self, config: DrainConfig, started_at: float) -> None:
        self.config = config
        self.started_at = started_at
        self.outcome: DrainOutcome | None = None
        self.faults: list[LogMatch] = []
        self.stuck = 0
        self.polls = 0
        self.client_seen = False
        self.clients_alive = 0
        self.last_progress: dict[str, float] = {}
        self.progressed_last = False
        self.engine_signal = False  # the last poll had the engine's own progress signal
        self.exit_status: int | None = None
        self.reason = ""

    def _end(self, outcome: DrainOutcome, reason: str) -> DrainOutcome:
        self.outcome, self.reason = outcome, reason
        return outcome

    def observe(self, obs: DrainObservation) -> DrainOutcome | None:
        if self.outcome is not None:
            return self.outcome
        cfg = self.config
        self.faults.extend(obs.faults)
        if self.faults:
            return self._end(DrainOutcome.FAULT, "fault pattern in a log")
        ended = obs.offline if cfg.offline else obs.server
        if ended is not None and not ended.alive and ended.stopped_by:
            # proctor ended it itself: its reason wins over what the death would say.
            self.exit_status = ended.exit_code
            what = "offline job" if cfg.offline else "server"
            if ended.stopped_by.startswith("timeout"):
                return self._end(
                    DrainOutcome.TIMEOUT,
                    f"the {what} reached its own time limit "
                    f"and proctor stopped it ({ended.stopped_by})",
                )
            return self._end(
                DrainOutcome.STOPPED, f"proctor stopped the {what} ({ended.stopped_by})"
            )
        if cfg.offline:
            if obs.offline is not None and not obs.offline.alive:
                self.exit_status = obs.offline.exit_code
                if obs.offline.exit_code == 0:
                    return self._end(DrainOutcome.DRAINED, "offline job exited 0")
                return self._end(
                    DrainOutcome.OFFLINE_FAILED,
                    f"offline job exited with status {obs.offline.exit_code}"
                    if obs.offline.exit_code is not None
                    else "offline job ended with unknown status",
                )
        elif obs.server is not None and not obs.server.alive:
            self.exit_status = obs.server.exit_code
            return self._end(DrainOutcome.SERVER_DIED, "server process died")
        elif obs.answers is not None and (broken := obs.answers.broken(cfg.error_streak)):
            return self._end(DrainOutcome.FAULT, broken)
        if obs.progress is None:  # a fast tick: only faults and deaths are decided
            return None

        self.polls += 1
        elapsed = obs.now - self.started_at
        changed = {
            key for key, value in obs.progress.items() if value != self.last_progress.get(key, 0.0)
        }
        progressed = bool(changed)
        engine_progressed = any(is_engine_signal(key) for key in changed)
        self.engine_signal = any(is_engine_signal(key) for key in obs.progress)
        self.last_progress = dict(obs.progress)
        self.progressed_last = progressed

        if cfg.offline:
            in_flight = cfg.offline_hang
        else:
            self.clients_alive = obs.clients_alive or 0
            if self.clients_alive > 0 or obs.clients_known > 0:
                self.client_seen = True
            if not self.client_seen and elapsed >= cfg.startup_max_s:
                return self._end(
                    DrainOutcome.NO_CLIENT,
                    f"no client appeared within {format_duration(cfg.startup_max_s)}",
                )
            if self.client_seen and self.clients_alive == 0:
                # Clients are gone; done once the engine has nothing left in flight. Only the
                # engine can say so: log lines (an idle server's stats) are not work in flight.
                if obs.running is not None:
                    idle = obs.running == 0
                else:
                    idle = not (self.engine_signal and engine_progressed)
                broken = (
                    obs.answers.broken(cfg.error_streak, finished=True)
                    if (idle and obs.answers is not None)
                    else None
                )
                if broken:
                    return self._end(DrainOutcome.FAULT, broken)
                if idle:
                    return self._end(DrainOutcome.DRAINED, "clients finished, server idle")
            # The engine's running gauge, where it has one, says whether it has work: a client
            # that is alive while the engine runs nothing (starting up, an offline workload,
            # between a sweep's points) is not work the server holds.
            in_flight = obs.running > 0 if obs.running is not None else self.clients_alive > 0

        if progressed or not in_flight:
            self.stuck = 0
        else:
            self.stuck += 1
            if self.stuck >= cfg.stuck_polls:
                return self._end(
                    DrainOutcome.HANG,
                    f"no progress for {self.stuck} polls"
                    f" ({format_duration(self.stuck * cfg.poll_s)}) with work in flight",
                )
        if elapsed >= cfg.max_s:
            return self._end(
                DrainOutcome.TIMEOUT, f"not drained within {format_duration(cfg.max_s)}"
            )
        return None


@dataclass
class DrainResult:
    outcome: DrainOutcome
    reason: str
    elapsed_s: float
    polls: int
    progress_source: str
    faults: list[LogMatch] = field(default_factory=list)
    exit_status: int | None = None  # server's (died) or offline job's
    tails: dict[str, list[str]] = field(default_factory=dict)  # on non-zero outcomes
    last_progress: dict[str, float] = field(default_factory=dict)
    answers: dict[str, object] = field(default_factory=dict)  # generation answers seen

    @property
    def exit_code(self) -> int:
        return self.outcome.exit_code

    def message(self) -> str:
        if self.outcome is DrainOutcome.FAULT and self.faults:
            first = self.faults[0]
            return f"fault in {first.path}:{first.line_no}: {first.line.strip()[:200]}"
        return f"{self.outcome.value}: {self.reason} (after {format_duration(self.elapsed_s)})"

    def error(self) -> ProctorError | None:
        msg = self.message()
        o = self.outcome
        if o is DrainOutcome.DRAINED:
            return None
        if o is DrainOutcome.HANG:
            return HangDetected(msg, hint="run `proctor inspect` now, before stopping the server")
        if o is DrainOutcome.FAULT:
            return FaultDetected(msg, hint="see the matching lines and the log tails")
        if o is DrainOutcome.STOPPED:
            return Interrupted(msg, hint="it was stopped on purpose (runs stop, a budget, Ctrl-C)")
        if o in (DrainOutcome.SERVER_DIED, DrainOutcome.OFFLINE_FAILED):
            return WorkloadFailed(msg, hint="see the log tails for why it stopped")
        return TimeLimitReached(msg, hint="raise --max or --startup-max if the work is slow")

    def to_dict(self) -> dict[str, object]:
        return {
            "outcome": self.outcome.value,
            "exit_code": self.exit_code,
            "reason": self.reason,
            "elapsed_s": round(self.elapsed_s, 3),
            "polls": self.polls,
            "progress_source": self.progress_source,
            "faults": [m.to_dict() for m in self.faults],
            "exit_status": self.exit_status,
            "last_progress": self.last_progress,
            "answers": self.answers,
            "tails": self.tails,
            "message": self.message(),
        }


def drain(
    config: DrainConfig,
    *,
    server: Watched | None = None,
    offline: Watched | None = None,
    server_log: str | Path | None = None,
    extra_logs: Sequence[str | Path] = (),
    fault_patterns: Sequence[str] = (),
    marker_patterns: Sequence[str] = (),
    metrics_url: str | None = None,
    progress_metrics: Sequence[str] = (),
    running_metrics: Sequence[str] = (),
    clients: Sequence[Watched] = (),
    client_pattern: str | None = None,
    from_end: bool = False,
    reused_logs: Sequence[str | Path] = (),
    probe_paths: Sequence[str] = (),
    tick_s: float = 0.1,
    tail_lines: int = 30,
    on_status: Callable[[str], None] | None = None,
    status_every_s: float = STATUS_EVERY_S,
    clock: Callable[[], float] = time.monotonic,
) -> DrainResult:
    """Watch until drained, faulted, dead, hung or out of time; see the module docstring.

    Server mode needs `server`; offline mode (`config.offline`) needs `offline`. `clients` are
    the workload runs proctor started; `client_pattern` also counts foreign processes whose
    command line matches (observed only). `from_end`: skip what reused logs already hold.
    `probe_paths` (and `metrics_url`'s path): proctor's own requests, kept out of the tails.
    """
    watched = offline if config.offline else server
    if watched is None:
        raise ValueError("drain needs the offline job (offline mode) or the server process")
    check_client_pattern(client_pattern)
    started = clock()
    machine = DrainMachine(config, started)
    answers = AnswerTally()
    bench = BenchCounts()
    activity = ServerActivity(str(server_log)) if server_log is not None else None
    observers = [answers.feed, bench.feed] + ([activity.feed] if activity is not None else [])
    own = [*probe_paths, *([urlsplit(metrics_url).path] if metrics_url else [])]
    scanner = LogScanner(
        fault_patterns,
        marker_patterns=marker_patterns,
        tail_lines=50,
        observers=observers,
        tail_skip=own_requests(own),
    )
    logs = ([server_log] if server_log is not None else []) + list(extra_logs)
    for path in logs:
        scanner.add(path, from_end=from_end)
    # Logs that existed before this drain (a user's --log): what they already hold is old news.
    for path in reused_logs:
        scanner.add(path, from_end=True)
    follower = LogFollower(scanner, interval_s=tick_s)
    follower.start()
    source = "none"
    next_poll = started + config.poll_s
    shown: tuple[object, ...] | None = None  # the state the last status line showed
    next_status = started
    client = httpx.Client(trust_env=False)
    if metrics_url and not config.offline:  # the baseline of the server's answer counters
        baseline = fetch_metrics_text(metrics_url, client=client)
        if baseline is not None:
            answers.feed_metrics(baseline)
    try:
        while True:
            follower.fault_event.wait(tick_s)
            now = clock()
            status = watched.status()
            if not status.alive:
                follower.poll_now()  # read the dying words before deciding
            faults = follower.take_matches()
            progress: dict[str, float] | None = None
            alive: int | None = None
            running: float | None = None
            # A time limit is due on any tick: take the full poll now, not at the next one.
            due = now - started >= config.max_s or (
                not config.offline
                and not machine.client_seen
                and now - started >= config.startup_max_s
            )
            full = now >= next_poll or due
            if full:
                next_poll = now + config.poll_s
                metrics = None
                if metrics_url and not config.offline:
                    text = fetch_metrics_text(metrics_url, client=client)
                    if text is not None:
                        metrics = parse_metrics(text, [*progress_metrics, *running_metrics])
                        answers.feed_metrics(text)
                markers = follower.marker_count() if scanner.has_markers else None
                answered, bench_logs = bench.view()
                if config.offline:  # the job's own log is all there is: its growth counts
                    server_lines = follower.bytes_read(server_log) if server_log else None
                else:
                    server_lines = activity.lines if activity is not None else None
                source, progress = choose_signals(
                    metrics=metrics,
                    progress_metrics=progress_metrics,
                    markers=markers,
                    server_activity=server_lines,
                    client_logs={
                        str(p): follower.bytes_read(p)
                        for p in extra_logs
                        if str(p) not in bench_logs
                    },
                    bench_answered=answered,
                )
                if metrics is not None and any(m in metrics for m in running_metrics):
                    running = sum(metrics.get(m, 0.0) for m in running_metrics)
                alive = sum(1 for c in clients if c.status().alive)
                if client_pattern:
                    alive += count_matching(client_pattern)
            obs = DrainObservation(
                now=now,
                faults=faults,
                server=None if config.offline else status,
                offline=status if config.offline else None,
                progress=progress,
                clients_alive=alive,
                clients_known=len(clients),
                running=running,
                answers=None if config.offline else answers,
            )
            outcome = machine.observe(obs)
            if full and on_status is not None:
                state = _status_state(machine, source, obs)
                if state != shown or now >= next_status:
                    on_status(_status_line(machine, source, now - started, obs))
                    shown, next_status = state, now + status_every_s
            if outcome is not None:
                break
    finally:
        client.close()
        follower.stop()
    result = DrainResult(
        outcome=outcome,
        reason=machine.reason,
        elapsed_s=clock() - started,
        polls=machine.polls,
        progress_source=source,
        faults=list(machine.faults),
        exit_status=machine.exit_status,
        last_progress=dict(machine.last_progress),
        answers=answers.to_dict(),
    )
    if outcome is not DrainOutcome.DRAINED:
        result.tails = follower.tails(tail_lines)
    scanner.close()
    return result


def check_client_pattern(pattern: str | None) -> None:
    """A --client-pattern that is no regular expression: one line, exit 64."""
    if pattern is None:
        return
    try:
        re.compile(pattern)
    except re.error as error:
        raise UsageError(
            f"--client-pattern {pattern!r} is not a regular expression: {error}",
            hint="escape special characters, e.g. '\\(' for '('",
        ) from None


def _status_state(machine: DrainMachine, source: str, obs: DrainObservation) -> tuple[object, ...]:
    """What a status line shows but the time and the counts: a new status line when it
    changes (the counts grow at every poll of a healthy run)."""
    busy = None if obs.running is None else obs.running > 0
    return (
        source,
        machine.progressed_last,
        obs.clients_alive,
        busy,
        machine.stuck,
        machine.outcome,
    )


def _status_line(machine: DrainMachine, source: str, t: float, obs: DrainObservation) -> str:
    progress = obs.progress or {}
    shown = " ".join(f"{k.split(':')[-1]}={v:.0f}" for k, v in list(progress.items())[:4])
    parts = [f"[t={t:.0f}s]", f"progress={source}", shown or "-"]
    parts.append("(+)" if machine.progressed_last else "(=)")
    if not machine.config.offline:
        parts.append(f"clients={obs.clients_alive or 0}")
        if obs.running is not None:
            parts.append(f"running={obs.running:.0f}")
    parts.append(f"stuck={machine.stuck}/{machine.config.stuck_polls}")
    if machine.outcome is not None:
        parts.append(f"-> {machine.outcome.value}")
    return " ".join(parts)


def drain_for_engine(
    engine: EngineProfile,
    config: DrainConfig,
    *,
    port: int | None = None,
    host: str = "127.0.0.1",
    server: Watched | None = None,
    offline: Watched | None = None,
    server_log: str | Path | None = None,
    extra_logs: Sequence[str | Path] = (),
    clients: Sequence[Watched] = (),
    client_pattern: str | None = None,
    from_end: bool = False,
    reused_logs: Sequence[str | Path] = (),
    on_status: Callable[[str], None] | None = None,
) -> DrainResult:
    """`drain` with an engine profile's fault patterns, markers and /metrics names."""
    metrics_url = (
        f"http://{host}:{port}{engine.metrics_path}"
        if port is not None and engine.metrics_path
        else None
    )
    return drain(
        config,
        server=server,
        offline=offline,
        server_log=server_log,
        extra_logs=extra_logs,
        fault_patterns=engine.fault_patterns("runtime"),
        marker_patterns=engine.progress_markers,
        metrics_url=metrics_url,
        progress_metrics=engine.progress_metrics,
        running_metrics=engine.running_metrics,
        clients=clients,
        client_pattern=client_pattern,
        from_end=from_end,
        reused_logs=reused_logs,
        probe_paths=[*engine.ready_endpoints, engine.metrics_path or ""],
        on_status=on_status,
    )

"""The readiness gate: ready (0), startup fault (2), server exited (3), not ready in time (5).

`ReadyGate` is the decision: a pure state machine fed `ReadyObservation`s with an injected
clock, so each rule is tested without sleeping. `wait_ready` gathers real observations:
a prober thread asks the readiness endpoints every 0.25 s, a `LogFollower` reads new log
bytes every 0.1 s, and the decision loop checks liveness every 0.1 s. Detection never waits a
poll: readiness is seen within ~0.25 s of the endpoint answering, a fault within ~0.2 s of
its line being written.

Status lines say what was seen, and only when it changes: nothing listening on the port, a
listener that does not answer, the endpoint's HTTP status, the server process gone. While
nothing changes, one line every `poll_s` (15 s by default) says it still waits, so a 30 s
start prints a few lines, not one a second. Without a process to watch (a server proctor did
not start) nothing is said about one.
"""

from __future__ import annotations

import enum
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from proctor.errors import (
    ExitCode,
    FaultDetected,
    Interrupted,
    NotReady,
    ProctorError,
    WorkloadFailed,
)
from proctor.monitors.logscan import LogFollower, LogMatch, LogScanner, own_requests
from proctor.monitors.watch import ProcStatus, Watched
from proctor.spec.profiles.models import EngineProfile


class ReadyOutcome(str, enum.Enum):
    READY = "ready"
    FAULT = "fault"
    EXITED = "exited"
    TIMEOUT = "timeout"
    STOPPED = "stopped"  # proctor stopped the server itself before it was ready

    @property
    def exit_code(self) -> int:
        return int(_EXIT[self])


_EXIT = {
    ReadyOutcome.READY: ExitCode.OK,
    ReadyOutcome.FAULT: ExitCode.FAULT,
    ReadyOutcome.EXITED: ExitCode.WORKLOAD_FAILED,
    ReadyOutcome.TIMEOUT: ExitCode.NOT_READY,
    ReadyOutcome.STOPPED: ExitCode.INTERRUPTED,
}


@dataclass(frozen=True)
class ReadyObservation:
    now: float
    process: ProcStatus | None = None  # None: no process to watch (a server on a port only)
    endpoint_ok: bool = False
    faults: Sequence[LogMatch] = ()


class ReadyGate:
    """Rules, in order: a fault line beats everything (a crash that printed its reason is a
    fault, not an exit); a dead server is "exited" even if something else answers the port;
    an answering endpoint is ready; past the deadline is a timeout."""

    def __init__(self, timeout_s: float, started_at: float) -> None:
        self.timeout_s = timeout_s
        self.started_at = started_at
        self.faults: list[LogMatch] = []
        self.outcome: ReadyOutcome | None = None

    def observe(self, obs: ReadyObservation) -> ReadyOutcome | None:
        if self.outcome is not None:
            return self.outcome
        self.faults.extend(obs.faults)
        if self.faults:
            self.outcome = ReadyOutcome.FAULT
        elif obs.process is not None and not obs.process.alive and obs.process.stopped_by:
            self.outcome = ReadyOutcome.STOPPED  # proctor's own reason, not a death
        elif obs.process is not None and not obs.process.alive:
            self.outcome = ReadyOutcome.EXITED
        elif obs.endpoint_ok:
            self.outcome = ReadyOutcome.READY
        elif obs.now - self.started_at >= self.timeout_s:
            self.outcome = ReadyOutcome.TIMEOUT
        return self.outcome


@dataclass
class ReadyResult:
    outcome: ReadyOutcome
    elapsed_s: float
    base_url: str
    endpoints: list[str]
    faults: list[LogMatch] = field(default_factory=list)
    tails: dict[str, list[str]] = field(default_factory=dict)  # filled on non-zero outcomes
    exit_status: int | None = None  # the server's own, when it exited and it is known
    last_probe: str = ""  # what the endpoint said last ("connection refused", "HTTP 503")
    stopped_by: str | None = None  # proctor stopped it itself, and why

    @property
    def exit_code(self) -> int:
        return self.outcome.exit_code

    def message(self) -> str:
        last = describe_probe(self.last_probe, self.base_url) if self.last_probe else "none"
        if self.outcome is ReadyOutcome.READY:
            return f"server ready at {self.base_url} after {self.elapsed_s:.1f}s"
        if self.outcome is ReadyOutcome.FAULT:
            first = self.faults[0]
            return f"startup fault in {first.path}:{first.line_no}: {first.line.strip()[:200]}"
        if self.outcome is ReadyOutcome.STOPPED:
            return (
                f"proctor stopped the server ({self.stopped_by}) after "
                f"{self.elapsed_s:.1f}s, before it was ready"
            )
        if self.outcome is ReadyOutcome.EXITED:
            status = "unknown status" if self.exit_status is None else f"status {self.exit_status}"
            return f"server exited ({status}) after {self.elapsed_s:.1f}s before it was ready"
        return (
            f"server at {self.base_url} not ready after {self.elapsed_s:.0f}s (last answer: {last})"
        )

    def error(self) -> ProctorError | None:
        """The ProctorError for this outcome (None when ready), for the CLI to raise."""
        msg = self.message()
        if self.outcome is ReadyOutcome.STOPPED:
            return Interrupted(msg, hint="it was stopped on purpose (runs stop, a budget, Ctrl-C)")
        if self.outcome is ReadyOutcome.FAULT:
            return FaultDetected(msg, hint="see the matching lines and the log tail")
        if self.outcome is ReadyOutcome.EXITED:
            return WorkloadFailed(msg, hint="see the log tail for why it stopped")
        if self.outcome is ReadyOutcome.TIMEOUT:
            return NotReady(msg, hint="raise --timeout if the model is still loading")
        return None

    def to_dict(self) -> dict[str, object]:
        return {
            "outcome": self.outcome.value,
            "exit_code": self.exit_code,
            "elapsed_s": round(self.elapsed_s, 3),
            "base_url": self.base_url,
            "endpoints": self.endpoints,
            "faults": [m.to_dict() for m in self.faults],
            "exit_status": self.exit_status,
            "last_probe": self.last_probe,
            "tails": self.tails,
            "message": self.message(),
        }


class EndpointProber:
    """Asks every readiness endpoint every `interval_s` from a thread; `ready` is set once all
    of them answered 2xx in one round."""

    def __init__(
        self,
        base_url: str,
        endpoints: Sequence[str],
        *,
        interval_s: float = 0.25,
        timeout_s: float = 2.0,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.endpoints = list(endpoints)
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.ready = threading.Event()
        self.last = ""
        self.attempts = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="proctor-ready", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.timeout_s + 1)

    def probe_once(self, client: httpx.Client) -> bool:
        self.attempts += 1
        for path in self.endpoints:
            try:
                resp = client.get(self.base_url + path, timeout=self.timeout_s)
            except httpx.HTTPError as exc:
                self.last = f"{path}: {type(exc).__name__}"
                return False
            if not 200 <= resp.status_code < 300:
                self.last = f"{path}: HTTP {resp.status_code}"
                return False
        self.last = "ok"
        return True

    def _run(self) -> None:
        # trust_env=False: a proxy from the environment must not sit between us and localhost.
        with httpx.Client(trust_env=False) as client:
            while not self._stop.is_set():
                if self.probe_once(client):
                    self.ready.set()
                    return
                self._stop.wait(self.interval_s)


_TIMEOUTS = ("ConnectTimeout", "ReadTimeout", "PoolTimeout", "WriteTimeout", "TimeoutException")
_CLOSED = ("RemoteProtocolError", "ReadError", "WriteError")


def describe_probe(last: str, base_url: str) -> str:
    """What a probe's answer says about the port, in words: `/health: ConnectError` is
    nothing listening, an HTTP status is a listener that answered."""
    if not last:
        return "no answer yet"
    if last == "ok":
        return "answering"
    path, _, what = last.partition(": ")
    where = base_url.split("://", 1)[-1]
    if what == "ConnectError":
        return f"nothing listening on {where} (connection refused)"
    if what in _TIMEOUTS:
        return f"a listener on {where} that did not answer {path} in time ({what})"
    if what in _CLOSED:
        return f"a listener on {where} that closed the connection on {path} ({what})"
    if what.startswith("HTTP "):
        return f"{path} answers {what}"
    return last


def _status_line(
    elapsed: float, base_url: str, probe: str, status: ProcStatus | None, timeout_s: float
) -> str:
    process = "" if status is None else "; server process alive" if status.alive else ""
    return (
        f"[t={elapsed:.0f}s] waiting for {base_url}: {describe_probe(probe, base_url)}"
        f"{process} (timeout {timeout_s:.0f}s)"
    )


def wait_ready(
    base_url: str,
    *,
    endpoints: Sequence[str] = ("/v1/models",),
    process: Watched | None = None,
    logs: Sequence[str | Path] = (),
    fault_patterns: Sequence[str] = (),
    timeout_s: float = 900.0,
    poll_s: float = 15.0,
    from_end: bool = False,
    probe_interval_s: float = 0.25,
    tick_s: float = 0.1,
    tail_lines: int = 30,
    on_status: Callable[[str], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> ReadyResult:
    """Block until the server at `base_url` is ready, faulted, exited or out of time.

    `logs` are scanned from their start (a log proctor created for this run) unless
    `from_end` (a reused log: old lines are not this start's faults). `on_status` gets a line
    when what is seen changes, else one every `poll_s`. The log tails kept for a failure leave
    out the access lines of proctor's own probes of `endpoints`.
    """
    started = clock()
    gate = ReadyGate(timeout_s, started)
    scanner = LogScanner(
        fault_patterns, tail_lines=max(tail_lines, 50), tail_skip=own_requests(endpoints)
    )
    for path in logs:
        scanner.add(path, from_end=from_end)
    follower = LogFollower(scanner, interval_s=tick_s)
    prober = EndpointProber(base_url, endpoints, interval_s=probe_interval_s)
    follower.start()
    prober.start()
    next_status = started + poll_s
    shown: tuple[str, bool] | None = None  # (probe answer, process alive) last printed
    status = ProcStatus(alive=True)
    try:
        while True:
            follower.fault_event.wait(tick_s)
            now = clock()
            status = process.status() if process is not None else ProcStatus(alive=True)
            if not status.alive:
                follower.poll_now()  # the dying words are usually the reason
            outcome = gate.observe(
                ReadyObservation(
                    now=now,
                    process=status if process is not None else None,
                    endpoint_ok=prober.ready.is_set(),
                    faults=follower.take_matches(),
                )
            )
            if outcome is not None:
                break
            if on_status is not None:
                seen = (prober.last, status.alive)
                # A change prints at once (once there is an answer to tell); else every poll.
                if (seen != shown and prober.last) or now >= next_status:
                    watched = status if process is not None else None
                    on_status(_status_line(now - started, base_url, seen[0], watched, timeout_s))
                    shown, next_status = seen, now + poll_s
    finally:
        prober.stop()
        follower.stop()
    result = ReadyResult(
        outcome=outcome,
        elapsed_s=clock() - started,
        base_url=base_url,
        endpoints=list(endpoints),
        faults=list(gate.faults),
        exit_status=status.exit_code if not status.alive else None,
        last_probe=prober.last,
        stopped_by=status.stopped_by if not status.alive else None,
    )
    if outcome is not ReadyOutcome.READY:
        result.tails = follower.tails(tail_lines)
    scanner.close()
    return result


def ready_for_engine(
    engine: EngineProfile,
    port: int,
    *,
    host: str = "127.0.0.1",
    process: Watched | None = None,
    logs: Sequence[str | Path] = (),
    timeout_s: float = 900.0,
    poll_s: float = 15.0,
    from_end: bool = False,
    on_status: Callable[[str], None] | None = None,
) -> ReadyResult:
    """`wait_ready` with an `EngineProfile`'s endpoints and startup fault patterns."""
    return wait_ready(
        f"http://{host}:{port}",
        endpoints=engine.ready_endpoints,
        process=process,
        logs=logs,
        fault_patterns=engine.fault_patterns("startup"),
        timeout_s=timeout_s,
        poll_s=poll_s,
        from_end=from_end,
        on_status=on_status,
    )

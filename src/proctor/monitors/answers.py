"""What the server answered to generation requests, read from the logs proctor already follows.

A server can stay alive with /health at 200 after a GPU fault and answer every generation
request with an error, printing nothing an engine profile knows. That is a fault, and the
evidence is in two places drain already reads, new bytes only:

- the server's access log: `"POST /v1/completions HTTP/1.1" 500` (uvicorn, as vLLM and SGLang
  print it); a 5xx is an error answer, a 2xx a good one (4xx is the client's problem);
- the load generator's progress lines in a workload's log:
  `[bench] benchmark: 120/400 done, 118 failed, ...` (errors inside a 200 stream count here;
  the requests it gave up on, `118 failed (30 timed out)`, are no answer, not error answers:
  a hang, which the progress monitor sees, never a fault);
- the server's /metrics, where it counts HTTP answers by handler and status class
  (`http_requests_total{handler="/v1/completions",status="5xx"}`, as vLLM exports).

Each source keeps a streak: error answers since its last good one. The server is broken when
a streak reaches `streak` answers, or, once the clients are done, when every answer it has
seen (fewer than `streak`) was an error.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

from proctor.monitors.progress import BENCH_LINE

ACCESS_LINE = re.compile(
    rb'"POST (?P<path>/v1/chat/completions|/v1/completions|/v1/responses|/generate)'
    rb'(?:\?[^" ]*)? HTTP/[0-9.]+" (?P<status>[1-5][0-9][0-9])'
)
GENERATION_HANDLERS = frozenset(
    {"/v1/completions", "/v1/chat/completions", "/v1/responses", "/generate"}
)
PROGRESS_LINE = BENCH_LINE


@dataclass
class Streak:
    """Good and error answers of one source, and the error answers since the last good one."""

    good: int = 0
    errors: int = 0
    streak: int = 0
    last_error: str = ""

    def add(self, good: int, errors: int, what: str = "") -> None:
        """Answers in order when one of the two is 0; both: order unknown, so a good answer
        is taken to have come last (the streak restarts)."""
        if good:
            self.good += good
            self.streak = 0
        if errors:
            self.errors += errors
            if not good:
                self.streak += errors
            self.last_error = what or self.last_error

    @property
    def seen(self) -> int:
        return self.good + self.errors


@dataclass
class AnswerTally:
    """Fed chunks of log bytes (from the scanner's thread); asked for a verdict (any thread)."""

    server: Streak = field(default_factory=Streak)
    clients: Streak = field(default_factory=Streak)
    metrics: Streak = field(default_factory=Streak)
    _phases: dict[tuple[str, bytes], tuple[int, int, int]] = field(default_factory=dict)
    _http_totals: tuple[float, float] | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def feed(self, path: str, data: bytes) -> None:
        with self._lock:
            for m in ACCESS_LINE.finditer(data):  # in the order the server answered
                code = m.group("status")
                if code.startswith(b"2"):
                    self.server.add(1, 0)
                elif code.startswith(b"5"):
                    self.server.add(0, 1, f"HTTP {code.decode()}")
            for m in PROGRESS_LINE.finditer(data):
                key = (path, m.group("phase"))
                done, failed = int(m.group("done")), int(m.group("failed"))
                errors = failed - int(m.group("timed_out") or 0)  # answered, with an error
                was_done, was_failed, was_errors = self._phases.get(key, (0, 0, 0))
                self._phases[key] = (done, failed, errors)
                new_errors = max(0, errors - was_errors)
                new_good = max(0, (done - failed) - (was_done - was_failed))
                self.clients.add(new_good, new_errors, "failed requests")

    def feed_metrics(self, text: str) -> None:
        """One /metrics scrape: the change in 2xx and 5xx answers of generation handlers."""
        totals = http_answer_totals(text)
        if totals is None:
            return
        with self._lock:
            before, self._http_totals = self._http_totals, totals
            if before is None:
                return  # the first scrape is the baseline: what came before is not ours
            good = max(0, int(totals[0] - before[0]))
            errors = max(0, int(totals[1] - before[1]))
            self.metrics.add(good, errors, "HTTP 5xx")

    def broken(self, streak: int, *, finished: bool = False) -> str | None:
        """Why the server counts as broken, or None. `finished`: the clients are done."""
        with self._lock:
            for name, s in self._sources():
                limit = min(streak, s.seen) if finished else streak
                if limit > 0 and s.streak >= limit:
                    where = {
                        "server": "the server's access log",
                        "clients": "the load generator's progress",
                        "metrics": "the server's /metrics",
                    }[name]
                    return (
                        f"the server is alive but answered the last {s.streak} generation "
                        f"requests with errors ({s.last_error}; per {where})"
                    )
        return None

    def _sources(self) -> Iterable[tuple[str, Streak]]:
        return (("server", self.server), ("clients", self.clients), ("metrics", self.metrics))

    def to_dict(self) -> dict[str, object]:
        with self._lock:
            return {
                name: {"good": s.good, "errors": s.errors, "streak": s.streak}
                for name, s in self._sources()
            }


def http_answer_totals(text: str) -> tuple[float, float] | None:
    """(2xx, 5xx) answers of generation handlers in a Prometheus text; None when the server
    does not export http_requests_total at all."""
    good = errors = 0.0
    found = False
    try:
        families = list(text_string_to_metric_families(text))
    except (ValueError, TypeError):
        return None
    for family in families:
        if family.name not in ("http_requests", "http_requests_total"):
            continue
        found = True  # the server counts answers; none of generation yet is a 0, not unknown
        for sample in family.samples:
            if sample.name.endswith("_created"):
                continue
            if sample.labels.get("handler") not in GENERATION_HANDLERS:
                continue
            status = str(sample.labels.get("status", ""))
            if status.startswith("2"):
                good += float(sample.value)
            elif status.startswith("5"):
                errors += float(sample.value)
    return (good, errors) if found else None

"""Progress signals: what counts as work done while a workload runs against a server.

Progress is requests completing or tokens generated, never bytes something wrote:
- the engine's own signal: its /metrics counters (present ones), else its log markers once
  seen (access lines of finished generation requests);
- proctor's bench: the done counts of its `[bench] PHASE: D/N done, F failed` lines (D - F
  requests answered), read from the workload's log, whatever its size;
- only where the engine gives no signal: the server log's activity lines (not its periodic
  stats lines while idle, not the access lines of GET probes such as proctor's own /metrics
  scrapes and /health checks) and the growth of a client log that has no bench lines.
A heartbeat line the bench writes every few seconds, and a stats line an idle server prints
every second, are therefore never progress.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import httpx
from prometheus_client.parser import text_string_to_metric_families


def parse_metrics(text: str, names: Iterable[str]) -> dict[str, float]:
    """Sum of every sample (all label sets) of each requested metric that is present.

    A name matches the family name or the sample name, so "vllm:generation_tokens" and
    "vllm:generation_tokens_total" both find the counter; `_created` samples are ignored.
    """

    def norm(name: str) -> str:
        return name[:-6] if name.endswith("_total") else name

    wanted = {name: norm(name) for name in names}
    out: dict[str, float] = {}
    try:
        families = list(text_string_to_metric_families(text))
    except (ValueError, TypeError):
        return out
    for family in families:
        for sample in family.samples:
            if sample.name.endswith("_created"):
                continue
            sample_base = norm(sample.name)
            for name, base in wanted.items():
                if base in (sample_base, family.name):
                    out[name] = out.get(name, 0.0) + float(sample.value)
    return out


def fetch_metrics(
    url: str, names: Iterable[str], *, timeout_s: float = 1.0, client: httpx.Client | None = None
) -> dict[str, float] | None:
    """GET `url` and parse it; None when the endpoint did not answer with metrics."""
    text = fetch_metrics_text(url, timeout_s=timeout_s, client=client)
    return None if text is None else parse_metrics(text, names)


def fetch_metrics_text(
    url: str, *, timeout_s: float = 1.0, client: httpx.Client | None = None
) -> str | None:
    """The Prometheus text at `url`, or None when it did not answer 200."""
    try:
        if client is not None:
            resp = client.get(url, timeout=timeout_s)
        else:
            resp = httpx.get(url, timeout=timeout_s)
    except httpx.HTTPError:
        return None
    if resp.status_code != 200:
        return None
    return resp.text


# One line of proctor's bench (loadgen/progress.py), written every few seconds whatever happens.
BENCH_LINE = re.compile(
    rb"\[bench\] (?P<phase>[a-z]+): (?P<done>\d+)/\d+ done, (?P<failed>\d+) failed"
    rb"(?: \((?P<timed_out>\d+) timed out\))?"
)
# Server-log lines that are not work: GET/HEAD access lines (health checks, proctor's own
# /metrics scrapes, /v1/models) and an engine's periodic stats line with nothing generated.
NOT_WORK = re.compile(
    rb'"(?:GET|HEAD) [^" ]* HTTP/[0-9.]+"'
    rb"|Avg prompt throughput: 0\.0 tokens/s, Avg generation throughput: 0\.0 tokens/s"
)
ENGINE_KEYS = ("metric:", "markers")  # signal names that are the engine's own


def is_engine_signal(key: str) -> bool:
    return key.startswith(ENGINE_KEYS)


@dataclass
class BenchCounts:
    """Requests proctor's bench saw answered, from its progress lines in the logs it is fed.

    Per log and phase the last (done, failed); `answered` only grows: a phase that starts
    again (a repeat) adds its own count."""

    answered: int = 0
    logs: set[str] = field(default_factory=set)  # logs that hold bench lines
    _last: dict[tuple[str, bytes], int] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def feed(self, path: str, data: bytes) -> None:
        with self._lock:
            for m in BENCH_LINE.finditer(data):
                self.logs.add(path)
                key = (path, m.group("phase"))
                good = int(m.group("done")) - int(m.group("failed"))
                before = self._last.get(key, 0)
                self.answered += good - before if good >= before else good
                self._last[key] = good

    def view(self) -> tuple[int | None, set[str]]:
        """(answered, or None before any bench line; the logs that hold bench lines)."""
        with self._lock:
            return (self.answered if self.logs else None), set(self.logs)


@dataclass
class ServerActivity:
    """Lines of the server's log that may be work: every line but NOT_WORK's."""

    path: str
    lines: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def feed(self, path: str, data: bytes) -> None:
        if path != self.path:
            return
        n = sum(1 for line in data.splitlines() if line.strip() and not NOT_WORK.search(line))
        with self._lock:
            self.lines += n


def choose_signals(
    *,
    metrics: Mapping[str, float] | None,
    progress_metrics: Iterable[str],
    markers: int | None,
    server_activity: int | None,
    client_logs: Mapping[str, int],
    bench_answered: int | None = None,
) -> tuple[str, dict[str, float]]:
    """The progress counters for this poll, and which sources they came from.

    `client_logs`: bytes read of the client logs that hold no bench lines. See the module
    docstring for the rules; the source reads e.g. "metrics+bench" or "log-growth"."""
    signals: dict[str, float] = {}
    sources: list[str] = []
    wanted = set(progress_metrics)
    present = {k: v for k, v in (metrics or {}).items() if k in wanted}
    if present:
        sources.append("metrics")
        signals.update({f"metric:{k}": v for k, v in present.items()})
        if markers:
            signals["markers"] = float(markers)
    elif markers:
        sources.append("markers")
        signals["markers"] = float(markers)
    if bench_answered is not None:
        sources.append("bench")
        signals["bench:answered"] = float(bench_answered)
    if not any(is_engine_signal(k) for k in signals):
        # No word from the engine: what its log and the clients' logs do is all there is.
        if server_activity is not None:
            sources.append("log-growth")
            signals["server-log:lines"] = float(server_activity)
        if client_logs:
            if "log-growth" not in sources:
                sources.append("client-logs")
            signals.update({f"log:{path}": float(size) for path, size in client_logs.items()})
    return "+".join(sources) or "none", signals

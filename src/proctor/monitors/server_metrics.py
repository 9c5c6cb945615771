"""The engine's own view during a bench: its Prometheus `/metrics` scraped about once a second.

`server_metrics.csv` (columns t, name, labels, value; t in unix seconds) holds a row for a
series when its value changed since the row before, and every series at the first and last
scrape: a step plot of it is the series. Only the series in `prom.KEEP` are kept, at most
MAX_SERIES of them, and a body larger than MAX_BODY_BYTES is not parsed, so memory stays
bounded however long the bench runs.

The scrape never slows or breaks the bench: it runs on its own thread with a short timeout,
and a server without /metrics (transformers serve answers 404) gives a note, not an error.
`mark(name)` takes a scrape now, so a window (the measured requests) has exact counters at
both ends; `summary(start, end)` is what metrics.json holds under "server".
"""

from __future__ import annotations

import csv
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from proctor.monitors import prom
from proctor.monitors.prom import Key

CSV_COLUMNS = ["t", "name", "labels", "value"]
MAX_BODY_BYTES = 8 * 1024 * 1024
MAX_SERIES = 2000
DEFAULT_INTERVAL_S = 1.0
TIMEOUT_S = 2.0
QUANTILES = (0.5, 0.9, 0.99)
# Failed scrapes in a row, before any succeeded, that end the scraping with a note (once it has
# answered, a slow /metrics under load is retried for the whole run).
GIVE_UP_AFTER = 3
SETTLE_S = 1.0  # the longest wait at the end of the window for the engine's last counts
SETTLE_POLL_S = 0.05

# Series names, vLLM's first, SGLang's second (new spellings before old ones).
RUNNING = ("vllm:num_requests_running", "sglang:num_running_reqs")
WAITING = ("vllm:num_requests_waiting", "sglang:num_queue_reqs")
KV_USAGE = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage")
GENERATION = ("vllm:generation_tokens_total", "sglang:generation_tokens_total")
PROMPT = ("vllm:prompt_tokens_total", "sglang:prompt_tokens_total")
PREFIX_HITS = ("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total")
PREFIX_QUERIES = ("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total")
SGLANG_CACHED = ("sglang:cached_tokens_total",)
TTFT = ("vllm:time_to_first_token_seconds", "sglang:time_to_first_token_seconds")
E2E = ("vllm:e2e_request_latency_seconds", "sglang:e2e_request_latency_seconds")
_GAUGES = {"running": RUNNING, "waiting": WAITING, "kv_cache_usage": KV_USAGE}


@dataclass
class Snapshot:
    t: float  # unix seconds
    values: dict[Key, float]


@dataclass
class _GaugeStats:
    max: float = 0.0
    total: float = 0.0
    n: int = 0

    def add(self, value: float) -> None:
        self.max = max(self.max, value) if self.n else value
        self.total += value
        self.n += 1


@dataclass
class ServerMetricsScraper:
    """Scrapes `base_url/metrics` every `interval_s` into `csv_path` on a thread of its own."""

    base_url: str
    csv_path: Path
    interval_s: float = DEFAULT_INTERVAL_S
    timeout_s: float = TIMEOUT_S
    clock: Callable[[], float] = time.time
    scrapes: int = 0
    errors: int = 0
    last_error: str | None = None
    note: str | None = None  # why there is no series (no /metrics, no engine names)
    marks: dict[str, Snapshot] = field(default_factory=dict)
    first: Snapshot | None = None
    last: Snapshot | None = None
    _failed_in_row: int = 0
    _written: dict[Key, float] = field(default_factory=dict)
    _gauges: dict[str, _GaugeStats] = field(default_factory=dict)
    _window_open: bool = False
    _stop: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _thread: threading.Thread | None = None
    _client: httpx.Client | None = None

    @property
    def url(self) -> str:
        return self.base_url.rstrip("/") + "/metrics"

    @property
    def available(self) -> bool:
        return self.note is None and self.first is not None

    def start(self) -> None:
        self._client = httpx.Client(trust_env=False, timeout=self.timeout_s)
        self._thread = threading.Thread(
            target=self._run, name="proctor-server-metrics", daemon=True
        )
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set() and self.note is None:
            self.scrape()
            self._stop.wait(self.interval_s)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.timeout_s + 5)
            self._thread = None
        if self.note is None:
            snap = self.scrape(final=True)
            if snap is not None:
                self.marks.setdefault("stop", snap)
        if self._client is not None:
            self._client.close()
            self._client = None

    def mark(self, name: str, *, window: bool | None = None) -> Snapshot | None:
        """Scrape now and remember it as `name`; `window` opens (True) or closes (False) the
        span over which gauges are summarised."""
        snap = self.scrape() if self.note is None else None
        with self._lock:
            if snap is not None:
                self.marks[name] = snap
            if window is not None:
                self._window_open = window
        return snap

    def mark_settled(
        self, name: str, *, window: bool | None = None, timeout_s: float = SETTLE_S
    ) -> Snapshot | None:
        """Mark `name` once the engine reports no running request (at most `timeout_s`): vLLM
        records an iteration's counters after it has sent the tokens, so a scrape the moment
        the client saw its last token can miss that last step."""
        deadline = time.monotonic() + timeout_s
        while True:
            snap = self.mark(name, window=window)
            if snap is None or not prom.total(snap.values, RUNNING):
                return snap
            if time.monotonic() >= deadline:
                return snap
            time.sleep(SETTLE_POLL_S)

    # -- one scrape ----------------------------------------------------------------------
    def _fetch(self) -> str | None:
        if self._client is None:
            return None
        try:
            with self._client.stream("GET", self.url) as reply:
                if reply.status_code == 404:
                    self.note = f"the server has no /metrics (HTTP 404 from {self.url})"
                    return None
                if reply.status_code != 200:
                    raise ValueError(f"HTTP {reply.status_code}")
                body = bytearray()
                for chunk in reply.iter_bytes():
                    body.extend(chunk)
                    if len(body) > MAX_BODY_BYTES:
                        raise ValueError(f"body larger than {MAX_BODY_BYTES} bytes")
                return body.decode(errors="replace")
        except (httpx.HTTPError, ValueError) as error:
            self.errors += 1
            self.last_error = f"{type(error).__name__}: {error}"[:200]
            self._failed_in_row += 1
            if self._failed_in_row >= GIVE_UP_AFTER and self.first is None:
                # A /metrics that hangs or refuses must not cost the bench a timeout per mark.
                self.note = (
                    f"gave up after {GIVE_UP_AFTER} failed scrapes of {self.url} "
                    f"({self.last_error})"
                )
            return None

    def scrape(self, *, final: bool = False) -> Snapshot | None:
        with self._lock:
            t = self.clock()
            text = self._fetch()
            if text is None:
                return None
            self._failed_in_row = 0
            try:
                values = prom.parse_exposition(text)
            except ValueError as error:
                self.errors += 1
                self.last_error = f"unparsable /metrics: {error}"[:200]
                return None
            if not values and self.first is None:
                self.note = f"{self.url} has no vllm: or sglang: series"
                return None
            if len(values) > MAX_SERIES:
                values = dict(list(values.items())[:MAX_SERIES])
            snap = Snapshot(t, values)
            self._write(snap, every=self.first is None or final)
            self.first = self.first or snap
            self.last = snap
            self.scrapes += 1
            if self._window_open:
                for what, names in _GAUGES.items():
                    value = prom.total(values, names)
                    if value is not None:
                        self._gauges.setdefault(what, _GaugeStats()).add(value)
            return snap

    def _write(self, snap: Snapshot, *, every: bool) -> None:
        new = not self.csv_path.exists()
        rows = [
            (name, labels, value)
            for (name, labels), value in snap.values.items()
            if every or self._written.get((name, labels)) != value
        ]
        if not rows and not new:
            return
        with self.csv_path.open("a", newline="") as handle:
            writer = csv.writer(handle)
            if new:
                writer.writerow(CSV_COLUMNS)
            for name, labels, value in rows:
                writer.writerow([f"{snap.t:.3f}", name, labels, repr(value)])
                self._written[(name, labels)] = value

    # -- the window ----------------------------------------------------------------------
    def summary(self, start: str, end: str) -> dict[str, Any]:
        """What the server says about the window between marks `start` and `end`."""
        out: dict[str, Any] = {
            "url": self.url,
            "interval_s": self.interval_s,
            "scrapes": self.scrapes,
            "errors": self.errors,
            "csv": self.csv_path.name,
            "available": self.available,
        }
        if self.last_error:
            out["last_error"] = self.last_error
        a, b = self.marks.get(start), self.marks.get(end) or self.marks.get("stop")
        if not self.available or a is None or b is None:
            out["note"] = self.note or (
                f"no scrape answered ({self.last_error})"
                if self.scrapes == 0
                else "the window was not scraped"
            )
            return out
        out["engine"] = prom.engine_of(b.values)
        out["window"] = {
            "start": round(a.t, 3),
            "end": round(b.t, 3),
            "seconds": round(b.t - a.t, 3),
        }
        out["generation_tokens"] = prom.delta(a.values, b.values, GENERATION)
        out["prompt_tokens"] = prom.delta(a.values, b.values, PROMPT)
        out["prefix_cache"] = _prefix_cache(a.values, b.values)
        for what, stats in self._gauges.items():
            out[f"{what}_max"] = stats.max
            out[f"{what}_mean"] = stats.total / stats.n
        for key, names in (("ttft_ms", TTFT), ("e2el_ms", E2E)):
            out[key] = _histogram_ms(a.values, b.values, names)
        return out


def _prefix_cache(a: dict[Key, float], b: dict[Key, float]) -> dict[str, float | None] | None:
    hits = prom.delta(a, b, PREFIX_HITS)
    queries = prom.delta(a, b, PREFIX_QUERIES)
    if hits is None or queries is None:  # SGLang counts cached prompt tokens instead
        hits = prom.delta(a, b, SGLANG_CACHED)
        queries = prom.delta(a, b, ("sglang:prompt_tokens_total",))
    if hits is None or queries is None:
        return None
    return {"hits": hits, "queries": queries, "hit_rate": hits / queries if queries else None}


def _histogram_ms(
    a: dict[Key, float], b: dict[Key, float], names: tuple[str, ...]
) -> dict[str, Any] | None:
    for name in names:
        found = prom.histogram_window(a, b, name)
        if found is None:
            continue
        count, total, buckets = found
        out: dict[str, Any] = {"count": count, "mean": total / count * 1000.0}
        for q in QUANTILES:
            value = prom.histogram_quantile(q, buckets)
            out[f"p{q * 100:g}"] = None if value is None else value * 1000.0
        out["note"] = "percentiles interpolated within the server's histogram buckets"
        return out
    return None

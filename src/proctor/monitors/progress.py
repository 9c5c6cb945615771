"""Progress signals: Prometheus /metrics first, then log markers, then log growth."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

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
    for family in families:
        for sample in family.samples:
            if sample.name.endswith("_created"):
                continue
            for name in wanted:
                base = name[:-6] if name.endswith("_total") else name
                if name in (family.name, sample.name) or base in (family.name, sample.name):
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


def choose_signals(
    *,
    metrics: Mapping[str, float] | None,
    progress_metrics: Iterable[str],
    markers: int | None,
    server_log_bytes: int | None,
    extra_log_bytes: Mapping[str, int],
) -> tuple[str, dict[str, float]]:
    """The progress counters for this poll, and which source they came from.

    The engine's own signals (metrics that exist, else markers once seen) replace raw
    server-log growth, because periodic stats lines grow a hung server's log too. Extra logs
    (a client's tqdm output) always count, as in ATOM's drain.
    """
    signals: dict[str, float] = {}
    present = {k: v for k, v in (metrics or {}).items() if k in set(progress_metrics)}
    if present:
        source = "metrics"
        signals.update({f"metric:{k}": v for k, v in present.items()})
        if markers:
            signals["markers"] = float(markers)
    elif markers:
        source = "markers"
        signals["markers"] = float(markers)
    elif server_log_bytes is not None:
        source = "log-growth"
        signals["server-log"] = float(server_log_bytes)
    else:
        source = "extra-logs" if extra_log_bytes else "none"
    for path, size in extra_log_bytes.items():
        signals[f"log:{path}"] = float(size)
    return source, signals

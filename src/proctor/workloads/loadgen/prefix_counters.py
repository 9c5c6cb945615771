"""The prefix-cache hit rate the server achieved, from its Prometheus /metrics counters.

vLLM (V1) counts prompt tokens looked up in the prefix cache (`vllm:prefix_cache_queries`)
and those found (`vllm:prefix_cache_hits`), both in tokens; the rate over the measured phase
is the ratio of their increases between a reading just before it and one just after it
(summed over label sets: engines, models). Servers without these counters (or without
/metrics) give no rate, and metrics.json says so rather than inventing one.
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass
from typing import Any

import aiohttp

# Counter names, newest first; Prometheus clients add `_total` to a counter's name.
QUERIES = ("vllm:prefix_cache_queries", "vllm:gpu_prefix_cache_queries")
HITS = ("vllm:prefix_cache_hits", "vllm:gpu_prefix_cache_hits")
SCRAPE_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class Reading:
    queries: float
    hits: float


def parse_counters(text: str) -> dict[str, float]:
    """Sample name (labels dropped) -> value summed over its label sets."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        if "{" in line and "}" in line:
            name_part, rest = line[: line.index("{")], line[line.rindex("}") + 1 :]
        else:
            name_part, _, rest = line.partition(" ")
        fields = rest.split()
        if not fields:
            continue
        try:
            value = float(fields[0])
        except ValueError:
            continue
        if math.isfinite(value):
            out[name_part] = out.get(name_part, 0.0) + value
    return out


def _pick(counters: dict[str, float], names: tuple[str, ...]) -> float | None:
    for name in names:
        for key in (f"{name}_total", name):
            if key in counters:
                return counters[key]
    return None


def reading_of(text: str) -> Reading | None:
    counters = parse_counters(text)
    q, h = _pick(counters, QUERIES), _pick(counters, HITS)
    return Reading(q, h) if q is not None and h is not None else None


class Unanswered(Exception):
    """/metrics did not answer in time (or the connection failed)."""


async def read(session: aiohttp.ClientSession, base_url: str) -> Reading | None:
    """The counters now; None when the server has none (or no /metrics); Unanswered when it
    did not answer within SCRAPE_TIMEOUT_S."""
    try:
        limit = aiohttp.ClientTimeout(total=SCRAPE_TIMEOUT_S)
        async with session.get(base_url + "/metrics", timeout=limit) as r:
            if r.status != 200:
                return None
            return reading_of(await r.text(errors="replace"))
    except ValueError:
        return None
    except (aiohttp.ClientError, asyncio.TimeoutError) as error:
        raise Unanswered(str(error)) from None


def achieved(before: Reading | None, after: Reading | None) -> dict[str, Any]:
    """metrics.json `prefix_cache`: the counters' increase over the measured phase."""
    if before is None or after is None:
        return {"hit_rate": None, "reason": "the server's /metrics has no prefix-cache counters"}
    queries, hits = after.queries - before.queries, after.hits - before.hits
    return {
        "hit_rate": hits / queries if queries > 0 else None,
        "queries_tokens": queries,
        "hits_tokens": hits,
        "source": "server /metrics (vllm:prefix_cache_*)",
    }


def merge(windows: list[dict[str, Any]]) -> dict[str, Any]:
    """Several repeats' windows as one: the summed counters' ratio, and each repeat's."""
    known = [w for w in windows if w.get("queries_tokens") is not None]
    if not known:
        return windows[0] if windows else achieved(None, None)
    queries = sum(w["queries_tokens"] for w in known)
    hits = sum(w["hits_tokens"] for w in known)
    return {
        "hit_rate": hits / queries if queries > 0 else None,
        "queries_tokens": queries,
        "hits_tokens": hits,
        "source": known[0]["source"],
        "per_repeat": [w.get("hit_rate") for w in windows],
        **({"includes_warmup": True} if any(w.get("includes_warmup") for w in windows) else {}),
    }

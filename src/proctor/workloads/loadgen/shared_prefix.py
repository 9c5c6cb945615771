"""The shared-prefix generator: groups of prompts sharing a prefix, sized for a target
prefix-cache hit rate.

Each repeat's T measured prompts (all --isl tokens long) fall into N = --prefix-groups groups,
assigned round-robin; a group's prompts share one prefix of P tokens and end in a unique
random suffix. A server with a perfect prefix cache misses every prompt's tokens once per
group (the first prompt) and hits the P prefix tokens of every later one, so the expected
hit rate over prompt tokens is

    h = (T - N) * P / (T * ISL)      and so, for a target h,   P = h * ISL * T / (T - N)

(capped at ISL - 1). --prefix-len P sets P directly. The rate the server achieved is read from
its prefix-cache counters (prefix_counters.py) and reported next to the expected one: real
servers hit less (cache blocks are whole blocks, concurrent prompts of one group miss until
the first has been prefilled, eviction). Warmups are unique random prompts, and every repeat
gets new prefixes, so neither warms the measured groups.
"""

from __future__ import annotations

import random

import aiohttp

from proctor.errors import UsageError
from proctor.workloads.loadgen.client import PlannedRequest
from proctor.workloads.loadgen.config import BenchConfig
from proctor.workloads.loadgen.dataset import (
    Tokenizer,
    exact_prompt,
    lengths,
    resolve_tokenizer,
    words,
)
from proctor.workloads.loadgen.workload import Workload, gather_counts


def prefix_tokens(cfg: BenchConfig) -> int:
    """P for the config: --prefix-len, else sized for --prefix-hit-rate."""
    t, n = cfg.total_prompts, cfg.prefix_groups
    if t <= n:
        raise UsageError(
            f"shared-prefix needs more prompts ({t}) than --prefix-groups ({n})",
            hint="raise --num-prompts or lower --prefix-groups",
        )
    if cfg.prefix_len is not None:
        p = cfg.prefix_len
    else:
        p = round(cfg.prefix_hit_rate * cfg.isl * t / (t - n))
    return max(0, min(p, cfg.isl - 1))


def expected_hit_rate(prompt_lens: list[int], groups: list[int], prefix_len: int) -> float:
    """Tokens a perfect prefix cache hits over tokens sent: every prompt but a group's first
    hits its prefix."""
    seen: set[int] = set()
    hits = 0
    for g in groups:
        if g in seen:
            hits += prefix_len
        seen.add(g)
    total = sum(prompt_lens)
    return hits / total if total else 0.0


class _Texts:
    """Prefix and suffix text of exact token lengths, through a tokenizer or as words."""

    def __init__(self, tok: Tokenizer | None, n_special: int) -> None:
        self.tok, self.n_special = tok, n_special

    async def prefix(self, rng: random.Random, n: int) -> tuple[str, int]:
        if n == 0:
            return "", 0
        if self.tok is None:
            return words(rng, n), n
        return await exact_prompt(self.tok, rng, n, self.n_special)

    async def joined(self, prefix: str, rng: random.Random, n: int) -> tuple[str, int]:
        """prefix + a random suffix, about n tokens in all; the actual count."""
        if self.tok is None:
            suffix_n = max(1, n - len(prefix.split()))
            text = f"{prefix} {words(rng, suffix_n)}".strip()
            return text, len(text.split())
        have = len(await self.tok.encode(prefix, True)) if prefix else self.n_special
        want = max(1, n - have)
        pool = await self.tok.encode(" " + words(rng, want + 8), False)
        suffix = (await self.tok.decode(pool[:want])).strip()
        text = f"{prefix.rstrip()} {suffix}" if prefix else suffix
        return text, len(await self.tok.encode(text, True))


async def build_shared_prefix(
    cfg: BenchConfig, session: aiohttp.ClientSession, model: str
) -> Workload:
    tok = await resolve_tokenizer(cfg, session, model)
    n_special = 0
    if tok is not None:
        probe = "hello world"
        n_special = len(await tok.encode(probe, True)) - len(await tok.encode(probe, False))
    texts = _Texts(tok, n_special)
    p = prefix_tokens(cfg)
    rng = random.Random(cfg.seed)
    t, n_groups, reps = cfg.total_prompts, cfg.prefix_groups, cfg.repeat
    outs = lengths(cfg.warmups + t * reps, cfg.osl, cfg.range_ratio, rng)
    seeds = [rng.randrange(2**32) for _ in range(cfg.warmups + t * reps + n_groups * reps)]
    prefixes = await gather_counts(
        [texts.prefix(random.Random(seeds[i]), p) for i in range(n_groups * reps)]
    )
    seeds = seeds[n_groups * reps :]
    plan: list[tuple[str, int]] = [("", -1)] * cfg.warmups  # warmups: no shared prefix
    for r in range(reps):
        plan += [(prefixes[r * n_groups + i % n_groups][0], i % n_groups) for i in range(t)]
    built = await gather_counts(
        [texts.joined(pre, random.Random(seeds[i]), cfg.isl) for i, (pre, _) in enumerate(plan)]
    )
    reqs = [
        PlannedRequest(i, text, n, outs[i], warmup=i < cfg.warmups)
        for i, (text, n) in enumerate(built)
    ]
    warm = reqs[: cfg.warmups]
    repeats = [reqs[cfg.warmups + r * t : cfg.warmups + (r + 1) * t] for r in range(reps)]
    p_actual = prefixes[0][1] if prefixes else 0
    first = repeats[0]
    expected = expected_hit_rate(
        [q.prompt_len for q in first], [g for _, g in plan[cfg.warmups : cfg.warmups + t]], p_actual
    )
    info = {
        "kind": "shared-prefix",
        "isl": cfg.isl,
        "osl": cfg.osl,
        "groups": n_groups,
        "prefix_len": p_actual,
        "target_hit_rate": None if cfg.prefix_len is not None else cfg.prefix_hit_rate,
        "expected_hit_rate": expected,
        "id": f"shared-prefix:isl={cfg.isl}:osl={cfg.osl}:groups={n_groups}:prefix={p}",
    }
    return Workload(warm, repeats, tok.source if tok is not None else "approx", info)

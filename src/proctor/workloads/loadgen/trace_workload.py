"""--dataset trace:PATH: a timestamped trace (tracefiles.py) as requests on the trace's clock.

Each record becomes one measured request, due `timestamp / --trace-speed` seconds after the
first (the first at 0), with the record's input length and its output length (forced with
ignore-eos, as every dataset). `--num-prompts N` replays the first N records; without it the
whole trace, up to MAX_TRACE_REQUESTS, and never more than MAX_HELD_TOKENS input tokens in all
(a longer trace is cut, and metrics.json says so).

Prompts are built from blocks of BLOCK_TOKENS (512) tokens, the trace's own block: block b of a
prompt is the block its hash_ids[b] names, so the same id gives the same tokens in every prompt
that names it (seeded by --seed), and a server's prefix cache sees the trace's real sharing.
Blocks past the hash ids (and all of a BurstGPT record's) are the prompt's own. A token is one
word from a vocabulary of common words that the tokenizer (the server's /tokenize, or a local
one) counts as one token each, alone and after a space, so a prompt of n words is n tokens plus
the tokenizer's special tokens, and block boundaries fall where the trace puts them (the first
block holds 512 - special words). Without a tokenizer, one word is taken as one token.

Warmups have the lengths of the trace's last records but blocks of their own (they warm no
shared block); every repeat gets new blocks for the same ids, so a repeat is not answered
from the cache the one before it filled.
"""

from __future__ import annotations

import asyncio
import random
from collections import OrderedDict
from typing import Any

import aiohttp

from proctor.errors import UsageError
from proctor.workloads.loadgen.client import PlannedRequest
from proctor.workloads.loadgen.config import BenchConfig
from proctor.workloads.loadgen.dataset import _WORDS, Tokenizer, resolve_tokenizer
from proctor.workloads.loadgen.tracefiles import (
    BLOCK_TOKENS,
    MAX_HELD_TOKENS,
    MOONCAKE,
    Trace,
    read_trace,
)
from proctor.workloads.loadgen.workload import Workload

# The most records one bench replays when --num-prompts does not say: every prompt is built
# before the first is sent, so a production trace of millions is cut here, with a note.
MAX_TRACE_REQUESTS = 100_000
_CACHED_BLOCKS = 4096


async def vocabulary(tok: Tokenizer | None) -> tuple[list[str], int]:
    """Words the tokenizer counts as one token at a prompt's start and after a space, and its
    number of special tokens; without a tokenizer, every word (one word taken as one token)."""
    if tok is None:
        return list(_WORDS), 0
    probe = "hello world"
    n_special = len(await tok.encode(probe, True)) - len(await tok.encode(probe, False))
    sem = asyncio.Semaphore(16)

    async def single(word: str) -> bool:
        async with sem:  # the word first, then after a space: one token each
            return len(await tok.encode(f"{word} {word}", False)) == 2

    try:
        ok = await asyncio.gather(*(single(w) for w in _WORDS))
    except (aiohttp.ClientError, asyncio.TimeoutError, KeyError, ValueError, TypeError) as e:
        raise UsageError(
            f"probing the tokenizer for one-token words failed: {type(e).__name__}",
            hint="use --tokenizer-mode approx to take one word as one token",
        ) from e
    words = [w for w, good in zip(_WORDS, ok, strict=True) if good]
    if len(words) < 16:
        raise UsageError(
            f"the tokenizer counts only {len(words)} common words as one token each",
            hint="use --tokenizer-mode approx to take one word as one token",
        )
    return words, max(0, n_special)


class Blocks:
    """Block texts: a shared block (named by a hash id) is the same words wherever it is used."""

    def __init__(self, words: list[str], n_special: int, seed: int) -> None:
        self.words, self.n_special, self.seed = words, n_special, seed
        self._cache: OrderedDict[str, list[str]] = OrderedDict()

    def capacity(self, b: int) -> int:
        """Words in block b: the first shares its tokens with the special ones."""
        return max(1, BLOCK_TOKENS - self.n_special) if b == 0 else BLOCK_TOKENS

    def _shared(self, key: str, n: int) -> list[str]:
        got = self._cache.get(key)
        if got is None:
            got = random.Random(f"{self.seed}:{key}").choices(self.words, k=n)
            self._cache[key] = got
            if len(self._cache) > _CACHED_BLOCKS:
                self._cache.popitem(last=False)
        else:
            self._cache.move_to_end(key)
        return got

    def prompt(self, n_in: int, ids: tuple[int, ...], shared: str, own: str) -> tuple[str, int]:
        """A prompt of n_in tokens (special ones included): its text and its planned length."""
        n_words = max(1, n_in - self.n_special)
        parts: list[str] = []
        left, b = n_words, 0
        while left > 0:
            cap = self.capacity(b)
            take = min(cap, left)
            if b < len(ids):
                chosen = self._shared(f"{shared}:{ids[b]}:{cap}", cap)[:take]
            else:
                chosen = random.Random(f"{self.seed}:{own}:{b}").choices(self.words, k=take)
            parts.append(" ".join(chosen))
            left -= take
            b += 1
        return " ".join(parts), n_words + self.n_special


def expected_hits(lens: list[int], ids: list[tuple[int, ...]], n_special: int) -> int:
    """Prompt tokens a perfect cache of whole BLOCK_TOKENS blocks hits, requests in order: a
    block hits when it and every block before it were sent before (the partial last block of a
    prompt is never cached)."""
    seen: set[int] = set()
    hits = 0
    for n_in, chain in zip(lens, ids, strict=True):
        tokens = max(1, n_in - n_special) + n_special
        h, hitting = 0, True
        for b in range(min(tokens // BLOCK_TOKENS, len(chain))):
            h = hash((h, chain[b]))
            hitting = hitting and h in seen
            hits += BLOCK_TOKENS if hitting else 0
            seen.add(h)
    return hits


def _info(
    cfg: BenchConfig, trace: Trace, offsets: list[float], expected: float | None
) -> dict[str, Any]:
    n = len(trace)
    duration = offsets[-1]
    cut = None
    if trace.kept > n:
        if trace.token_cut:
            by = f"the cap of {MAX_HELD_TOKENS:,} prompt tokens held by one bench"
        elif cfg.num_prompts:
            by = f"--num-prompts {cfg.num_prompts}"
        else:
            by = f"the cap of {MAX_TRACE_REQUESTS:,} requests (--num-prompts N to choose)"
        cut = {"records": trace.kept, "replayed": n, "by": by}
    return {
        "kind": "trace",
        "format": trace.format,
        "path": trace.path,
        "sha256": trace.sha256,
        "entries": trace.records,
        "skipped": trace.skipped,
        "replayed": n,
        "cut": cut,
        "speed": cfg.trace_speed,
        "span_s": trace.times_s[-1],
        "duration_s": duration,
        "offered_rate": n / duration if duration > 0 else None,
        "block_tokens": BLOCK_TOKENS,
        "expected_hit_rate": expected,
        "id": f"trace:sha256:{trace.sha256[:16]}:n={n}:speed={cfg.trace_speed:g}",
    }


def trace_note(info: dict[str, Any]) -> str:
    """One line: what is replayed, how fast, and what was cut."""
    line = (
        f"Trace: {info['format']}, {info['replayed']:,} requests over "
        f"{info['duration_s']:.1f} s (speed {info['speed']:g}"
        + (f", offered {info['offered_rate']:.2f} req/s" if info.get("offered_rate") else "")
        + ")"
    )
    if info.get("skipped"):
        line += f"; {info['skipped']:,} records with a zero length skipped"
    cut = info.get("cut")
    if cut:
        line += f"; cut: the first {cut['replayed']:,} of {cut['records']:,} records ({cut['by']})"
    return line


async def build_trace(cfg: BenchConfig, session: aiohttp.ClientSession, model: str) -> Workload:
    trace = read_trace(cfg.dataset_path, cfg.num_prompts or MAX_TRACE_REQUESTS)
    tok = await resolve_tokenizer(cfg, session, model)
    words, n_special = await vocabulary(tok)
    blocks = Blocks(words, n_special, cfg.seed)
    n = len(trace)
    lens, outs = list(trace.input_lens), list(trace.output_lens)
    offsets = [t / cfg.trace_speed for t in trace.times_s]
    k = 0
    warm: list[PlannedRequest] = []
    for j in range(cfg.warmups):  # the last records' lengths, blocks of their own
        i = (n - 1 - j) % n
        text, plen = blocks.prompt(lens[i], (), "", f"w{j}")
        warm.append(PlannedRequest(k, text, plen, outs[i], warmup=True))
        k += 1
    repeats: list[list[PlannedRequest]] = []
    for r in range(cfg.repeat):
        measured: list[PlannedRequest] = []
        for i in range(n):
            text, plen = blocks.prompt(lens[i], trace.hash_ids[i], f"r{r}", f"r{r}:{i}")
            measured.append(PlannedRequest(k, text, plen, outs[i]))
            k += 1
        repeats.append(measured)
    expected = None
    if trace.format == MOONCAKE:
        total = sum(q.prompt_len for q in repeats[0])
        expected = expected_hits(lens, trace.hash_ids, n_special) / total if total else 0.0
    info = _info(cfg, trace, offsets, expected)
    source = tok.source if tok is not None else "approx"
    return Workload(warm, repeats, source, info, schedule=offsets, target_rate=info["offered_rate"])


__all__ = [
    "MAX_TRACE_REQUESTS",
    "Blocks",
    "build_trace",
    "expected_hits",
    "trace_note",
    "vocabulary",
]

"""Random prompts of exact token length, seeded and reproducible.

Lengths follow vLLM's random dataset: input and output lengths uniform on
[floor(L(1-r)), ceil(L(1+r))] for range ratio r. Token counts come, in order of preference
(`tokenizer_mode="auto"`), from:
1. the server's `/tokenize` and `/detokenize` (what the server itself will count);
2. a local tokenizer (`--tokenizer`, needs the optional `transformers` extra);
3. an approximation: one random common word per token. The actual length is then unknown
   before sending, so the server's `usage.prompt_tokens` is recorded for each request.
Like vLLM, text is decoded from token ids and re-encoded, and the id list is trimmed or
extended until the re-encoded count matches (a few rounds at most).
"""

from __future__ import annotations

import asyncio
import math
import random
from collections.abc import Callable
from typing import Any, Protocol

import aiohttp

from proctor.errors import UsageError
from proctor.workloads.loadgen.client import PlannedRequest
from proctor.workloads.loadgen.config import BenchConfig

_WORD_TEXT = (
    "time year people way day man thing woman life child world school state family student "
    "group country problem hand part place case week company system program question work "
    "government number night point home water room mother area money story fact month lot "
    "right study book eye job word business issue side kind head house service friend father "
    "power hour game line end member law car city community name president team minute idea "
    "kid body information back parent face others level office door health person art war "
    "history party result change morning reason research girl guy moment air teacher force "
    "education foot boy age policy music market sense nation plan college interest death "
    "experience effect use class control care field development role effort rate heart drug "
    "show leader light voice wife police mind price report decision son view relationship "
    "town road arm difference value building action model season society tax director "
    "position player record paper space ground form event official matter center couple site "
    "project activity star table need court oil situation cost industry figure street image"
)
_WORDS = _WORD_TEXT.split()


class Tokenizer(Protocol):
    source: str

    async def encode(self, text: str, special: bool) -> list[int]: ...

    async def decode(self, ids: list[int]) -> str: ...


class ServerTokenizer:
    source = "server"

    def __init__(self, session: aiohttp.ClientSession, base_url: str, model: str) -> None:
        self.session, self.base_url, self.model = session, base_url, model

    async def encode(self, text: str, special: bool) -> list[int]:
        body = {"model": self.model, "prompt": text, "add_special_tokens": special}
        async with self.session.post(self.base_url + "/tokenize", json=body) as r:
            r.raise_for_status()
            data: dict[str, Any] = await r.json(content_type=None)
            return [int(t) for t in data["tokens"]]

    async def decode(self, ids: list[int]) -> str:
        body = {"model": self.model, "tokens": ids}
        async with self.session.post(self.base_url + "/detokenize", json=body) as r:
            r.raise_for_status()
            data: dict[str, Any] = await r.json(content_type=None)
            return str(data["prompt"])

    async def available(self) -> bool:
        try:
            ids = await self.encode("hello world", False)
            return bool(ids) and bool(await self.decode(ids))
        except (aiohttp.ClientError, KeyError, ValueError, TypeError, asyncio.TimeoutError):
            return False


class LocalTokenizer:
    source = "local"

    def __init__(self, name: str) -> None:
        try:
            from transformers import AutoTokenizer  # optional: the tokenizer extra
        except ImportError as e:
            raise UsageError(
                f"--tokenizer {name} needs the transformers package",
                hint=(
                    "pip install 'transformers>=4.40' into proctor's environment (the tokenizer"
                    " extra), or omit --tokenizer to use the server's"
                ),
            ) from e
        try:
            self._tok = AutoTokenizer.from_pretrained(name)
        except (OSError, ValueError) as e:
            raise UsageError(
                f"cannot load tokenizer {name!r}: {type(e).__name__}",
                hint="give a local tokenizer directory",
            ) from e

    def count(self, text: str) -> int:
        return len(self._tok(text, add_special_tokens=False).input_ids)

    async def encode(self, text: str, special: bool) -> list[int]:
        return list(self._tok(text, add_special_tokens=special).input_ids)

    async def decode(self, ids: list[int]) -> str:
        return str(self._tok.decode(ids))


def lengths(n: int, target: int, ratio: float, rng: random.Random) -> list[int]:
    lo = max(1, math.floor(target * (1 - ratio)))
    hi = max(lo, math.ceil(target * (1 + ratio)))
    return [rng.randint(lo, hi) for _ in range(n)]


def _words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(n))


async def exact_prompt(
    tok: Tokenizer, rng: random.Random, target: int, n_special: int, rounds: int = 4
) -> tuple[str, int]:
    want = max(1, target - n_special)
    pool = await tok.encode(_words(rng, want + 16), special=False)
    while len(pool) < want + 8:
        pool += await tok.encode(" " + _words(rng, want), special=False)
    ids = pool[:want]
    text = await tok.decode(ids)
    actual = len(await tok.encode(text, special=True))
    for _ in range(rounds):
        diff = target - actual
        if diff == 0:
            break
        size = max(1, len(ids) + diff)
        ids = pool[:size] if size <= len(pool) else ids
        text = await tok.decode(ids)
        actual = len(await tok.encode(text, special=True))
    return text, actual


async def resolve_tokenizer(
    cfg: BenchConfig, session: aiohttp.ClientSession, model: str
) -> Tokenizer | None:
    """The tokenizer that counts lengths, in order of preference; None: approximate."""
    if cfg.tokenizer_mode in ("auto", "server") and cfg.tokenizer is None:
        server = ServerTokenizer(session, cfg.base_url, model)
        if await server.available():
            return server
        if cfg.tokenizer_mode == "server":
            raise UsageError(
                "the server has no working /tokenize and /detokenize",
                hint="pass --tokenizer DIR or use --tokenizer-mode approx",
            )
    if cfg.tokenizer is not None and cfg.tokenizer_mode != "approx":
        return LocalTokenizer(cfg.tokenizer)
    return None


def words(rng: random.Random, n: int) -> str:
    """n random common words: the approximate prompt of n tokens."""
    return _words(rng, n)


async def build_requests(
    cfg: BenchConfig,
    session: aiohttp.ClientSession,
    model: str,
    on_progress: Callable[[int], None] | None = None,
    measured: int | None = None,
) -> tuple[list[PlannedRequest], str]:
    """Warmup requests first (flagged), then the measured ones (`measured`, default
    --num-prompts; more for --repeat); and the length source."""
    rng = random.Random(cfg.seed)
    n_warm, n_meas = cfg.warmups, measured or cfg.total_prompts
    total = n_warm + n_meas
    in_lens = lengths(total, cfg.isl, cfg.range_ratio, rng)
    out_lens = lengths(total, cfg.osl, cfg.range_ratio, rng)
    seeds = [rng.randrange(2**32) for _ in range(total)]

    tok = await resolve_tokenizer(cfg, session, model)
    out: list[PlannedRequest] = []
    if tok is None:
        for i in range(total):
            text = _words(random.Random(seeds[i]), in_lens[i])
            out.append(PlannedRequest(i, text, in_lens[i], out_lens[i], warmup=i < n_warm))
        return out, "approx"

    sem = asyncio.Semaphore(16)
    done = 0

    async def one(i: int) -> PlannedRequest:
        nonlocal done
        async with sem:
            text, actual = await exact_prompt(tok, random.Random(seeds[i]), in_lens[i], n_special)
        done += 1
        if on_progress:
            on_progress(done)
        return PlannedRequest(i, text, actual, out_lens[i], warmup=i < n_warm)

    try:
        probe = "hello world"
        n_special = len(await tok.encode(probe, True)) - len(await tok.encode(probe, False))
        out = list(await asyncio.gather(*(one(i) for i in range(total))))
    except (aiohttp.ClientError, asyncio.TimeoutError, KeyError, ValueError, TypeError) as e:
        raise UsageError(
            f"building prompts through the tokenizer failed: {type(e).__name__}",
            hint="use --tokenizer-mode approx to skip exact lengths",
        ) from e
    return out, tok.source

"""What a benchmark sends: the planned requests of each --dataset, and what metrics.json says
about them (`dataset`).

    random            vLLM's random prompts (dataset.py)
    jsonl:PATH        one prompt per line, its output length or --osl (datafiles.py)
    sharegpt:PATH     the first human turn of each conversation; the output length is the token
                      length of the gpt reply that follows it (as vLLM's bench does)
    shared-prefix     --prefix-groups groups of prompts of --isl tokens sharing a prefix within
                      the group, the prefix sized for --prefix-hit-rate (shared_prefix.py)
    multi-turn:PATH   ShareGPT conversations, each sent turn by turn on one session, each turn
                      carrying the history with the dataset's replies (multiturn.py)
    trace:PATH        a Mooncake or BurstGPT trace, each record sent at its own time with its
                      lengths, shared hash-id blocks as shared prefixes (trace_workload.py)

Every repeat of the measured phase gets its own requests (the next ones in the file, cycling;
new random prompts for generated datasets): re-sending the same prompts would be answered
from the server's prefix cache and measure something else. Warmups come from the file's end
backwards, so a file longer than warmups + requests never warms the measured prompts.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import aiohttp

from proctor.errors import UsageError
from proctor.workloads.loadgen.client import PlannedRequest
from proctor.workloads.loadgen.config import BenchConfig
from proctor.workloads.loadgen.datafiles import (
    Conversation,
    FileData,
    read_jsonl,
    read_sharegpt,
)
from proctor.workloads.loadgen.dataset import Tokenizer, build_requests, resolve_tokenizer

T = TypeVar("T")


@dataclass
class Workload:
    warmup: list[PlannedRequest]
    repeats: list[list[PlannedRequest]]  # the measured requests of each repeat
    source: str  # where token lengths came from: server | local | approx
    info: dict[str, Any] = field(default_factory=dict)  # metrics.json "dataset"
    # A trace: the seconds after the start at which each measured request of a repeat is due,
    # and the rate they offer (None: all due at once); None for the other datasets.
    schedule: list[float] | None = None
    target_rate: float | None = None


class Counter:
    """Token lengths through the tokenizer (one call per distinct text), else word counts."""

    def __init__(self, tok: Tokenizer | None) -> None:
        self.tok = tok
        self.source = tok.source if tok is not None else "approx"
        self._sem = asyncio.Semaphore(16)
        self._cache: dict[tuple[str, bool], int] = {}

    async def count(self, text: str, special: bool = True) -> int:
        key = (text, special)
        if key not in self._cache:
            if self.tok is None:
                n = len(text.split())
            else:
                async with self._sem:
                    n = len(await self.tok.encode(text, special))
            self._cache[key] = max(1, n)
        return self._cache[key]


async def gather_counts(items: Sequence[Awaitable[T]]) -> list[T]:
    try:
        return list(await asyncio.gather(*items))
    except (aiohttp.ClientError, asyncio.TimeoutError, KeyError, ValueError, TypeError) as e:
        raise UsageError(
            f"counting prompt tokens through the tokenizer failed: {type(e).__name__}",
            hint="use --tokenizer-mode approx to count words instead",
        ) from e


def _cycle(n_items: int, n_warm: int, n_meas: int, repeats: int) -> tuple[list[int], list[int]]:
    """Entry numbers of the warmups (from the end, backwards) and of the measured requests
    of every repeat (from the start, cycling)."""
    warm = [(n_items - 1 - j) % n_items for j in range(n_warm)]
    meas = [i % n_items for i in range(n_meas * repeats)]
    return warm, meas


def _split(
    reqs: list[PlannedRequest], n_warm: int, n_meas: int, repeats: int
) -> tuple[list[PlannedRequest], list[list[PlannedRequest]]]:
    warm = reqs[:n_warm]
    rest = reqs[n_warm:]
    return warm, [rest[r * n_meas : (r + 1) * n_meas] for r in range(repeats)]


def _file_info(kind: str, data: FileData) -> dict[str, Any]:
    return {
        "kind": kind,
        "path": data.path,
        "sha256": data.sha256,
        "entries": data.entries,
        "skipped": data.skipped,
        "id": f"{kind}:sha256:{data.sha256[:16]}",
    }


async def _from_samples(
    cfg: BenchConfig, count: Counter, samples: list[tuple[str, int | None]]
) -> list[PlannedRequest]:
    n_warm, n_meas = cfg.warmups, cfg.total_prompts
    warm, meas = _cycle(len(samples), n_warm, n_meas, cfg.repeat)
    order = warm + meas
    lens = await gather_counts([count.count(samples[i][0]) for i in range(len(samples))])
    return [
        PlannedRequest(k, samples[i][0], lens[i], samples[i][1] or cfg.osl, warmup=k < n_warm)
        for k, i in enumerate(order)
    ]


async def _jsonl(cfg: BenchConfig, count: Counter) -> tuple[list[PlannedRequest], dict[str, Any]]:
    samples, data = read_jsonl(cfg.dataset_path)
    reqs = await _from_samples(cfg, count, [(s.prompt, s.output_len) for s in samples])
    return reqs, _file_info("jsonl", data)


async def _sharegpt(
    cfg: BenchConfig, count: Counter
) -> tuple[list[PlannedRequest], dict[str, Any]]:
    convs, data = read_sharegpt(cfg.dataset_path)
    firsts = [c.turns[0] for c in convs]
    # The output length is the token length of the reply in the file (vLLM's rule); a first
    # turn without a reply gets --osl.
    outs = await gather_counts(
        [count.count(t.reply, special=False) if t.reply else _const(cfg.osl) for t in firsts]
    )
    reqs = await _from_samples(cfg, count, [(t.user, o) for t, o in zip(firsts, outs, strict=True)])
    return reqs, _file_info("sharegpt", data)


async def _const(n: int) -> int:
    return n


def _history(conv: Conversation, upto: int) -> list[dict[str, str]]:
    messages: list[dict[str, str]] = []
    for t in conv.turns[:upto]:
        messages.append({"role": "user", "content": t.user})
        if t.reply is not None:
            messages.append({"role": "assistant", "content": t.reply})
    messages.append({"role": "user", "content": conv.turns[upto].user})
    return messages


async def _multi_turn(
    cfg: BenchConfig, count: Counter
) -> tuple[list[PlannedRequest], dict[str, Any], int]:
    """Warmups: first turns of conversations from the file's end. Measured: --num-prompts
    conversations per repeat (default every conversation once), every turn of each."""
    convs, data = read_sharegpt(cfg.dataset_path)
    n_conv = cfg.num_prompts or len(convs)
    warm, meas = _cycle(len(convs), cfg.warmups, n_conv, cfg.repeat)
    chat = cfg.endpoint == "chat"
    plan: list[tuple[int, int, int, list[dict[str, str]], str | None]] = []
    for c in warm:
        plan.append((-1, c, 0, _history(convs[c], 0), convs[c].turns[0].reply))
    for k, c in enumerate(meas):
        for t in range(len(convs[c].turns)):
            plan.append((k, c, t, _history(convs[c], t), convs[c].turns[t].reply))
    texts = ["\n\n".join(m["content"] for m in msgs) for _, _, _, msgs, _ in plan]
    lens = await gather_counts([count.count(text) for text in texts])
    outs = await gather_counts(
        [count.count(reply, special=False) if reply else _const(cfg.osl) for *_, reply in plan]
    )
    reqs = [
        PlannedRequest(
            i,
            texts[i],
            lens[i],
            outs[i],
            warmup=conv_k < 0,
            messages=msgs if chat else None,
            conversation=None if conv_k < 0 else conv_k,
            turn=turn,
        )
        for i, (conv_k, _, turn, msgs, _) in enumerate(plan)
    ]
    info = _file_info("multi-turn", data)
    info.update(
        conversations=n_conv,
        history="dataset replies",
        turns=sum(len(convs[c].turns) for c in meas[:n_conv]),
    )
    return reqs, info, n_conv


async def build_workload(
    cfg: BenchConfig,
    session: aiohttp.ClientSession,
    model: str,
    on_progress: Callable[[int], None] | None = None,
) -> Workload:
    kind = cfg.dataset_kind
    n_warm, n_meas, reps = cfg.warmups, cfg.total_prompts, cfg.repeat
    if kind == "random":
        reqs, source = await build_requests(
            cfg, session, model, on_progress, measured=n_meas * reps
        )
        warm, repeats = _split(reqs, n_warm, n_meas, reps)
        info = {
            "kind": "random",
            "isl": cfg.isl,
            "osl": cfg.osl,
            "range_ratio": cfg.range_ratio,
            "seed": cfg.seed,
            "id": f"random:isl={cfg.isl}:osl={cfg.osl}:ratio={cfg.range_ratio:g}",
        }
        return Workload(warm, repeats, source, info)
    if kind == "shared-prefix":
        from proctor.workloads.loadgen.shared_prefix import build_shared_prefix

        return await build_shared_prefix(cfg, session, model)
    if kind == "trace":
        from proctor.workloads.loadgen.trace_workload import build_trace

        return await build_trace(cfg, session, model)
    count = Counter(await resolve_tokenizer(cfg, session, model))
    if kind == "multi-turn":
        reqs, info, n_conv = await _multi_turn(cfg, count)
        warm = [r for r in reqs if r.warmup]
        meas = [r for r in reqs if not r.warmup]
        per_rep: list[list[PlannedRequest]] = [[] for _ in range(reps)]
        for r in meas:
            assert r.conversation is not None
            per_rep[r.conversation // n_conv].append(r)
        return Workload(warm, per_rep, count.source, info)
    reqs, info = await (_jsonl(cfg, count) if kind == "jsonl" else _sharegpt(cfg, count))
    warm, repeats = _split(reqs, n_warm, n_meas, reps)
    return Workload(warm, repeats, count.source, info)

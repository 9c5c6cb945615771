"""Did the server do what the bench asked? metrics.json "conformance".

A bench measures the workload it sent only if the server ran that workload:

- output: with ignore-eos, every successful request must have produced exactly the output
  length asked for (max_tokens). A server that stops early (ignores ignore_eos) or runs long
  measured a lighter or heavier workload than the one named. Judged from the server's usage
  or a tokenizer's count; a count of chunks (one token per chunk assumed) is not judged.
- input: the prompt lengths the server counted (usage.prompt_tokens) must match the planned
  ones within INPUT_TOLERANCE, when the planned ones are exact (the server's /tokenize or the
  local tokenizer) and no chat template adds its own tokens (the completions API).
- prompts: the SHA-256 of the measured prompts in order, so two runs (with one --seed) can be
  shown to have sent byte-identical prompts (`runs compare`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from typing import Any

from proctor.workloads.loadgen.records import RequestRecord

# The difference allowed between the server's and the planned prompt length: a BOS token the
# server adds, and re-tokenization of decoded random ids at the edges of the prompt.
INPUT_TOLERANCE_TOKENS = 4
INPUT_TOLERANCE_FRACTION = 0.02
EXACT_PROMPT_SOURCES = ("server", "local")
EXAMPLES = 5


def prompts_sha256(prompts: Iterable[str]) -> str:
    """One hash over the prompts in order (each length-prefixed, so the split is part of it)."""
    h = hashlib.sha256()
    for text in prompts:
        data = text.encode("utf-8", "surrogatepass")
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()


def input_allowed(planned: int) -> int:
    return max(INPUT_TOLERANCE_TOKENS, round(INPUT_TOLERANCE_FRACTION * planned))


def _output(ok: Sequence[RequestRecord], ignore_eos: bool) -> dict[str, Any]:
    if not ignore_eos:
        return {"judged": False, "reason": "without --ignore-eos a request may end at EOS"}
    counted = [r for r in ok if r.output_tokens_source in ("usage", "tokenizer")]
    if not counted:
        return {"judged": False, "reason": "no output count from usage or a tokenizer"}
    short = [r for r in counted if r.output_tokens < r.expected_output_len]
    long = [r for r in counted if r.output_tokens > r.expected_output_len]
    examples = [
        {"index": r.index, "asked": r.expected_output_len, "produced": r.output_tokens}
        for r in (short + long)[:EXAMPLES]
    ]
    return {
        "judged": True,
        "checked": len(counted),
        "short": len(short),
        "long": len(long),
        "examples": examples,
    }


def _input(ok: Sequence[RequestRecord], prompt_source: str, chat: bool) -> dict[str, Any]:
    if chat:
        return {"judged": False, "reason": "--chat: the chat template adds tokens"}
    if prompt_source not in EXACT_PROMPT_SOURCES:
        return {"judged": False, "reason": f"planned lengths are {prompt_source}, not exact"}
    counted = [r for r in ok if r.prompt_tokens is not None]
    if not counted:
        return {"judged": False, "reason": "the server sent no usage.prompt_tokens"}
    off = [
        r
        for r in counted
        if abs((r.prompt_tokens or 0) - r.prompt_len) > input_allowed(r.prompt_len)
    ]
    return {
        "judged": True,
        "checked": len(counted),
        "off": len(off),
        "tolerance": {"tokens": INPUT_TOLERANCE_TOKENS, "fraction": INPUT_TOLERANCE_FRACTION},
        "examples": [
            {"index": r.index, "planned": r.prompt_len, "server": r.prompt_tokens}
            for r in off[:EXAMPLES]
        ],
    }


def conformance_report(
    measured: Sequence[RequestRecord],
    *,
    ignore_eos: bool,
    chat: bool,
    prompt_source: str,
    prompts_hash: str | None,
) -> dict[str, Any]:
    ok = [r for r in measured if r.success]
    return {
        "output": _output(ok, ignore_eos),
        "input": _input(ok, prompt_source, chat),
        "prompts_sha256": prompts_hash,
    }

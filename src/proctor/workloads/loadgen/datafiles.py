"""Reading the prompt files a user gives: custom JSONL and ShareGPT-format conversations.

Nothing is downloaded: the file is read once, strictly. A bad line (not UTF-8, not JSON, a
missing or mistyped field) is a usage error naming the file and the line, never skipped
silently. ShareGPT entries without a usable human turn are counted as skipped (as vLLM's
bench filters them) and the count is reported in metrics.json.

Custom JSONL, one object per line (blank lines allowed):
    {"prompt": "text", "output_len": 128}      output_len or max_tokens; default --osl
    `input_len` may be given; it is checked to be a positive integer and otherwise ignored
    (the prompt's length is counted by the tokenizer, or by the server's usage).

ShareGPT: a JSON array (or JSONL, one per line) of {"conversations": [{"from": "human",
"value": ...}, {"from": "gpt", "value": ...}, ...]}. "human"/"user" are user turns,
"gpt"/"chatgpt"/"assistant"/"bard" are replies; "system" turns are ignored.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from proctor.errors import UsageError

USER_ROLES = frozenset({"human", "user"})
REPLY_ROLES = frozenset({"gpt", "chatgpt", "assistant", "bard", "model"})
_OUT_KEYS = ("output_len", "max_tokens")


@dataclass(frozen=True)
class Sample:
    """One prompt from a file; output_len None means the config's --osl."""

    prompt: str
    output_len: int | None = None


@dataclass(frozen=True)
class Turn:
    user: str
    reply: str | None  # the dataset's reply; None when the conversation ends on a user turn


@dataclass(frozen=True)
class Conversation:
    turns: tuple[Turn, ...]


@dataclass(frozen=True)
class FileData:
    path: str
    sha256: str
    entries: int  # objects read from the file
    skipped: int = 0  # ShareGPT entries with no usable turn


# The largest dataset file read (ShareGPT's is 0.7 GB): a device or a runaway file such as
# /dev/zero is refused, not read until the kernel kills the bench.
MAX_DATASET_BYTES = 2 << 30
_CHUNK = 1 << 20


def _read(path: str) -> bytes:
    """The whole file, read in bounded pieces: refused (64) beyond MAX_DATASET_BYTES or at the
    first NUL byte (no text dataset holds one; /dev/zero is nothing else)."""
    parts: list[bytes] = []
    size = 0
    try:
        with open(path, "rb") as f:
            while chunk := f.read(_CHUNK):
                if (nul := chunk.find(b"\0")) >= 0:
                    raise _bad(path, None, f"not a text file (a NUL byte at byte {size + nul + 1})")
                size += len(chunk)
                if size > MAX_DATASET_BYTES:
                    raise _bad(
                        path, None, f"larger than {MAX_DATASET_BYTES >> 30} GiB: not read further"
                    )
                parts.append(chunk)
    except OSError as e:
        raise UsageError(
            f"cannot read dataset {path}: {e.strerror}",
            hint="give an existing file: --dataset KIND:PATH",
        ) from e
    return b"".join(parts)


def _bad(path: str, line: int | str | None, why: str) -> UsageError:
    """`line`: a line number (JSONL), `entry N` (a JSON array), or None (the whole file)."""
    if line is None:
        where = path
    elif isinstance(line, int):
        where = f"{path}:{line}"
    else:
        where = f"{path} {line}"
    return UsageError(f"dataset {where}: {why}", hint="see docs/bench.md#datasets for the format")


def _lines(path: str, raw: bytes) -> list[tuple[int, Any]]:
    """(line number, parsed object) for each non-blank line."""
    out: list[tuple[int, Any]] = []
    for n, chunk in enumerate(raw.split(b"\n"), start=1):
        try:
            text = chunk.decode("utf-8")
        except UnicodeDecodeError as e:
            raise _bad(path, n, f"not UTF-8 (byte {e.start + 1} of the line)") from e
        if not text.strip():
            continue
        try:
            out.append((n, json.loads(text)))
        except ValueError as e:
            raise _bad(path, n, f"not JSON ({e})") from e
    return out


def _positive_int(path: str, line: int, obj: dict[str, Any], key: str) -> int | None:
    value = obj.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise _bad(path, line, f"{key} must be a positive integer, not {value!r}")
    return value


def read_jsonl(path: str) -> tuple[list[Sample], FileData]:
    raw = _read(path)
    samples: list[Sample] = []
    for n, obj in _lines(path, raw):
        if not isinstance(obj, dict):
            raise _bad(path, n, "each line must be a JSON object with a prompt")
        prompt = obj.get("prompt")
        if not isinstance(prompt, str) or not prompt:
            raise _bad(path, n, "prompt must be a non-empty string")
        _positive_int(path, n, obj, "input_len")
        outs = [v for k in _OUT_KEYS if (v := _positive_int(path, n, obj, k)) is not None]
        samples.append(Sample(prompt, outs[0] if outs else None))
    if not samples:
        raise _bad(path, None, "no prompt in the file")
    return samples, FileData(path, hashlib.sha256(raw).hexdigest(), len(samples))


def _conversation(path: str, line: int | str | None, obj: Any) -> Conversation | None:
    if not isinstance(obj, dict) or not isinstance(obj.get("conversations"), list):
        raise _bad(path, line, "each entry must be an object with a conversations list")
    turns: list[Turn] = []
    pending: str | None = None
    for msg in obj["conversations"]:
        if not isinstance(msg, dict) or not isinstance(msg.get("value"), str):
            raise _bad(path, line, "each conversation message needs from and a string value")
        role = str(msg.get("from", "")).lower()
        if role in USER_ROLES:
            if pending is not None:  # two user turns in a row: the first had no reply
                turns.append(Turn(pending, None))
            pending = msg["value"]
        elif role in REPLY_ROLES and pending is not None:
            turns.append(Turn(pending, msg["value"]))
            pending = None
    if pending is not None:
        turns.append(Turn(pending, None))
    turns = [t for t in turns if t.user.strip()]
    return Conversation(tuple(turns)) if turns else None


def read_sharegpt(path: str) -> tuple[list[Conversation], FileData]:
    raw = _read(path)
    entries: list[tuple[int | str | None, Any]]
    if raw.lstrip()[:1] == b"[":
        try:
            data = json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError as e:
            line = raw[: e.start].count(b"\n") + 1
            raise _bad(path, line, "not UTF-8") from e
        except ValueError as e:
            raise _bad(path, getattr(e, "lineno", None), f"not JSON ({e})") from e
        entries = [(f"entry {i + 1}", x) for i, x in enumerate(data)]
    else:
        entries = list(_lines(path, raw))
    convs = [c for n, obj in entries if (c := _conversation(path, n, obj)) is not None]
    if not convs:
        raise _bad(path, None, "no conversation with a human turn")
    info = FileData(
        path, hashlib.sha256(raw).hexdigest(), len(entries), skipped=len(entries) - len(convs)
    )
    return convs, info


def checked_dataset(spec: str) -> str:
    """`spec` with its file checked now, strictly, as the bench will read it (a bad line is a
    UsageError naming it), and its path made absolute: for a command that starts several runs
    (a sweep), so a bad file fails before the first and every run reads the same file."""
    from proctor.spec.datasets import split_dataset

    kind, path = split_dataset(spec)
    if not path:
        return spec
    if kind == "trace":
        from proctor.workloads.loadgen.tracefiles import read_trace

        read_trace(path, limit=0)  # every record checked, none held
    else:
        read_jsonl(path) if kind == "jsonl" else read_sharegpt(path)
    return f"{kind}:{Path(path).resolve()}"

"""Reading timestamped request traces: Mooncake's JSONL and BurstGPT's CSV.

Nothing is downloaded: the file is read once, strictly, as datafiles.py reads prompt files
(the same size cap and NUL refusal). A bad record (not UTF-8, a missing or mistyped field, a
negative length, a timestamp earlier than the one before it) is a usage error naming the file
and the line; nothing is skipped silently.

Mooncake (kvcache-ai/Mooncake, FAST25-release/traces), one object per line:
    {"timestamp": 3000, "input_length": 7236, "output_length": 794, "hash_ids": [0, 28, 29]}
    timestamp in milliseconds; hash_ids one id per 512-token block of the prompt, the same id
    in two prompts meaning the same block (so a shared prefix). hash_ids may be absent.
BurstGPT (HPMLL/BurstGPT, data/BurstGPT_*.csv), a CSV with a header:
    Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type
    Timestamp in seconds; columns found by name (BurstGPT_3 inserts Session ID and Elapsed
    time); only Timestamp, Request tokens and Response tokens are used.

A record with a zero input or output length (BurstGPT's failed requests: Response tokens 0)
is skipped and counted. Only the first `limit` records kept are held in memory; the rest are
still checked and counted, so a cut trace says how long it was.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
from array import array
from dataclasses import dataclass, field
from typing import Any

from proctor.workloads.loadgen.datafiles import _bad, _read

MOONCAKE = "mooncake"
BURSTGPT = "burstgpt"
BLOCK_TOKENS = 512  # Mooncake's hash block: 512 tokens a block
BURSTGPT_COLUMNS = ("Timestamp", "Request tokens", "Response tokens")
# The input tokens of all held records together: every prompt is built before the replay
# starts (about 6 bytes a token: 200 M tokens hold 1.2 GB), so a trace of absurd lengths is
# cut here, not built until memory runs out.
MAX_HELD_TOKENS = 200_000_000


@dataclass
class Trace:
    """The kept records (at most `limit`), times in seconds from the first kept one."""

    path: str
    sha256: str
    format: str
    times_s: array[float] = field(default_factory=lambda: array("d"))
    input_lens: array[int] = field(default_factory=lambda: array("q"))
    output_lens: array[int] = field(default_factory=lambda: array("q"))
    hash_ids: list[tuple[int, ...]] = field(default_factory=list)
    records: int = 0  # records read (lines or rows, blank lines not counted)
    kept: int = 0  # records with both lengths above zero, held or not
    skipped: int = 0  # records with a zero length
    token_cut: bool = False  # held records stopped at the token limit, not the record limit

    def __len__(self) -> int:
        return len(self.times_s)


class _Builder:
    """Adds records in order, checking the clock never goes back."""

    def __init__(self, trace: Trace, limit: int, unit_s: float, token_limit: int) -> None:
        self.trace, self.limit, self.unit_s = trace, limit, unit_s
        self.token_limit, self.tokens, self.full = token_limit, 0, False
        self.first: float | None = None
        self.last = -math.inf
        self.last_where: int | None = None

    def add(self, where: int, stamp: float, n_in: int, n_out: int, ids: tuple[int, ...]) -> None:
        t = self.trace
        t.records += 1
        if stamp < self.last:
            raise _bad(
                t.path,
                where,
                f"timestamp {stamp:g} is before the previous record's {self.last:g} "
                f"(line {self.last_where}): a trace must be sorted by time",
            )
        self.last, self.last_where = stamp, where
        if n_in == 0 or n_out == 0:
            t.skipped += 1
            return
        t.kept += 1
        if self.full or len(t.times_s) >= self.limit:
            return
        if self.tokens + n_in > self.token_limit:  # the held records stay a prefix
            self.full = t.token_cut = True
            return
        self.tokens += n_in
        if self.first is None:
            self.first = stamp
        t.times_s.append((stamp - self.first) * self.unit_s)
        t.input_lens.append(n_in)
        t.output_lens.append(n_out)
        t.hash_ids.append(ids)


def _count(path: str, where: int, value: Any, key: str) -> int:
    """A length: an integer, zero or more."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise _bad(path, where, f"{key} must be an integer number of tokens, not {value!r}")
    if value < 0:
        raise _bad(path, where, f"{key} must not be negative, not {value}")
    return value


def _stamp(path: str, where: int, value: Any, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _bad(path, where, f"{key} must be a number, not {value!r}")
    if not math.isfinite(value) or value < 0:
        raise _bad(path, where, f"{key} must be a finite number, zero or more, not {value!r}")
    return float(value)


def _mooncake(trace: Trace, text: str, builder: _Builder) -> None:
    path = trace.path
    for n, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError as e:
            raise _bad(path, n, f"not JSON ({e})") from e
        if not isinstance(obj, dict):
            raise _bad(path, n, "each line must be a JSON object (a Mooncake trace record)")
        for key in ("timestamp", "input_length", "output_length"):
            if key not in obj:
                raise _bad(
                    path,
                    n,
                    f"{key} is missing (Mooncake records need timestamp, "
                    "input_length, output_length)",
                )
        stamp = _stamp(path, n, obj["timestamp"], "timestamp")
        n_in = _count(path, n, obj["input_length"], "input_length")
        n_out = _count(path, n, obj["output_length"], "output_length")
        raw_ids = obj.get("hash_ids", [])
        if not isinstance(raw_ids, list):
            raise _bad(path, n, f"hash_ids must be a list of block ids, not {raw_ids!r}")
        ids = tuple(_count(path, n, x, "each hash id") for x in raw_ids)
        builder.add(n, stamp, n_in, n_out, ids)


def _number(path: str, where: int, text: str | None, key: str, integer: bool) -> float:
    value: Any
    try:
        value = int(text or "") if integer else float(text or "")
    except ValueError:
        raise _bad(path, where, f"{key} must be a number, not {text!r}") from None
    return value  # type: ignore[no-any-return]


def _burstgpt(trace: Trace, text: str, builder: _Builder) -> None:
    path = trace.path
    reader = csv.reader(io.StringIO(text, newline=""))
    header = next(reader, None) or []
    names = [h.strip() for h in header]
    missing = [c for c in BURSTGPT_COLUMNS if c not in names]
    if missing:
        raise _bad(
            path,
            1,
            f"no {', '.join(missing)} column: a BurstGPT trace's header is "
            "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type",
        )
    col = {c: names.index(c) for c in BURSTGPT_COLUMNS}
    for row in reader:
        n = reader.line_num
        if not row or not any(cell.strip() for cell in row):
            continue
        if len(row) < len(names):
            raise _bad(path, n, f"{len(row)} fields where the header names {len(names)}")
        stamp = _stamp(
            path, n, _number(path, n, row[col["Timestamp"]], "Timestamp", False), "Timestamp"
        )
        n_in = _count(
            path,
            n,
            _number(path, n, row[col["Request tokens"]], "Request tokens", True),
            "Request tokens",
        )
        n_out = _count(
            path,
            n,
            _number(path, n, row[col["Response tokens"]], "Response tokens", True),
            "Response tokens",
        )
        builder.add(n, stamp, n_in, n_out, ())


def _first_line(text: str) -> str:
    """The first non-blank line, found without splitting the whole text."""
    start = 0
    while start < len(text):
        end = text.find("\n", start)
        end = len(text) if end < 0 else end
        if line := text[start:end].strip():
            return line
        start = end + 1
    return ""


def read_trace(path: str, limit: int, token_limit: int = MAX_HELD_TOKENS) -> Trace:
    """The trace in `path`, its first `limit` kept records held (no more than `token_limit`
    input tokens in all); UsageError on a bad record."""
    raw = _read(path)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        col = e.start - (raw.rfind(b"\n", 0, e.start) + 1)
        raise _bad(path, line, f"not UTF-8 (byte {col + 1} of the line)") from e
    text = text.removeprefix("\ufeff")
    first = _first_line(text)
    kind = MOONCAKE if first.startswith("{") else BURSTGPT
    trace = Trace(path, hashlib.sha256(raw).hexdigest(), kind)
    if kind == MOONCAKE:
        _mooncake(trace, text, _Builder(trace, limit, 1e-3, token_limit))
    elif first and "," in first:
        _burstgpt(trace, text, _Builder(trace, limit, 1.0, token_limit))
    else:
        raise _bad(
            path,
            None,
            "neither a Mooncake trace (JSON lines) nor a BurstGPT trace (CSV with a header)",
        )
    if not trace.kept:
        why = f" ({trace.skipped} with a zero length)" if trace.skipped else ""
        raise _bad(path, None, f"no request in the trace{why}")
    if limit and not len(trace):
        raise _bad(
            path,
            None,
            f"its first request alone asks for more than {token_limit:,} input tokens, "
            "the most one bench builds",
        )
    return trace


__all__ = ["BLOCK_TOKENS", "BURSTGPT", "MAX_HELD_TOKENS", "MOONCAKE", "Trace", "read_trace"]

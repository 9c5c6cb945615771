"""The SSE side of one streaming response: messages to record fields, the same for every
HTTP path (the raw client in fasthttp.py and the aiohttp one in client.py).

Bytes come in per read, each read with one timestamp (perf_counter seconds): every message
completed by a read is stamped with that read's time, exactly as reading them one by one
from that buffer would. A read is split on b"\\n\\n" once (bytes.split, no re-slicing of the
rest per message), and an unfinished message waits for the next read without being copied
again until the read that ends it. The data: messages of a read are parsed in one orjson call
(as the elements of one JSON array); when that fails, they are parsed one by one, in order, so
a bad message fails the request exactly as it would alone (malformed_sse with its excerpt).
Parsing several reads at once (kept back, each message stamped with its read) was measured:
3-5 % less CPU per token, and a worse tail (the parses come in lumps); gone (bench/NOTES.md,
*Less CPU per read*).
The common read, one whole token message of the common shape, takes a short path in feed:
1.3 us against 2.6 us per message (bench/NOTES.md, *Where a token's CPU goes*); a property test
(tests/workloads/test_sse_reads.py) holds it equal to the whole way for every other shape.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from operator import sub
from typing import Any

from proctor.workloads.loadgen.records import RequestRecord

# An SSE message can be long (a big chunk of text) but never this long: a server that streams
# without message boundaries fails the request instead of growing the client's memory.
MAX_MESSAGE_BYTES = 16 * 1024 * 1024
ERROR_EXCERPT = 300

_json_decode = json.JSONDecoder().decode  # skips json.loads' per-call encoding sniffing


def _json_loads(data: bytes) -> Any:
    return _json_decode(data.decode())


loads: Callable[[bytes], Any] = _json_loads
with contextlib.suppress(ImportError):  # orjson: bytes in, ~4x faster
    from orjson import loads


class Malformed(Exception):
    """A data: message that is not what the protocol allows; the request fails with it."""

    def __init__(self, why: str, body: bytes) -> None:
        super().__init__(f"malformed stream message, {why}: {body[:80].decode(errors='replace')}")


# No model reads a prompt of more tokens than this (the longest context windows are ~10M): a
# larger usage.prompt_tokens is a server's lie or garbage, and would poison the totals.
MAX_PROMPT_TOKENS = 1 << 24
# finish_reason values that say the server gave up on the request (vLLM's "abort", and "error"
# of vLLM and SGLang): the text so far is not the answer, the request failed.
FAILED_FINISH = frozenset({"abort", "error"})


def _count(value: object) -> int | None:
    """A token count from `usage`: a whole non-negative number, or None when absent."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        raise ValueError(f"token count {value!r}")
    if isinstance(value, float) and not value.is_integer():
        raise ValueError(f"token count {value!r} is not a whole number")
    if value > MAX_PROMPT_TOKENS:
        raise ValueError(f"token count {value!r} is beyond any model's context")
    return int(value)


def _choice_text(choice: dict[str, object], chat: bool) -> str:
    if not chat:
        text = choice.get("text")
        return text if type(text) is str else str(text or "")
    delta = choice.get("delta")
    if not isinstance(delta, dict):
        return ""
    # Reasoning models stream their thinking in reasoning_content; it is output too.
    parts = (delta.get("content"), delta.get("reasoning_content"), delta.get("reasoning"))
    return "".join(p for p in parts if isinstance(p, str))


def _role_only(obj: dict[str, Any]) -> bool:
    """A chat chunk that opens the stream with the role and no text (vLLM sends one before
    the first token): not a token, so neither TTFT nor ITL counts it, as vLLM's client."""
    first = obj["choices"][0]
    delta = first.get("delta") if type(first) is dict else None
    return type(delta) is dict and "role" in delta


def _failed_finish(obj: dict[str, Any]) -> str | None:
    choices = obj.get("choices")
    if type(choices) is list and choices and type(first := choices[0]) is dict:
        reason = first.get("finish_reason")
        if type(reason) is str and reason in FAILED_FINISH:  # garbage (a list) is no failure
            return reason
    return None


def _is_error(obj: dict[str, Any]) -> bool:
    """An error object in the stream: OpenAI's {"error": ...} or SGLang's and older vLLM's
    {"object": "error", "message": ...}."""
    return ("error" in obj or obj.get("object") == "error") and not obj.get("choices")


_DONE = b"data: [DONE]\n\n"  # the stream's end, as OpenAI-compatible servers send it

_Usage = tuple[int | None, int | None]  # (completion_tokens, prompt_tokens)
_NO_USAGE: _Usage = (None, None)


def message_parts(obj: dict[str, Any], chat: bool) -> tuple[str | None, _Usage]:
    """(text of the first choice or None when the message carries no choices,
    (completion_tokens, prompt_tokens) from usage). Raises on any shape the API does not allow,
    so a garbage chunk becomes a failed request, never a crash."""
    choices = obj.get("choices")
    text: str | None = None
    if choices is not None and type(choices) is not list:
        raise TypeError(f"choices is a {type(choices).__name__}")
    if choices:
        first = choices[0]
        if type(first) is not dict:
            raise TypeError(f"choices[0] is a {type(first).__name__}")
        text = _choice_text(first, chat)
    usage = obj.get("usage")
    if usage is None:
        return text, _NO_USAGE
    if type(usage) is not dict:
        raise TypeError(f"usage is a {type(usage).__name__}")
    return text, (_count(usage.get("completion_tokens")), _count(usage.get("prompt_tokens")))


def _common_text(obj: dict[str, Any], chat: bool) -> str | None:
    """The text of the common token message: a first choice with a text (or a chat delta with
    only content), no usage (absent, or null: with include_usage, which proctor always asks
    for, OpenAI's API puts "usage": null in every chunk but the last), no failed
    finish_reason (a non-empty choices list also means no error object). None for anything
    else: that goes through message_parts, which checks every shape, and gives the same for
    what this takes (tests/workloads/test_sse_reads.py holds the two equal)."""
    choices = obj.get("choices")
    if type(choices) is not list or not choices or obj.get("usage") is not None:
        return None
    first = choices[0]
    if type(first) is not dict:
        return None
    reason = first.get("finish_reason")
    if reason is not None and (type(reason) is not str or reason in FAILED_FINISH):
        return None
    if not chat:
        text = first.get("text")
    else:
        delta = first.get("delta")
        if type(delta) is not dict or "reasoning_content" in delta or "reasoning" in delta:
            return None
        text = delta.get("content")
    return text if type(text) is str else None


def _parse_batch(bodies: list[bytes]) -> list[Any] | None:
    """Every body of one read parsed in one call, as the elements of a JSON array; None when
    that fails or the count differs (then each is parsed alone, for the exact error). The
    batch can only accept what one-by-one refuses for bodies that are invalid alone yet join
    into exactly as many valid values (one body ending inside a string that the next ends,
    plus another holding `},{`): no server's failure looks like that."""
    if b"[DONE]" in bodies:
        return None  # [DONE] before the last message: keep the order exact
    try:
        objs = loads(b"[" + b",".join(bodies) + b"]")
    except ValueError:
        return None
    return objs if type(objs) is list and len(objs) == len(bodies) else None


class StreamState:
    """What one 200 streaming response has said so far, written into its record."""

    __slots__ = (
        "chat",
        "cr",
        "got_first",
        "last",
        "pieces",
        "record",
        "st",
        "tail",
        "tail_len",
        "usage_tokens",
    )

    def __init__(self, record: RequestRecord, chat: bool, start: float) -> None:
        self.record, self.chat, self.st = record, chat, start
        self.pieces: list[str] = []
        self.got_first = False
        self.last = start
        self.usage_tokens: int | None = None
        self.tail: list[bytes] = []  # an unfinished message, in pieces
        self.tail_len = 0
        self.cr = False  # the last read ended with a CR (its LF may start the next read)

    def feed(self, data: bytes, ts: float) -> bool:
        """Messages completed by `data` (read at `ts`). True: the stream said the request
        failed (an error object, finish_reason abort/error), the record says so and the
        request is over. Raises Malformed."""
        # The common read, one whole token message `data: {...}\n\n` on a stream with nothing
        # pending, is taken here; anything else (or a message of any other shape) goes the
        # whole way from the same bytes, nothing changed yet (_feed).
        if (
            data[:7] == b"data: {"
            and data.find(b"\n", 7) == len(data) - 2
            and data[-1:] == b"\n"
            and not self.tail
            and not self.cr
            and b"\r" not in data
        ):
            try:
                obj = loads(data[6:-2])
            except ValueError:
                return self._feed(data, ts)
            # obj is a dict: the message began with {
            if (text := _common_text(obj, self.chat)) is not None:
                if text or not self.chat or self.got_first or not _role_only(obj):
                    rec = self.record
                    if self.got_first:
                        rec.itl.append(ts - self.last)
                    else:
                        self.got_first = True
                        rec.ttft = ts - self.st
                    self.last = ts
                    rec.chunks += 1
                    self.pieces.append(text)
                return False
            # One whole message of another shape (a response's usage, an error): taken as
            # _each takes it, from the parse above, without splitting and parsing it again.
            return self._one(obj, data[5:-2].strip(), ts)
        if data == _DONE and not self.tail and not self.cr:  # a response's last message
            self.record.saw_done = True
            return False
        return self._feed(data, ts)

    def _feed(self, data: bytes, ts: float) -> bool:
        """feed, every read: line ends, an unfinished message, several messages."""
        if self.cr or b"\r" in data:
            # The SSE spec ends a line with CRLF, LF or CR (sse-starlette sends CRLF): all
            # become LF, and a CRLF split across two reads is one line end, not two.
            if self.cr and data[:1] == b"\n":
                data = data[1:]
            self.cr = data[-1:] == b"\r"
            data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
            if not data:
                return False
        if self.tail:
            if b"\n\n" not in data and not (data[:1] == b"\n" and self.tail[-1][-1:] == b"\n"):
                self.tail.append(data)
                self.tail_len += len(data)
                if self.tail_len > MAX_MESSAGE_BYTES:
                    raise Malformed(
                        f"no message boundary in {MAX_MESSAGE_BYTES >> 20} MiB",
                        b"".join(self.tail[:2]),
                    )
                return False
            data = b"".join(self.tail) + data
            self.tail = []
        parts = data.split(b"\n\n")
        rest = parts.pop()
        if rest:
            if len(rest) > MAX_MESSAGE_BYTES:
                raise Malformed(f"no message boundary in {MAX_MESSAGE_BYTES >> 20} MiB", rest)
            self.tail = [rest]
            self.tail_len = len(rest)
        return self._messages(parts, [ts] * len(parts)) if parts else False

    def eof(self, ts: float) -> bool:
        """The body ended: a last message without its blank line still counts."""
        if not self.tail:
            return False
        last = b"".join(self.tail)
        self.tail = []
        return self._messages([last], [ts]) if last.strip() else False

    def _messages(self, parts: list[bytes], times: list[float]) -> bool:
        """The messages `parts`, each completed at its time in `times`."""
        lines = [p.strip() for p in parts]
        bodies = [m[5:].strip() for m in lines if m.startswith(b"data:")]
        if not bodies:
            return False  # comments, event: lines, keep-alives
        stamps = times
        if len(bodies) != len(lines):
            stamps = [t for m, t in zip(lines, times, strict=True) if m.startswith(b"data:")]
        done = bodies[-1] == b"[DONE]"
        if done:
            bodies.pop()
        objs = _parse_batch(bodies) if len(bodies) > 1 else None
        if objs is None:
            return self._each(parts, times)
        toks: list[float] = []  # the token messages' times, applied once (_tokens)
        try:
            failed = self._batch(bodies, objs, stamps, toks)
        finally:
            if toks:
                self._tokens(toks)
        if done and not failed:
            self.record.saw_done = True
        return failed

    def _batch(
        self, bodies: list[bytes], objs: list[Any], stamps: list[float], toks: list[float]
    ) -> bool:
        """The messages of one batch parse, in order; each token's time goes to `toks`."""
        chat = self.chat
        add, piece = toks.append, self.pieces.append
        for body, obj, ts in zip(bodies, objs, stamps[: len(bodies)], strict=True):
            if type(obj) is not dict:
                raise Malformed("not a JSON object", body)
            text = _common_text(obj, chat)
            if text is None:
                got = self._parts(obj, body)
                if got is None:
                    return True
                text, usage = got
                self._take(usage)  # after the refusal, as _each: only a message taken counts
            if text is None:
                continue
            if not text and chat and not (self.got_first or toks) and _role_only(obj):
                continue
            add(ts)
            piece(text)
        return False

    def _tokens(self, toks: list[float]) -> None:
        """Token messages at the times `toks` (in order): TTFT, ITLs, chunks, as one by one."""
        rec = self.record
        if self.got_first:
            seq = [self.last, *toks]
        else:
            self.got_first = True
            rec.ttft = toks[0] - self.st
            seq = toks
        rec.itl.extend(map(sub, seq[1:], seq[:-1]))
        self.last = toks[-1]
        rec.chunks += len(toks)

    def _stream_error(self, obj: dict[str, Any]) -> None:
        self.record.reason = "http_error"
        detail = json.dumps(obj.get("error", obj), default=str)[:ERROR_EXCERPT]
        self.record.error = f"error in stream: {detail}"

    def _refuse(self, reason: str, error: str) -> None:
        self.record.reason, self.record.error = reason, error

    def _each(self, parts: list[bytes], times: list[float]) -> bool:
        """Message by message, in order: the exact failure of the first bad message."""
        rec = self.record
        for raw, ts in zip(parts, times, strict=True):
            msg = raw.strip()
            if not msg.startswith(b"data:"):
                continue  # comments, event: lines, keep-alives
            body = msg[5:].strip()
            if body == b"[DONE]":
                rec.saw_done = True
                continue
            try:
                obj = loads(body)
            except ValueError as e:
                raise Malformed("not JSON", body) from e
            if type(obj) is not dict:
                raise Malformed("not a JSON object", body)
            if self._one(obj, body, ts):
                return True
        return False

    def _one(self, obj: dict[str, Any], body: bytes, ts: float) -> bool:
        """One parsed message of any shape, read at `ts`; True when it said the request failed."""
        got = self._parts(obj, body)
        if got is None:
            return True
        text, usage = got
        if text is not None and not (
            not text and self.chat and not self.got_first and _role_only(obj)
        ):
            self._tokens([ts])  # feed's short path writes the same inline (hot path)
            self.pieces.append(text)
        self._take(usage)
        return False

    def _parts(self, obj: dict[str, Any], body: bytes) -> tuple[str | None, _Usage] | None:
        """A message of any shape: (its text, its usage); None when it said the request
        failed (an error object, finish_reason abort/error: the record says so). Raises
        Malformed on a shape the API does not allow."""
        if _is_error(obj):
            self._stream_error(obj)
            return None
        try:
            text, usage = message_parts(obj, self.chat)
        except (TypeError, AttributeError, ValueError, OverflowError) as e:
            raise Malformed(f"unexpected shape ({e})", body) from e
        if text is not None and (bad := _failed_finish(obj)) is not None:
            self._refuse("aborted", f"the server ended the request with finish_reason {bad!r}")
            return None
        return text, usage

    def _take(self, usage: _Usage) -> None:
        if usage is not _NO_USAGE:
            if usage[0] is not None:
                self.usage_tokens = usage[0]
            if usage[1] is not None:
                self.record.prompt_tokens = usage[1]

    def finish(self, count_tokens: Callable[[str], int] | None) -> RequestRecord:
        """The stream ended normally: success, or no_output when nothing carried choices."""
        rec = self.record
        if not self.got_first:
            rec.reason = "no_output"
            rec.error = "stream ended without a message carrying choices"
            return rec
        rec.latency = self.last - self.st
        text = "".join(self.pieces)
        rec.generated_chars = len(text)
        if self.usage_tokens is not None and self.usage_tokens > rec.expected_output_len > 0:
            # More tokens than the request allowed (max_tokens): the server's count is wrong,
            # and every throughput built on it would be.
            rec.reason = "bad_usage"
            rec.error = (
                f"usage.completion_tokens {self.usage_tokens} is more than the "
                f"{rec.expected_output_len} the request allowed (max_tokens)"
            )
            return rec
        if self.usage_tokens is not None:
            rec.output_tokens, rec.output_tokens_source = self.usage_tokens, "usage"
        elif count_tokens is not None:
            rec.output_tokens, rec.output_tokens_source = count_tokens(text), "tokenizer"
        else:
            rec.output_tokens, rec.output_tokens_source = rec.chunks, "chunks"
        rec.success = True
        return rec

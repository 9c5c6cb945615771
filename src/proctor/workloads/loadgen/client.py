"""The streaming HTTP client: one aiohttp session, one coroutine per request.

Failures are data: every request ends as a RequestRecord with success, status, error and
reason filled in; nothing here raises for a bad response. Never hangs: a total timeout per
request and an idle timeout between reads (aiohttp's sock_read) bound every request.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiohttp

from proctor.workloads.loadgen.config import BenchConfig
from proctor.workloads.loadgen.deadlines import Flight, for_loop, settle
from proctor.workloads.loadgen.records import RequestRecord

READ_BUFSIZE = 4 * 1024 * 1024  # aiohttp's 64 KiB default collapses long-context throughput
# An SSE message can be long (a big chunk of text) but never this long: a server that streams
# without message boundaries fails the request instead of growing the client's memory.
MAX_MESSAGE_BYTES = 16 * 1024 * 1024
_ERROR_EXCERPT = 300
# Streaming requests: total and idle limits are enforced by deadlines.py (one timer per loop,
# not one re-armed per read); only the connect limit stays with aiohttp.
@functools.lru_cache(maxsize=8)
def _stream_timeout(connect_s: float) -> aiohttp.ClientTimeout:
    return aiohttp.ClientTimeout(total=None, sock_connect=connect_s, sock_read=None)

_json_decode = json.JSONDecoder().decode  # skips json.loads' per-call encoding sniffing


def _json_loads(data: bytes) -> Any:
    return _json_decode(data.decode())


_loads: Callable[[bytes], Any] = _json_loads
with contextlib.suppress(ImportError):  # orjson (`proctor[fast]`): bytes in, ~4x faster
    from orjson import loads as _loads


@dataclass(slots=True)
class PlannedRequest:
    index: int
    prompt: str
    prompt_len: int
    output_len: int
    warmup: bool = False
    # Multi-turn: the chat history for /v1/chat/completions (else `prompt` is the only
    # user message), and which conversation and turn this is.
    messages: list[dict[str, str]] | None = None
    conversation: int | None = None
    turn: int | None = None


def make_session(cfg: BenchConfig, limit: int) -> aiohttp.ClientSession:
    """A session whose pool can hold `limit` connections (the default 100 caps concurrency)."""
    connector = aiohttp.TCPConnector(limit=limit, limit_per_host=0, ttl_dns_cache=300,
                                     keepalive_timeout=60)
    timeout = aiohttp.ClientTimeout(total=cfg.request_timeout_s, sock_connect=cfg.connect_timeout_s,
                                    sock_read=cfg.idle_timeout_s)
    headers = {"Content-Type": "application/json"}
    if cfg.api_key is not None:
        headers["Authorization"] = f"Bearer {cfg.api_key.get_secret_value()}"
    # No Accept-Encoding (bodies are never decompressed) and no User-Agent/Accept: fewer
    # header operations per request, which aiohttp otherwise repeats for every POST.
    return aiohttp.ClientSession(connector=connector, timeout=timeout, headers=headers,
                                 read_bufsize=READ_BUFSIZE, auto_decompress=False,
                                 skip_auto_headers=("Accept", "Accept-Encoding", "User-Agent"))


def build_payload(cfg: BenchConfig, model: str, req: PlannedRequest) -> tuple[str, bytes]:
    body: dict[str, object]
    if cfg.endpoint == "chat":
        path = "/v1/chat/completions"
        messages = req.messages or [{"role": "user", "content": req.prompt}]
        body = {"model": model, "messages": messages, "max_completion_tokens": req.output_len}
    else:
        path = "/v1/completions"
        body = {"model": model, "prompt": req.prompt, "max_tokens": req.output_len}
    body.update(temperature=cfg.temperature, stream=True, stream_options={"include_usage": True})
    if cfg.ignore_eos:
        body["ignore_eos"] = True  # sent only when asked: strict servers reject unknown fields
    return path, json.dumps(body).encode()


def _choice_text(choice: dict[str, object], chat: bool) -> str:
    if not chat:
        return str(choice.get("text") or "")
    delta = choice.get("delta")
    if not isinstance(delta, dict):
        return ""
    # Reasoning models stream their thinking in reasoning_content; it is output too.
    parts = (delta.get("content"), delta.get("reasoning_content"), delta.get("reasoning"))
    return "".join(p for p in parts if isinstance(p, str))


class _Malformed(Exception):
    """A data: message that is not what the protocol allows; the request fails with it."""

    def __init__(self, why: str, body: bytes) -> None:
        super().__init__(f"malformed stream message, {why}: {body[:80].decode(errors='replace')}")


def _count(value: object) -> int | None:
    """A token count from `usage`: a non-negative integer, or None when absent."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise ValueError(f"token count {value!r}")
    return int(value)


_Usage = tuple[int | None, int | None]  # (completion_tokens, prompt_tokens)


def _message_parts(obj: dict[str, Any], chat: bool) -> tuple[str | None, _Usage]:
    """(text of the first choice or None when the message carries no choices,
    (completion_tokens, prompt_tokens) from usage). Raises on any shape the API does not allow,
    so a garbage chunk becomes a failed request, never a crash."""
    choices = obj.get("choices")
    text: str | None = None
    if choices is not None and not isinstance(choices, list):
        raise TypeError(f"choices is a {type(choices).__name__}")
    if choices:
        first = choices[0]
        if not isinstance(first, dict):
            raise TypeError(f"choices[0] is a {type(first).__name__}")
        text = _choice_text(first, chat)
    usage = obj.get("usage")
    if usage is None:
        return text, (None, None)
    if not isinstance(usage, dict):
        raise TypeError(f"usage is a {type(usage).__name__}")
    return text, (_count(usage.get("completion_tokens")), _count(usage.get("prompt_tokens")))


async def send_request(
    session: aiohttp.ClientSession,
    cfg: BenchConfig,
    model: str,
    req: PlannedRequest,
    record: RequestRecord,
    count_tokens: Callable[[str], int] | None = None,
) -> RequestRecord:
    """Send one streaming request and fill `record` (also returned)."""
    deadlines = for_loop()
    flight = deadlines.add(cfg.request_timeout_s, cfg.idle_timeout_s)
    try:
        return await _send(session, cfg, model, req, record, count_tokens, flight)
    finally:
        deadlines.remove(flight)
        record.end_time = time.perf_counter()


async def _send(
    session: aiohttp.ClientSession,
    cfg: BenchConfig,
    model: str,
    req: PlannedRequest,
    record: RequestRecord,
    count_tokens: Callable[[str], int] | None,
    flight: Flight,
) -> RequestRecord:
    path, payload = build_payload(cfg, model, req)
    chat = cfg.endpoint == "chat"
    pieces: list[str] = []
    got_first = False
    usage_tokens: int | None = None
    # Start = just before the POST (metric definition); the deadlines count from here too.
    last = st = flight.start = flight.last = time.perf_counter()
    record.start_time = st
    try:
        async with session.post(cfg.base_url + path, data=payload,
                                timeout=_stream_timeout(cfg.connect_timeout_s)) as resp:
            record.status = resp.status
            if resp.status != 200:
                body = (await resp.text(errors="replace"))[:_ERROR_EXCERPT]
                record.reason = "rate_limited" if resp.status == 429 else "http_error"
                record.error = f"HTTP {resp.status}: {body.strip()}"
                return record
            buf = b""
            eof = False
            stream = resp.content
            while not eof:
                data = await stream.readany()
                ts = flight.last = time.perf_counter()
                if not data:
                    eof = True
                    if not buf.strip():
                        break
                    buf += b"\n\n"  # a last message without its blank line still counts
                else:
                    buf += data
                    if len(buf) > MAX_MESSAGE_BYTES and b"\n\n" not in buf:
                        limit = MAX_MESSAGE_BYTES >> 20
                        raise _Malformed(f"no message boundary in {limit} MiB", buf)
                while True:
                    cut = buf.find(b"\n\n")
                    if cut < 0:
                        break
                    msg, buf = buf[:cut], buf[cut + 2:]
                    msg = msg.strip()
                    if not msg.startswith(b"data:"):
                        continue  # comments, event: lines, keep-alives
                    body_bytes = msg[5:].strip()
                    if body_bytes == b"[DONE]":
                        record.saw_done = True
                        continue
                    try:
                        obj = _loads(body_bytes)
                    except ValueError as e:
                        raise _Malformed("not JSON", body_bytes) from e
                    if not isinstance(obj, dict):
                        raise _Malformed("not a JSON object", body_bytes)
                    if "error" in obj and not obj.get("choices"):
                        record.reason = "http_error"
                        detail = json.dumps(obj["error"], default=str)[:_ERROR_EXCERPT]
                        record.error = f"error in stream: {detail}"
                        return record
                    try:
                        text, usage = _message_parts(obj, chat)
                    except (TypeError, AttributeError, ValueError, OverflowError) as e:
                        raise _Malformed(f"unexpected shape ({e})", body_bytes) from e
                    if text is not None:
                        if got_first:
                            record.itl.append(ts - last)
                        else:
                            got_first = True
                            record.ttft = ts - st
                        last = ts
                        record.chunks += 1
                        pieces.append(text)
                    if usage[0] is not None:
                        usage_tokens = usage[0]
                    if usage[1] is not None:
                        record.prompt_tokens = usage[1]
    except asyncio.CancelledError:
        if not flight.expired or not settle(flight):
            raise
        record.reason = "timeout"
        record.error = f"TimeoutError: no answer within the request or idle timeout " \
                       f"(total {cfg.request_timeout_s:g}s, idle {cfg.idle_timeout_s:g}s)"
        return record
    except _Malformed as e:
        record.reason, record.error = "malformed_sse", str(e)
        return record
    except (asyncio.TimeoutError, aiohttp.ServerTimeoutError) as e:
        record.reason = "timeout"
        record.error = f"{type(e).__name__}: no answer within the request or idle timeout " \
                       f"(total {cfg.request_timeout_s:g}s, idle {cfg.idle_timeout_s:g}s)"
        return record
    except aiohttp.ClientConnectorError as e:
        record.reason, record.error = "connect_error", f"{type(e).__name__}: {e}"
        return record
    except (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError,
            aiohttp.ClientOSError) as e:
        record.reason, record.error = "disconnect", f"{type(e).__name__}: {e}"
        return record
    except (aiohttp.ClientError, OSError, ValueError) as e:
        record.reason, record.error = "client_error", f"{type(e).__name__}: {e}"
        return record
    if not got_first:
        record.reason = "no_output"
        record.error = "stream ended without a message carrying choices"
        return record
    record.latency = last - st
    text = "".join(pieces)
    record.generated_chars = len(text)
    if usage_tokens is not None:
        record.output_tokens, record.output_tokens_source = usage_tokens, "usage"
    elif count_tokens is not None:
        record.output_tokens, record.output_tokens_source = count_tokens(text), "tokenizer"
    else:
        record.output_tokens, record.output_tokens_source = record.chunks, "chunks"
    record.success = True
    return record

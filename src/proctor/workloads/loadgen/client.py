"""The streaming HTTP clients: a Sender per benchmark loop, one coroutine per request.

Two paths, the same records: "fast" (fasthttp.py, a raw asyncio HTTP/1.1 client, for plain
http://) and "aiohttp" (https://, URL credentials together with an API key, or
PROCTOR_HTTP_CLIENT=aiohttp). Both parse the stream with sse.StreamState.

Failures are data: every request ends as a RequestRecord with success, status, error and
reason filled in; nothing here raises for a bad response. Never hangs: a total timeout per
request and an idle timeout between reads (deadlines.py) bound every request.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import urlsplit

import aiohttp

from proctor.workloads.loadgen.config import BenchConfig
from proctor.workloads.loadgen.deadlines import Flight, for_loop, settle
from proctor.workloads.loadgen.fasthttp import Pool, exchange, fast_reader
from proctor.workloads.loadgen.pacer import Pacer
from proctor.workloads.loadgen.records import RequestRecord
from proctor.workloads.loadgen.sse import ERROR_EXCERPT, Malformed, StreamState

READ_BUFSIZE = 4 * 1024 * 1024  # aiohttp's 64 KiB default collapses long-context throughput
HTTP_CLIENT_ENV = "PROCTOR_HTTP_CLIENT"  # "aiohttp" forces the aiohttp path


# Streaming requests: total and idle limits are enforced by deadlines.py (one timer per loop,
# not one re-armed per read); only the connect limit stays with aiohttp.
@functools.lru_cache(maxsize=8)
def _stream_timeout(connect_s: float) -> aiohttp.ClientTimeout:
    return aiohttp.ClientTimeout(total=None, sock_connect=connect_s, sock_read=None)


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
    request_id: str = ""  # sent as x-request-id (request_ids.assign); "" sends proctor-INDEX


def request_id(req: PlannedRequest) -> str:
    return req.request_id or f"proctor-{req.index}"


def make_session(cfg: BenchConfig, limit: int) -> aiohttp.ClientSession:
    """A session whose pool can hold `limit` connections (the default 100 caps concurrency)."""
    connector = aiohttp.TCPConnector(
        limit=limit, limit_per_host=0, ttl_dns_cache=300, keepalive_timeout=60
    )
    timeout = aiohttp.ClientTimeout(
        total=cfg.request_timeout_s,
        sock_connect=cfg.connect_timeout_s,
        sock_read=cfg.idle_timeout_s,
    )
    headers = {"Content-Type": "application/json"}
    if cfg.api_key is not None:
        headers["Authorization"] = f"Bearer {cfg.api_key.get_secret_value()}"
    # No Accept-Encoding (bodies are never decompressed) and no User-Agent/Accept: fewer
    # header operations per request, which aiohttp otherwise repeats for every POST.
    return aiohttp.ClientSession(
        connector=connector,
        timeout=timeout,
        headers=headers,
        read_bufsize=READ_BUFSIZE,
        auto_decompress=False,
        skip_auto_headers=("Accept", "Accept-Encoding", "User-Agent"),
    )


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


def read_path(cfg: BenchConfig) -> str:
    """ "C" where the raw client reads with _fastread.c (a read's whole token chunks; the rest
    of the read stays in Python), else "Python": metrics.json "client".reader."""
    return "C" if http_path(cfg) == "fast" and fast_reader() is not None else "Python"


def http_path(cfg: BenchConfig) -> str:
    """ "fast" (the raw HTTP/1.1 client) or "aiohttp": the path the requests will take."""
    if os.environ.get(HTTP_CLIENT_ENV, "auto").strip().lower() == "aiohttp":
        return "aiohttp"
    url = urlsplit(cfg.base_url)
    if url.scheme != "http":
        return "aiohttp"  # TLS
    if (url.username is not None or url.password is not None) and cfg.api_key is not None:
        return "aiohttp"  # which refuses the pair, as before: one failure reason for both paths
    return "fast"


class Sender(Protocol):
    path: str

    async def send(
        self,
        cfg: BenchConfig,
        model: str,
        req: PlannedRequest,
        record: RequestRecord,
        count_tokens: Callable[[str], int] | None = None,
    ) -> RequestRecord: ...


class AiohttpSender:
    path = "aiohttp"

    def __init__(self, session: aiohttp.ClientSession) -> None:
        self.session = session

    async def send(
        self,
        cfg: BenchConfig,
        model: str,
        req: PlannedRequest,
        record: RequestRecord,
        count_tokens: Callable[[str], int] | None = None,
    ) -> RequestRecord:
        return await send_request(self.session, cfg, model, req, record, count_tokens)


class FastSender:
    path = "fast"

    def __init__(self, pool: Pool) -> None:
        self.pool = pool

    def watch(self, pacer: Pacer | None) -> None:
        """Each read first lets `pacer` send what is due (pacer.Pacer.poke)."""
        self.pool.pacer = pacer

    async def send(
        self,
        cfg: BenchConfig,
        model: str,
        req: PlannedRequest,
        record: RequestRecord,
        count_tokens: Callable[[str], int] | None = None,
    ) -> RequestRecord:
        return await send_fast(self.pool, cfg, model, req, record, count_tokens)


@contextlib.asynccontextmanager
async def open_sender(cfg: BenchConfig, limit: int) -> AsyncIterator[Sender]:
    """The Sender for this config, with a pool for `limit` connections, closed after."""
    if http_path(cfg) == "fast":
        pool = Pool(cfg)
        try:
            yield FastSender(pool)
        finally:
            pool.close()
        return
    async with make_session(cfg, limit) as session:
        yield AiohttpSender(session)


def _timeout_error(cfg: BenchConfig, name: str) -> str:
    return (
        f"{name}: no answer within the request or idle timeout "
        f"(total {cfg.request_timeout_s:g}s, idle {cfg.idle_timeout_s:g}s)"
    )


async def send_fast(
    pool: Pool,
    cfg: BenchConfig,
    model: str,
    req: PlannedRequest,
    record: RequestRecord,
    count_tokens: Callable[[str], int] | None = None,
) -> RequestRecord:
    """send_request on the raw HTTP/1.1 client: same record, same failure reasons."""
    deadlines = for_loop()
    flight = deadlines.add(cfg.request_timeout_s, cfg.idle_timeout_s)
    path, payload = build_payload(cfg, model, req)
    record.request_id = rid = request_id(req)
    request = pool.request_bytes(path, payload, rid)
    # Start = just before the POST (metric definition); the deadlines count from here too.
    st = flight.start = flight.last = time.perf_counter()
    record.start_time = st
    state = StreamState(record, cfg.endpoint == "chat", st)
    try:
        try:
            conn = await pool.acquire()
        except asyncio.TimeoutError:
            record.reason = "timeout"
            record.error = (
                f"ConnectionTimeoutError: no connection within {cfg.connect_timeout_s:g}s"
            )
            return record
        except OSError as e:
            record.reason, record.error = "connect_error", f"{type(e).__name__}: {e}"
            return record
        outcome = await exchange(conn, request, record, state, flight)
    except asyncio.CancelledError:
        if not flight.expired or not settle(flight):
            raise
        record.reason = "timeout"
        record.error = _timeout_error(cfg, "TimeoutError")
        return record
    finally:
        deadlines.remove(flight)
        record.end_time = time.perf_counter()
    if outcome == "done":
        return state.finish(count_tokens)
    return record


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
    record.request_id = rid = request_id(req)
    headers = {"X-Request-Id": rid}
    # Start = just before the POST (metric definition); the deadlines count from here too.
    st = flight.start = flight.last = time.perf_counter()
    record.start_time = st
    state = StreamState(record, cfg.endpoint == "chat", st)
    try:
        async with session.post(
            cfg.base_url + path,
            data=payload,
            headers=headers,
            timeout=_stream_timeout(cfg.connect_timeout_s),
        ) as resp:
            record.status = resp.status
            if resp.status != 200:
                body = (await resp.text(errors="replace"))[:ERROR_EXCERPT]
                record.reason = "rate_limited" if resp.status == 429 else "http_error"
                record.error = f"HTTP {resp.status}: {body.strip()}"
                return record
            stream = resp.content
            while True:
                data = await stream.readany()
                ts = flight.last = time.perf_counter()
                if not data:
                    if state.eof(ts):
                        return record
                    break
                if state.feed(data, ts):
                    return record
    except asyncio.CancelledError:
        if not flight.expired or not settle(flight):
            raise
        record.reason = "timeout"
        record.error = _timeout_error(cfg, "TimeoutError")
        return record
    except Malformed as e:
        record.reason, record.error = "malformed_sse", str(e)
        return record
    except (asyncio.TimeoutError, aiohttp.ServerTimeoutError) as e:
        record.reason = "timeout"
        record.error = _timeout_error(cfg, type(e).__name__)
        return record
    except aiohttp.ClientConnectorError as e:
        record.reason, record.error = "connect_error", f"{type(e).__name__}: {e}"
        return record
    except (
        aiohttp.ClientPayloadError,
        aiohttp.ServerDisconnectedError,
        aiohttp.ClientOSError,
    ) as e:
        record.reason, record.error = "disconnect", f"{type(e).__name__}: {e}"
        return record
    except (aiohttp.ClientError, OSError, ValueError) as e:
        record.reason, record.error = "client_error", f"{type(e).__name__}: {e}"
        return record
    return state.finish(count_tokens)

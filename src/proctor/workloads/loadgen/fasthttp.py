"""The raw HTTP/1.1 streaming client: one non-blocking socket per keep-alive connection.

Why not aiohttp here: at tens of thousands of chunks per second one client core went to
aiohttp's request set-up, its StreamReader and per-read wake-ups (docs/bench.md, Capacity).
Why not an asyncio transport either: a transport reads the socket itself and hands over bytes
without the kernel's receive timestamp, so every time would be when the loop got round to the
bytes, late by however long the loop was busy (issue 23). Here each read is one recvmsg into a
shared buffer, its time is when its last segment arrived (rxtime.py), then chunked decoding with
bytes.find (a read of whole chunks skips it: the short path, _whole_chunks), the SSE
messages parsed by sse.StreamState.feed, and the waiting request task is woken once, when its
response ends. Before a read is handled, a paced request that has come due is sent (the pool's
pacer, pacer.Pacer.poke): the read keeps its kernel stamp however late it is handled; the send
is timed when it leaves.

Where the C extension built (`_fastread.c`), a pool's connections sit in one epoll set of its
own, which the event loop watches as one file descriptor: when it is ready, Pool._drain reads
the whole wave in C (`_fastread.drain`), each connection's common read (a response's token
chunks: the same record, no Python call and no event-loop callback per read) done there and
every other read (a head, a response's end, a cut chunk) handed back to the Python path below
(Conn._readable, Conn._handle). Without it (PROCTOR_FASTREAD=0, read when a pool opens; no
compiler) each connection is the loop's own reader and every read is Python's. Metric
definitions and records are the same either way; failures are classified the same way
(http_error, rate_limited, disconnect, timeout, malformed_sse, no_output, connect_error,
client_error).

Plain http:// only; https:// (and URL credentials together with an API key, which aiohttp
refuses) use the aiohttp path in client.py.
"""

from __future__ import annotations

import asyncio
import base64
import math
import os
import select
import socket
import time
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

from proctor.workloads.loadgen import rxtime
from proctor.workloads.loadgen.config import BenchConfig
from proctor.workloads.loadgen.deadlines import Flight
from proctor.workloads.loadgen.records import RequestRecord
from proctor.workloads.loadgen.sse import ERROR_EXCERPT, Malformed, StreamState

if TYPE_CHECKING:
    from proctor.workloads.loadgen.pacer import Pacer

MAX_HEAD_BYTES = 64 * 1024
READ_BYTES = 256 * 1024  # one read; the buffer is shared by every connection of a pool
_ERROR_BODY_BYTES = 64 * 1024

# Body framing of the response being read.
_LENGTH, _CHUNKED, _TO_EOF = 1, 2, 3
_HEX = b"0123456789abcdefABCDEF"

# The common read in C, where it built (an optional extension: no compiler, no C path).
FASTREAD_ENV = "PROCTOR_FASTREAD"
try:
    from proctor.workloads.loadgen._fastread import drain as _drain
    from proctor.workloads.loadgen._fastread import take_tokens as _take_tokens
except ImportError:  # pragma: no cover - the install could not build it
    _drain = _take_tokens = None
# A wave's reads a drain hands back before the loop runs its other callbacks: at most this
# many calls of it in a row, each after a paced send came due (the C side's limit is 1024).
_DUE_ROUNDS = 64


def fast_reader() -> Any:
    """_fastread.drain, or None where it did not build or PROCTOR_FASTREAD=0."""
    if os.environ.get(FASTREAD_ENV, "").strip() == "0":
        return None
    return _drain


def _chunk_size(line: bytes) -> int:
    """A chunk-size line's size: hex digits only (RFC 9112), then any extensions after ";".
    int(x, 16) alone takes "-6", "+5", "0x5" and "1_0": a negative size sent the chunk decoder
    backwards, and "-6" looped it for ever with the event loop inside."""
    size = line.split(b";", 1)[0].rstrip(b" \t")
    if not size or len(size) > 16 or size.translate(None, _HEX):
        raise ValueError(f"bad chunk size line {line[:40]!r}")
    return int(size, 16)


class _Exchange:
    """One request on one connection: the record being filled and the task's wake-up."""

    __slots__ = ("err_body", "fut", "outcome", "record", "state", "status")

    def __init__(
        self, record: RequestRecord, state: StreamState, fut: asyncio.Future[None]
    ) -> None:
        self.record, self.state, self.fut = record, state, fut
        self.status = 0
        self.err_body: list[bytes] = []
        self.outcome = ""  # "" while running; "done", or a failure reason


class Conn:
    __slots__ = (
        "between",
        "chunk_left",
        "closed",
        "ex",
        "fd",
        "flight",
        "framing",
        "head",
        "in_head",
        "keep_alive",
        "length_left",
        "loop",
        "pending",
        "pool",
        "size_line",
        "sock",
        "trailers",
    )

    def __init__(self, pool: Pool, sock: socket.socket, loop: asyncio.AbstractEventLoop) -> None:
        self.pool, self.sock, self.loop = pool, sock, loop
        self.fd = sock.fileno()
        self.closed = False
        self.ex: _Exchange | None = None
        self.flight: Flight | None = None  # the deadline record of the request in progress
        self.pending = b""  # request bytes the socket did not take yet
        self._reset()
        if pool.ep is not None:  # read by the pool's drain, in C where the read is common
            pool.ep.register(self.fd, select.EPOLLIN)
            pool.by_fd[self.fd] = self
        else:
            loop.add_reader(self.fd, self._readable)

    def _reset(self) -> None:
        self.in_head = True
        self.head = b""
        self.framing = _TO_EOF
        self.keep_alive = True
        self.length_left = 0
        self.chunk_left = 0  # bytes left in the current chunk, its CRLF included
        self.size_line = b""  # a chunk-size line split across reads
        self.trailers = False
        # In a 200 response's chunked body, at a chunk boundary: a read of whole chunks (one
        # streamed token each, the common read) takes the short path, _whole_chunks.
        self.between = False

    # ------------------------------------------------------------------ socket events
    def write(self, data: bytes) -> None:
        try:
            sent = self.sock.send(data)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError as e:
            self.loop.call_soon(self.connection_lost, e)  # as a transport reports it
            return
        if sent < len(data):  # a long prompt: the rest when the socket takes it
            self.pending = data[sent:]
            self.loop.add_writer(self.fd, self._writable)

    def _writable(self) -> None:
        try:
            sent = self.sock.send(self.pending)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as e:
            self.connection_lost(e)
            return
        self.pending = self.pending[sent:]
        if not self.pending:
            self.loop.remove_writer(self.fd)

    def _readable(self) -> None:
        """A read in Python: the whole read where the C path is off, and on it (Pool._drain)
        any read that is not a response's common read (a head, a cut chunk, an idle
        connection's)."""
        pool = self.pool
        ex = self.ex
        try:
            n, anc, _, _ = self.sock.recvmsg_into(pool.bufs, rxtime.ANC_SPACE)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as e:
            self.connection_lost(e)
            return
        now = time.perf_counter()
        if not n:
            self.connection_lost(None)
            return
        if (pacer := pool.pacer) is not None and now >= pacer.next_due and ex is not None:
            # A due send first (this read has its kernel stamp already); not on an idle
            # connection's read, which closes it: the send could take it from the idle list.
            pacer.poke()
        data = pool.view[:n].tobytes()
        ts = pool.clock.arrival(anc, now)
        self._handle(data, ts, now)

    def _handle(self, data: bytes, ts: float, now: float) -> None:
        """One read's bytes, arrived at `ts` (the kernel's stamp), read at `now`."""
        if self.between and (ex := self.ex) is not None and not ex.outcome:
            # The common read, exactly one whole chunk of a plain hex size (a token), is
            # taken here; several chunks (tokens the read merged, a response's last read) or
            # anything else by _whole_chunks, from the same bytes.
            eol = data.find(b"\r\n", 0, 18)
            if eol > 0:
                line = data[:eol]
                size = 0 if line.translate(None, _HEX) else int(line, 16)
                end = eol + 2 + size
                if size and end + 2 == len(data):
                    if self.flight is not None:
                        self.flight.last = now
                    try:
                        if ex.state.feed(data[eol + 2 : end], ts):
                            self._settle(ex, ex.record.reason or "http_error", reuse=False)
                    except Malformed as e:  # a bad message fails its request, as below
                        self._fail(ex, "malformed_sse", str(e))
                    except Exception as e:  # as data_received: never into the event loop
                        self._fail(ex, "client_error", f"{type(e).__name__}: {e}")
                    return
            self._whole_chunks(ex, data, ts, now)
        else:
            self.data_received(data, ts, now)

    def _whole_chunks(self, ex: _Exchange, data: bytes, ts: float, now: float) -> None:
        """The short path, for a read that starts at a chunk boundary of a 200 chunked body:
        each whole chunk of a plain hex size (a streamed token each) goes straight to the SSE
        side, without the chunk decoder. What is left (a chunk the read cut, the last chunk,
        extensions) goes the whole way, from where the whole chunks end."""
        if self.flight is not None:
            self.flight.last = now
        n = len(data)
        pos = 0
        find = data.find
        feed = ex.state.feed
        try:
            while True:
                eol = find(b"\r\n", pos, pos + 18)
                if eol <= pos:
                    break
                line = data[pos:eol]
                if line.translate(None, _HEX):  # extensions, a sign: the whole way says
                    break
                size = int(line, 16)
                if not size:
                    if data[eol + 2 :] == b"\r\n":  # the last chunk ends the read: the end
                        self._body_end(ex, ts)
                        return
                    break  # trailers, or bytes after the body: the whole way says
                end = eol + 2 + size
                if end + 2 > n:
                    break
                if feed(data[eol + 2 : end], ts):
                    self._settle(ex, ex.record.reason or "http_error", reuse=False)
                    return
                pos = end + 2
                if pos == n:
                    return
        except Malformed as e:  # a bad message fails its request, as in data_received
            self._fail(ex, "malformed_sse", str(e))
            return
        except Exception as e:  # as data_received: never into the event loop
            self._fail(ex, "client_error", f"{type(e).__name__}: {e}")
            return
        self.data_received(data[pos:] if pos else data, ts, now)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed:
            self._close()
        ex = self.ex
        if ex is None or ex.outcome:
            return
        if not self.in_head and self.framing == _TO_EOF:
            self._body_end(ex, time.perf_counter())
            return
        why = (
            f"{type(exc).__name__}: {exc}"
            if exc
            else "ServerDisconnectedError: the server closed the connection mid-response"
        )
        self._fail(ex, "disconnect", why)

    def data_received(self, data: bytes, ts: float, now: float) -> None:
        """`data` arrived at `ts` (the kernel's stamp) and was read at `now`."""
        ex = self.ex
        if ex is None or ex.outcome:  # nothing was asked: the connection is not reusable
            self._abort()
            return
        if self.flight is not None:
            self.flight.last = now
        try:
            if self.in_head:
                data = self._head(ex, data, ts)
                if self.in_head or ex.outcome:
                    return
                if data and self.between and (take := self.pool.take) is not None:
                    # The body's first bytes came with the head (a zero-ITL server sends a
                    # whole answer in one read): its whole token chunks in C, as a read's.
                    state = ex.state
                    taken = take(data, ts, state, ex.record, state.chat)
                    if taken:
                        data = data[taken:]
            self._body(ex, data, ts)
        except Malformed as e:
            self._fail(ex, "malformed_sse", str(e))
        except Exception as e:  # never let a bad response escape into the event loop
            self._fail(ex, "client_error", f"{type(e).__name__}: {e}")

    # ------------------------------------------------------------------ parsing
    def _head(self, ex: _Exchange, data: bytes, ts: float) -> bytes:
        buf = self.head + data if self.head else data
        while True:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                if len(buf) > MAX_HEAD_BYTES:
                    self._fail(ex, "client_error", "ValueError: response head over 64 KiB")
                self.head = buf
                return b""
            lines = buf[:end].split(b"\r\n")
            status_line = lines[0]
            if not status_line.startswith(b"HTTP/1."):
                raise ValueError(f"not an HTTP/1.x response: {status_line[:40]!r}")
            status = int(status_line[9:12])
            buf = buf[end + 4 :]
            if 100 <= status < 200:  # 100 Continue and friends: a final head follows
                continue
            break
        self.head = b""
        self.in_head = False
        ex.status = ex.record.status = status
        self.keep_alive = status_line.startswith(b"HTTP/1.1")
        framing, length = _TO_EOF, 0
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"transfer-encoding":
                if b"chunked" in value.lower():
                    framing = _CHUNKED
            elif name == b"content-length" and framing != _CHUNKED:
                v = value.strip()
                if not v.isdigit():  # int() takes "-5" and "+5" too
                    raise ValueError(f"bad Content-Length {v[:40]!r}")
                framing, length = _LENGTH, int(v)
            elif name == b"connection":
                v = value.strip().lower()
                if v == b"close":
                    self.keep_alive = False
                elif v == b"keep-alive":
                    self.keep_alive = True
        if framing == _TO_EOF:
            self.keep_alive = False
        self.framing, self.length_left = framing, length
        self.between = framing == _CHUNKED and status == 200
        if framing == _LENGTH and length == 0:
            self._body_end(ex, ts)
        return buf

    def _body(self, ex: _Exchange, data: bytes, ts: float) -> None:
        if not data:
            return
        done = False
        if self.framing == _CHUNKED:
            payload, done = self._dechunk(data)
            self.between = ex.status == 200 and not (
                done or self.chunk_left or self.size_line or self.trailers
            )
        elif self.framing == _LENGTH:
            if len(data) >= self.length_left:
                payload, done = data[: self.length_left], True
                self.length_left = 0
            else:
                payload = data
                self.length_left -= len(data)
        else:
            payload = data
        if payload:
            if ex.status == 200:
                if ex.state.feed(payload, ts):  # the stream said the request failed
                    self._settle(ex, ex.record.reason or "http_error", reuse=False)
                    return
            elif sum(map(len, ex.err_body)) < _ERROR_BODY_BYTES:
                ex.err_body.append(payload)
        if done:
            self._body_end(ex, ts)

    def _dechunk(self, data: bytes) -> tuple[bytes, bool]:
        """The payload bytes in `data`, and whether the body's last chunk was read."""
        out: list[bytes] = []
        append = out.append
        if self.size_line:
            data = self.size_line + data
            self.size_line = b""
        pos, n = 0, len(data)
        find = data.find
        while pos < n:
            left = self.chunk_left
            if left:  # the rest of a chunk that began in an earlier read
                end = pos + left
                if end <= n:
                    if left > 2:
                        append(data[pos : end - 2])
                    pos = end
                    self.chunk_left = 0
                else:
                    if left > 2:
                        append(data[pos : min(n, end - 2)])
                    self.chunk_left = end - n
                    pos = n
                continue
            if self.trailers:  # after the last chunk: optional trailers, then an empty line
                rest = data[pos:]
                if rest[:2] == b"\r\n" or b"\r\n\r\n" in rest:
                    return b"".join(out), True
                self.size_line = rest
                break
            eol = find(b"\r\n", pos)
            if eol < 0:
                if n - pos > 1024:
                    raise ValueError("chunk-size line over 1 KiB")
                self.size_line = data[pos:]
                break
            size = _chunk_size(data[pos:eol])
            pos = eol + 2
            if size == 0:
                self.trailers = True
                continue
            end = pos + size
            if end + 2 <= n:  # the whole chunk is here (the common case)
                append(data[pos:end])
                pos = end + 2
            else:
                self.chunk_left = size + 2
        return b"".join(out) if len(out) != 1 else out[0], False

    def _body_end(self, ex: _Exchange, ts: float) -> None:
        if ex.status != 200:
            body = b"".join(ex.err_body).decode(errors="replace")[:ERROR_EXCERPT]
            reason = "rate_limited" if ex.status == 429 else "http_error"
            ex.record.error = f"HTTP {ex.status}: {body.strip()}"
            self._settle(ex, reason, reuse=self.keep_alive)
            return
        try:
            if ex.state.eof(ts):
                self._settle(ex, "http_error", reuse=False)
                return
        except Malformed as e:
            self._fail(ex, "malformed_sse", str(e))
            return
        self._settle(ex, "done", reuse=self.keep_alive)

    # ------------------------------------------------------------------ endings
    def _settle(self, ex: _Exchange, outcome: str, *, reuse: bool) -> None:
        ex.outcome = outcome
        if outcome != "done":
            ex.record.reason = outcome
        self.ex = None
        self.flight = None
        if reuse and not self.closed:
            self._reset()
            self.pool.idle.append(self)
        else:
            self._abort()
        if not ex.fut.done():
            ex.fut.set_result(None)

    def _fail(self, ex: _Exchange, reason: str, error: str) -> None:
        ex.record.error = error
        self._settle(ex, reason, reuse=False)

    def _abort(self) -> None:
        if not self.closed:
            self._close()

    def _close(self) -> None:
        self.closed = True
        pool = self.pool
        pool.conns.discard(self)
        if pool.by_fd.get(self.fd) is self:
            del pool.by_fd[self.fd]
            if pool.ep is not None:
                pool.ep.unregister(self.fd)
        else:
            self.loop.remove_reader(self.fd)
        if self.pending:
            self.pending = b""
            self.loop.remove_writer(self.fd)
        self.sock.close()


class Pool:
    """Keep-alive connections to one http:// server; LIFO reuse, new ones as needed."""

    def __init__(self, cfg: BenchConfig) -> None:
        u = urlsplit(cfg.base_url)
        if u.scheme != "http" or not u.hostname:
            raise ValueError(f"the raw client speaks http:// only, not {u.scheme}://")
        self.host = u.hostname
        self.port = u.port or 80
        self.connect_timeout = cfg.connect_timeout_s
        self.idle: list[Conn] = []
        self.conns: set[Conn] = set()  # every open one, closed with the pool
        self.addrs: list[tuple[Any, ...]] = []  # getaddrinfo's, kept for every new connection
        self.bufs = [bytearray(READ_BYTES)]
        self.view = memoryview(self.bufs[0])
        self.clock = rxtime.ReadClock()  # replaced by the loop's in acquire()
        self.keeper = rxtime.keep_stamping()
        self.pacer: Pacer | None = None  # paced sends due before a read go first (poke)
        self.fast = fast_reader()  # the common read in C (the drain); None: all in Python
        # the token chunks after a head, in the head's read, in C; on and off with fast
        self.take = None if self.fast is None else _take_tokens
        # Where fast: one epoll set of the pool's connections, read by _drain when the loop
        # finds it ready (open_drain); the connections by file descriptor.
        self.ep: select.epoll | None = None
        self.ep_loop: asyncio.AbstractEventLoop | None = None
        self.by_fd: dict[int, Conn] = {}
        self.seen: list[tuple[bytes, float, float, int]] | None = None  # tests: C's reads
        netloc = u.hostname if u.port is None else f"{u.hostname}:{u.port}"
        if ":" in u.hostname:  # IPv6 literal
            netloc = f"[{u.hostname}]" + (f":{u.port}" if u.port else "")
        auth = ""
        if u.username is not None or u.password is not None:
            pair = f"{unquote(u.username or '')}:{unquote(u.password or '')}"
            auth = f"Authorization: Basic {base64.b64encode(pair.encode()).decode()}\r\n"
        elif cfg.api_key is not None:
            auth = f"Authorization: Bearer {cfg.api_key.get_secret_value()}\r\n"
        self.prefix = u.path.rstrip("/")
        self._head = (
            f"Host: {netloc}\r\nContent-Type: application/json\r\n{auth}Content-Length: "
        ).encode()

    def request_bytes(self, path: str, body: bytes, request_id: str = "") -> bytes:
        rid = b"X-Request-Id: %s\r\n" % request_id.encode() if request_id else b""
        return b"POST %s HTTP/1.1\r\n%s%s%d\r\n\r\n%s" % (
            (self.prefix + path).encode(),
            rid,
            self._head,
            len(body),
            body,
        )

    async def acquire(self) -> Conn:
        idle = self.idle
        while idle:
            conn = idle.pop()
            if not conn.closed:
                return conn
        return await asyncio.wait_for(self._connect(), self.connect_timeout)

    def open_drain(self, loop: asyncio.AbstractEventLoop) -> None:
        """Where the C path is on: the pool's connections are read by _drain, which the loop
        calls once their epoll set is ready, not a Python callback a read."""
        if self.fast is not None and self.ep is None:
            self.ep = select.epoll()
            self.ep_loop = loop
            loop.add_reader(self.ep.fileno(), self._drain)

    def _drain(self) -> None:
        """A wave of ready connections read: each common read (a response's token chunks)
        done in C, with its kernel stamp; every other read handed back and done here."""
        assert self.ep is not None and self.fast is not None
        pacer, clock, fd = self.pacer, self.clock, self.ep.fileno()
        for _ in range(_DUE_ROUNDS):
            if pacer is not None and time.perf_counter() >= pacer.next_due:
                pacer.poke()  # a due send first (its read stamps are the kernel's anyway)
            due_at = math.inf if pacer is None else pacer.next_due
            try:
                handed, delays, unstamped, due = self.fast(
                    fd, self.by_fd, self.bufs[0], clock, due_at, self.seen
                )
            except Exception as e:  # never into the event loop (out of memory, in effect)
                self._drain_failed(e)
                return
            if delays:
                clock.note_all(delays, unstamped)
            for item in handed:
                if type(item) is not tuple:
                    item._readable()
                    continue
                conn = item[0]
                if len(item) == 4:  # the rest of a read whose leading tokens C took
                    conn._handle(item[1], item[2], item[3])
                elif len(item) == 2:  # the peer closed (None) or the read failed
                    conn.connection_lost(item[1])
                elif (ex := getattr(conn, "ex", None)) is not None and not ex.outcome:
                    err = item[1]  # the read's tokens raised: as in data_received
                    conn._fail(ex, "client_error", f"{type(err).__name__}: {err}")
                else:  # a read C could not take, with no request to fail: not reusable
                    conn._abort()
            if not due:
                return

    def _drain_failed(self, e: Exception) -> None:
        """The drain itself failed, so no read of the wave can be trusted: every request of
        the pool fails as client_error and every connection closes (none is left ready for
        a loop that would call the drain again at once)."""
        why = f"{type(e).__name__}: {e}"
        for conn in list(self.by_fd.values()):
            if (ex := conn.ex) is not None and not ex.outcome:
                conn._fail(ex, "client_error", why)
            else:
                conn._abort()

    async def _connect(self) -> Conn:
        loop = asyncio.get_running_loop()
        self.clock = rxtime.for_loop()
        self.open_drain(loop)
        if not self.addrs:
            self.addrs = await loop.getaddrinfo(self.host, self.port, type=socket.SOCK_STREAM)
        err: OSError = OSError(f"no address for {self.host}:{self.port}")
        for family, kind, proto, _, addr in self.addrs:
            sock = socket.socket(family, kind, proto)
            try:
                sock.setblocking(False)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                rxtime.enable(sock)
                await loop.sock_connect(sock, addr)
            except OSError as e:
                sock.close()
                err = e
                continue
            except BaseException:  # cancelled (the connect timeout): nothing left open
                sock.close()
                raise
            conn = Conn(self, sock, loop)
            self.conns.add(conn)
            return conn
        raise err

    def close(self) -> None:
        for conn in list(self.conns):
            conn._abort()
        self.idle.clear()
        if self.ep is not None:
            if self.ep_loop is not None and not self.ep_loop.is_closed():
                self.ep_loop.remove_reader(self.ep.fileno())
            self.ep.close()
            self.ep = self.ep_loop = None
        if self.keeper is not None:
            self.keeper.close()


async def exchange(
    conn: Conn, request: bytes, record: RequestRecord, state: StreamState, flight: Flight
) -> str:
    """Send `request` on `conn` and wait for its end; the outcome ("done" or a reason)."""
    fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    ex = _Exchange(record, state, fut)
    conn.ex = ex
    conn.flight = flight
    conn.write(request)
    try:
        await fut
    except BaseException:
        if not ex.outcome:  # cancelled (a deadline) or torn down: the connection is spent
            conn.ex = None
            conn._abort()
        raise
    return ex.outcome

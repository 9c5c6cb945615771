"""The raw client's common read in C (loadgen/_fastread.c) leaves the record the Python read
path leaves: every read of a real loopback TCP connection goes through the pool's drain (the
C path, and the Python path for what it hands back), and the same bytes with the same stamp
through the Python path of a second connection."""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import socket
import struct
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proctor.workloads.loadgen import fasthttp, rxtime
from proctor.workloads.loadgen.config import BenchConfig
from proctor.workloads.loadgen.deadlines import Flight
from proctor.workloads.loadgen.loop import ENV as loop_env
from proctor.workloads.loadgen.loop import loop_name
from proctor.workloads.loadgen.records import RequestRecord
from proctor.workloads.loadgen.runner import run_benchmark
from proctor.workloads.loadgen.sse import StreamState
from tests.workloads.bare_conn import bare_conn

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from emulator import start_emulator

HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


def _token(text: object = " t", **extra: object) -> bytes:
    first: dict[str, object] = {"index": 0, "text": text, "logprobs": None}
    first.update(extra)
    return b"data: " + json.dumps({"id": "c", "choices": [first]}).encode() + b"\n\n"


USAGE = b'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}\n\n'
# What ends or fails a stream of either kind, and what is no message at all.
ENDS = [
    USAGE,
    b'data: {"error":{"message":"boom"}}\n\n',
    b"data: [DONE]\n\n",
    b": keep-alive\n\n",
    b"data: {not json\n\n",
]

# What a completions stream may carry: common tokens mostly (the C path's), and each shape
# the C path must leave to Python: usage, a failed or odd finish_reason, a text that is not
# a string, no choices, an error, [DONE], a comment, bad JSON, a CR line end, escapes.
MESSAGES = [
    _token(),
    _token(),
    _token(' \u00e9\n"\\x'),
    _token(""),
    _token(finish_reason="length"),
    _token(finish_reason="stop", stop_reason=None),
    b'data: {"choices":[{"index":0,"text":"u"}],"usage":null}\n\n',
    b'data: {"choices":[{"index":0,"text":"u"}],"usage":{"completion_tokens":1}}\n\n',
    _token(finish_reason="abort"),
    _token(finish_reason="error"),
    _token(finish_reason=["error"]),
    _token(7),
    _token(None),
    b'data: {"choices":"c"}\n\n',
    *ENDS,
    b'data: {"choices":[{"index":0,"text":"r"}]}\r\n\r\n',
    b'data: {"choices":[{"index":0,"text":"q"}]}\r\n\n',
    b'data: {"choices":\r\r[{"index":0,"text":"w"}]}\n\n',
    b'data: {"choices":\n[{"index":0,"text":"v"}]}\n\n',
    b'data: {"choices":[{"index":0,"text":"a"}]}\n\ndata: {"choices":[{"index":0,"text":"b"}]}\n\n',
    b'data: {"choices":[{"index":0,"text":"l"}]}\n',
    b"\n",
]


def _delta(delta: object, **extra: object) -> bytes:
    first: dict[str, object] = {"index": 0, "delta": delta, "logprobs": None}
    first.update(extra)
    return b"data: " + json.dumps({"id": "c", "choices": [first]}).encode() + b"\n\n"


# A chat stream's: the role-only opener (not a token before the first), content tokens,
# reasoning (the whole way), a delta without content, and the ends and failures as above.
CHAT_MESSAGES = [
    _delta({"role": "assistant", "content": ""}),
    _delta({"role": "assistant"}),
    _delta({"content": " t"}),
    _delta({"content": " t"}),
    _delta({"content": ""}),
    _delta({"content": ' \u00e9\n"\\x'}),
    _delta({"role": "assistant", "content": "r"}),
    _delta({"content": "x", "reasoning_content": "think"}),
    _delta({"reasoning": "think"}),
    _delta({"content": "y", "reasoning": "think"}),
    _delta({"content": None}),
    _delta({}),
    _delta([{"content": "l"}]),
    _delta({"content": "s"}, finish_reason="stop"),
    _delta({"content": "a"}, finish_reason="abort"),
    b'data: {"choices":[{"index":0,"delta":{"content":"u"}}],"usage":null}\n\n',
    *ENDS,
]


class _Spy(fasthttp.Conn):
    """A Conn that notes every read it handles in Python, and every read the C path took
    (all of it or its leading chunks), with the read's bytes and stamp: the second connection
    is handed the same whole read. `rest`: the next _handle is the rest of a read C took the
    start of, noted whole already."""

    __slots__ = ("rest", "seen")

    def _handle(self, data: bytes, ts: float, now: float) -> None:
        if self.rest:  # what the C path left of a read the twin has whole already
            self.rest = False
        else:
            self.seen.append((data, ts, now))
        super()._handle(data, ts, now)


@pytest.fixture(scope="module")
def fast(fastread: Any) -> Any:
    return fastread.drain


@pytest.fixture(scope="module")
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    lp = asyncio.new_event_loop()
    yield lp
    lp.close()


@pytest.fixture(scope="module")
def listener() -> Iterator[socket.socket]:
    s = socket.create_server(("127.0.0.1", 0))
    yield s
    s.close()


def _state(conn: fasthttp.Conn, ex: fasthttp._Exchange) -> tuple[object, ...]:
    st = ex.state
    between = None if conn.closed else conn.between
    return (ex.outcome, ex.record.to_dict(), st.pieces, st.got_first, st.last, st.tail, st.cr,
            st.usage_tokens, conn.closed, between)  # fmt: skip


def _both(
    loop: asyncio.AbstractEventLoop,
    listener: socket.socket,
    fast: Any,
    reads: list[bytes],
    chat: bool = False,
    pacer: Any = None,
) -> tuple[list[tuple[object, ...]], list[tuple[object, ...]], list[tuple[int, int]]]:
    """Each read sent over loopback TCP and read by a Conn of a pool with the C path (its
    drain, as the event loop calls it); the same bytes and stamps handed to a second Conn's
    Python path. Their states after each read, and how many reads the C path took: (bytes
    read, bytes taken in C) each, all of the read or its leading whole token chunks."""
    pool = fasthttp.Pool(BenchConfig(base_url=f"http://127.0.0.1:{listener.getsockname()[1]}"))
    pool.clock = rxtime.ReadClock()
    pool.clock.start()
    taken: list[tuple[int, int]] = []

    def c_path(*args: Any) -> Any:
        assert pool.seen is not None
        before = len(pool.seen)
        got = fast(*args)
        for data, ts, now, took in pool.seen[before:]:
            if took:  # the second connection reads these bytes in Python
                taken.append((len(data), took))
                a.seen.append((data, ts, now))
                a.rest = took < len(data)
        return got

    def c_take(data: bytes, *args: Any) -> int:
        got = int(fasthttp._take_tokens(data, *args))  # type: ignore[misc]
        if got:  # in a read the spy saw whole: the twin has all of it already
            taken.append((len(data), got))
        return got

    pool.fast = c_path if fast is not None else None
    pool.take = c_take if fast is not None else None
    pool.pacer = pacer
    pool.seen = []
    pool.open_drain(loop)
    client = socket.create_connection(listener.getsockname())
    server, _ = listener.accept()
    try:
        client.setblocking(False)
        rxtime.enable(client)
        server.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        a = _Spy(pool, client, loop)
        a.seen = []
        a.rest = False
        b = bare_conn()
        exs = []
        for conn in (a, b):
            rec = RequestRecord(index=0, prompt_len=1, expected_output_len=64)
            ex = fasthttp._Exchange(rec, StreamState(rec, chat, 0.5), loop.create_future())
            conn.ex = ex
            exs.append(ex)
        got_a, got_b = [], []
        for data in reads:
            if exs[0].outcome or a.closed:
                break
            server.sendall(data)
            deadline = time.monotonic() + 5
            before = len(a.seen)
            while len(a.seen) == before and time.monotonic() < deadline:
                if pool.ep is not None:
                    pool._drain()  # as the loop calls it once the epoll set is ready
                else:
                    a._readable()  # nothing there yet: BlockingIOError, handled
            for read in a.seen[before:]:
                b._handle(*read)
            got_a.append(_state(a, exs[0]))
            got_b.append(_state(b, exs[1]))
        return got_a, got_b, taken
    finally:
        server.close()
        if not a.closed:
            a._close()
        pool.close()


@st.composite
def _reads(draw: st.DrawFn, messages: list[bytes]) -> list[bytes]:
    """A response as its reads: the head, then mostly one chunk of one message a read (the C
    path's read), sometimes two chunks, a chunk cut, an uppercase or zero-padded size, an
    extension; then the last chunk."""
    reads = [HEAD]
    for msg in draw(st.lists(st.sampled_from(messages), min_size=1, max_size=10)):
        size = draw(st.sampled_from([b"%x", b"%x", b"%X", b"00%x", b"%x;e=1"])) % len(msg)
        chunk = size + b"\r\n" + msg + b"\r\n"
        how = draw(st.sampled_from(["alone", "alone", "alone", "with the last", "cut"]))
        if how == "with the last":  # the head's read too: a zero-ITL server's answer
            reads[-1] += chunk
        elif how == "cut":
            at = draw(st.integers(1, len(chunk) - 1))
            reads += [chunk[:at], chunk[at:]]
        else:
            reads.append(chunk)
    if draw(st.booleans()):
        reads.append(b"0\r\n\r\n")
    else:
        reads[-1] += b"0\r\n\r\n"
    return reads


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(reads=_reads(MESSAGES))
def test_the_c_path_leaves_the_record_of_the_python_path(
    loop: asyncio.AbstractEventLoop, listener: socket.socket, fast: Any, reads: list[bytes]
) -> None:
    got_c, got_py, _ = _both(loop, listener, fast, reads)
    assert got_c == got_py


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(reads=_reads(CHAT_MESSAGES))
def test_the_c_path_leaves_the_record_of_the_python_path_for_chat(
    loop: asyncio.AbstractEventLoop, listener: socket.socket, fast: Any, reads: list[bytes]
) -> None:
    got_c, got_py, _ = _both(loop, listener, fast, reads, chat=True)
    assert got_c == got_py


def test_a_chat_stream_s_opener_and_tokens_take_the_c_path(
    loop: asyncio.AbstractEventLoop, listener: socket.socket, fast: Any
) -> None:
    """vLLM's chat opener (role, empty content) is read in C and is no token; the tokens after
    it are, and the record holds them."""
    msgs = [_delta({"role": "assistant", "content": ""})] + [_delta({"content": " t"})] * 3
    reads = [HEAD] + [b"%x\r\n%s\r\n" % (len(m), m) for m in msgs]
    got_c, got_py, taken = _both(loop, listener, fast, reads, chat=True)
    assert len(taken) == 4 and got_c == got_py
    rec = got_c[-1][1]
    assert isinstance(rec, dict) and rec["chunks"] == 3 and len(rec["itl"]) == 2


def test_a_common_token_takes_the_c_path_and_its_kernel_stamp(
    loop: asyncio.AbstractEventLoop, listener: socket.socket, fast: Any
) -> None:
    """The test above would pass with no C path at all: here every token is taken in C, the
    record holds them, and each is stamped by the kernel, before the read returned."""
    reads = [HEAD] + [b"%x\r\n%s\r\n" % (len(_token()), _token())] * 5
    got_c, got_py, taken = _both(loop, listener, fast, reads)
    assert len(taken) == 5 and got_c == got_py
    rec = got_c[-1][1]
    assert isinstance(rec, dict) and rec["chunks"] == 5 and len(rec["itl"]) == 4
    assert got_c[-1][2] == [" t"] * 5


def test_a_common_token_is_read_by_the_scan_and_an_escaped_one_by_the_parser(
    loop: asyncio.AbstractEventLoop, listener: socket.socket, fast: Any, fastread: Any
) -> None:
    """The C path reads a common token message with its own scan (no parser, no dict), and
    hands one it cannot decide (an escape) to the parser: the same record either way."""
    counts = fastread.counts
    plain, escaped = _token(" t"), _token("a\nb")
    reads = [HEAD] + [b"%x\r\n%s\r\n" % (len(m), m) for m in (plain, escaped, plain)]
    scanned, parsed = counts()
    got_c, got_py, taken = _both(loop, listener, fast, reads)
    assert len(taken) == 3 and got_c == got_py
    assert got_c[-1][2] == [" t", "a\nb", " t"]
    assert counts() == (scanned + 2, parsed + 1)


def test_tokens_a_late_read_found_merged_take_the_c_path_and_the_rest_python(
    loop: asyncio.AbstractEventLoop, listener: socket.socket, fast: Any
) -> None:
    """A loop that reads late finds a stream's tokens merged in one read: all of them are
    taken in C (one stamp, the later ITLs 0, as the Python path gives them); a response's
    last read (tokens, then usage, [DONE] and the last chunk) has its tokens taken in C and
    the rest read in Python, which ends the response as the Python path alone does."""
    tok = b"%x\r\n%s\r\n" % (len(_token()), _token())
    end = b"".join(b"%x\r\n%s\r\n" % (len(m), m) for m in (USAGE, b"data: [DONE]\n\n"))
    reads = [HEAD, tok, tok * 3, tok * 2 + end + b"0\r\n\r\n"]
    got_c, got_py, taken = _both(loop, listener, fast, reads)
    assert got_c == got_py
    assert taken == [
        (len(tok), len(tok)),
        (3 * len(tok), 3 * len(tok)),
        (len(reads[3]), 2 * len(tok)),
    ]
    outcome, rec = got_c[-1][0], got_c[-1][1]
    assert outcome == "done" and isinstance(rec, dict)
    assert rec["chunks"] == 6 and rec["saw_done"] and rec["itl"][1:3] == [0.0, 0.0]


def test_a_response_whole_in_one_read_has_its_tokens_taken_in_c(
    loop: asyncio.AbstractEventLoop, listener: socket.socket, fast: Any
) -> None:
    """A zero-ITL server answers whole: head, tokens, usage, [DONE] and the last chunk in one
    read. The head is read in Python, the tokens after it in C (one stamp, ITLs 0), the rest
    in Python, which ends the response; the record is the Python path's."""
    tok = b"%x\r\n%s\r\n" % (len(_token()), _token())
    end = b"".join(b"%x\r\n%s\r\n" % (len(m), m) for m in (USAGE, b"data: [DONE]\n\n"))
    whole = HEAD + tok * 3 + end + b"0\r\n\r\n"
    got_c, got_py, taken = _both(loop, listener, fast, [whole])
    assert got_c == got_py
    assert taken == [(len(whole) - len(HEAD), 3 * len(tok))]
    outcome, rec = got_c[-1][0], got_c[-1][1]
    assert outcome == "done" and isinstance(rec, dict)
    assert rec["chunks"] == 3 and rec["saw_done"] and rec["itl"] == [0.0, 0.0]


def test_a_token_chunk_cut_before_its_crlf_is_left_to_python(
    loop: asyncio.AbstractEventLoop, listener: socket.socket, fast: Any
) -> None:
    """A read that ends inside a token chunk's closing CRLF (or just before it) holds no
    whole chunk at its end: the C path takes only the whole ones before it, and the chunk
    decoder reads the cut one with the next read."""
    tok = b"%x\r\n%s\r\n" % (len(_token()), _token())
    reads = [HEAD, tok + tok[:-2], tok[-2:], tok[:-1], tok[-1:] + tok, tok, b"0\r\n\r\n"]
    got_c, got_py, taken = _both(loop, listener, fast, reads)
    assert got_c == got_py
    assert taken[0] == (len(reads[1]), len(tok)) and taken[-1] == (len(tok), len(tok))
    assert got_c[-1][0] == "done" and got_c[-1][1]["chunks"] == 5  # type: ignore[index]


class _DuePacer:
    """A pacer with a send always due: counts the pokes, and the reads handled before each."""

    next_due = 0.0

    def __init__(self) -> None:
        self.pokes = 0

    def poke(self) -> None:
        self.pokes += 1


@pytest.mark.parametrize("in_c", [True, False])
def test_a_due_send_goes_before_each_read_on_either_path(
    loop: asyncio.AbstractEventLoop, listener: socket.socket, fast: Any, in_c: bool
) -> None:
    """Paced requests: every read of a connection mid-response first lets a due send go
    (Pacer.poke), in C as in Python, and the tokens are still read in C where it is on."""
    tok = b"%x\r\n%s\r\n" % (len(_token()), _token())
    pacer = _DuePacer()
    got_c, got_py, taken = _both(loop, listener, fast if in_c else None, [HEAD] + [tok] * 4,
                                 pacer=pacer)  # fmt: skip
    assert got_c == got_py and got_c[-1][1]["chunks"] == 4  # type: ignore[index]
    # one a read, the head's too (C pokes before its read, so also before a read that finds
    # nothing yet: the harness's wait)
    assert len(taken) == (4 if in_c else 0) and pacer.pokes >= 5


class _CountingPacer:
    """A pacer with a send always due that notes, at each poke, how many tokens the records
    of `recs` hold by then."""

    next_due = 0.0

    def __init__(self, recs: list[RequestRecord]) -> None:
        self.recs = recs
        self.at: list[int] = []

    def poke(self) -> None:
        self.at.append(sum(r.chunks for r in self.recs))


_PoolOf = tuple[fasthttp.Pool, list[fasthttp.Conn], list[socket.socket], list[RequestRecord]]


@contextlib.contextmanager
def _pool_of(loop: asyncio.AbstractEventLoop, listener: socket.socket, n: int) -> Iterator[_PoolOf]:
    """A pool read by its drain, with n connections mid-response (the head read), each with
    a request's record; the servers' ends and the pool closed after."""
    pool = fasthttp.Pool(BenchConfig(base_url="http://127.0.0.1:9"))
    pool.clock = rxtime.ReadClock()
    pool.open_drain(loop)
    conns: list[fasthttp.Conn] = []
    servers: list[socket.socket] = []
    recs: list[RequestRecord] = []
    try:
        for _ in range(n):
            client = socket.create_connection(listener.getsockname())
            server, _ = listener.accept()
            client.setblocking(False)
            rxtime.enable(client)
            server.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn = fasthttp.Conn(pool, client, loop)
            rec = RequestRecord(index=len(recs), prompt_len=1, expected_output_len=8)
            conn.ex = fasthttp._Exchange(rec, StreamState(rec, False, 0.0), loop.create_future())
            server.sendall(HEAD)
            conns.append(conn)
            servers.append(server)
            recs.append(rec)
        time.sleep(0.02)
        pool._drain()  # the heads, in Python
        assert all(c.between for c in conns)
        yield pool, conns, servers, recs
    finally:
        for server in servers:
            server.close()
        pool.close()


def test_a_due_send_stops_a_wave_after_each_read(
    loop: asyncio.AbstractEventLoop, listener: socket.socket, fast: Any
) -> None:
    """Paced requests beside a wave of ready connections: the drain goes back to Python to
    let a due send go after each read, not after the wave, and what it did not read yet is
    read by the next call (the connections stay ready)."""
    with _pool_of(loop, listener, 3) as (pool, _, servers, recs):
        pacer = _CountingPacer(recs)
        pool.pacer = pacer
        tok = b"%x\r\n%s\r\n" % (len(_token()), _token())
        for s in servers:
            s.sendall(tok)
        time.sleep(0.02)
        pool._drain()
        assert [r.chunks for r in recs] == [1, 1, 1]
        assert pacer.at[:3] == [0, 1, 2]  # a poke before each read
        pool.pacer = None
        for s in servers:  # and without a pacer, one call reads the whole wave
            s.sendall(tok)
        time.sleep(0.02)
        seen = pool.seen = []
        pool._drain()
        assert [r.chunks for r in recs] == [2, 2, 2] and len(seen) == 3


def test_a_read_that_fails_in_c_fails_its_request_and_the_wave_goes_on(
    loop: asyncio.AbstractEventLoop, listener: socket.socket, fast: Any
) -> None:
    """A read whose record C cannot update (here record.itl is not a list) fails that
    request as client_error, as the Python path fails a read that raises; the other
    connections of the wave are read as usual."""
    with _pool_of(loop, listener, 3) as (pool, conns, servers, recs):
        recs[1].itl = ()  # type: ignore[assignment]
        tok = b"%x\r\n%s\r\n" % (len(_token()), _token())
        for _ in range(2):
            for s in servers:
                s.sendall(tok)
            time.sleep(0.02)
            pool._drain()
        assert [r.chunks for r in recs] == [2, 0, 2]
        assert recs[1].reason == "client_error" and "must be lists" in recs[1].error
        assert conns[1].closed and not conns[0].closed and not conns[2].closed
        assert (recs[0].reason, recs[2].reason) == ("", "")


def test_a_drain_that_fails_fails_every_request_of_its_pool(
    loop: asyncio.AbstractEventLoop, listener: socket.socket, fast: Any
) -> None:
    """The drain itself raising (out of memory, in effect) leaves no read of the wave to
    trust: every request of the pool fails as client_error, with the reason, and every
    connection closes, so the loop does not call a failing drain again and again."""
    with _pool_of(loop, listener, 2) as (pool, conns, servers, recs):

        def broken(*args: Any) -> Any:
            raise MemoryError("no room")

        pool.fast = broken
        servers[0].sendall(b"%x\r\n%s\r\n" % (len(_token()), _token()))
        time.sleep(0.02)
        pool._drain()
        assert [(r.reason, r.error) for r in recs] == [("client_error", "MemoryError: no room")] * 2
        assert all(c.closed for c in conns) and not pool.by_fd


def test_the_c_path_stamps_a_read_with_the_kernel_s_arrival(
    loop: asyncio.AbstractEventLoop, listener: socket.socket, fast: Any
) -> None:
    """A read done by the C path carries the kernel's stamp of the segment, on perf_counter's
    clock: before the read returned, after it was sent, and the same as the Python path's
    ReadClock.arrival gives for a twin segment sent at the same moment; the read's delay is
    counted as the Python path counts its own, and the request's last read is now."""
    with _pool_of(loop, listener, 1) as (pool, conns, servers, recs):
        c = socket.create_connection(listener.getsockname())
        s, _ = listener.accept()
        try:
            c.setblocking(False)
            rxtime.enable(c)
            pool.clock.start()
            flight = conns[0].flight = Flight(None, 0.0)  # type: ignore[arg-type]
            msg = b"%x\r\n%s\r\n" % (len(_token()), _token())
            sent = time.perf_counter()
            for server in (servers[0], s):
                server.sendall(msg)
            time.sleep(0.05)  # read 50 ms after arrival: a loop-time stamp would be that late
            seen = pool.seen = []
            pool._drain()
            py_n, anc, _, _ = c.recvmsg_into([bytearray(1 << 16)], rxtime.ANC_SPACE)
            py_ts = pool.clock.arrival(anc, time.perf_counter())
        finally:
            c.close()
            s.close()
    assert len(seen) == 1 and py_n == len(msg)
    data, ts, now, taken = seen[0]
    assert (data, taken) == (msg, len(msg))
    assert sent <= ts < sent + 0.02 < now and ts <= now
    assert abs(ts - py_ts) < 0.005
    assert recs[0].ttft == ts and recs[0].chunks == 1
    assert flight.last == now  # the request's idle deadline sees the read
    delays, reads, unstamped = pool.clock.stop()
    assert (reads, unstamped) == (2, 0) and delays[0] == pytest.approx(now - ts, abs=1e-9)


def test_the_c_path_reports_the_peer_closing_and_a_reset(
    loop: asyncio.AbstractEventLoop, listener: socket.socket, fast: Any
) -> None:
    """EOF and ECONNRESET read by the C path end the request as the Python path does:
    disconnect, with the reason; the connection leaves the pool's epoll set."""
    for how in ("close", "reset"):
        with _pool_of(loop, listener, 1) as (pool, conns, servers, recs):
            conn, server = conns[0], servers[0]
            if how == "reset":  # RST on close: SO_LINGER with a zero timeout
                server.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            server.close()
            time.sleep(0.01)
            pool._drain()
            assert conn.closed and conn.ex is None and not pool.by_fd, how
            assert recs[0].reason == "disconnect", (how, recs[0].reason, recs[0].error)
            assert ("Reset" in recs[0].error) == (how == "reset")


def test_proctor_fastread_0_keeps_every_read_in_python(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(fasthttp.FASTREAD_ENV, "0")
    assert fasthttp.Pool(BenchConfig(base_url="http://127.0.0.1:9")).fast is None
    monkeypatch.delenv(fasthttp.FASTREAD_ENV)
    assert fasthttp.Pool(BenchConfig(base_url="http://127.0.0.1:9")).fast is not None


@pytest.mark.parametrize("setting", ["", "0"])
@pytest.mark.parametrize("rate", [math.inf, 400.0])
@pytest.mark.parametrize("event_loop", ["uvloop", "asyncio"])
def test_a_bench_reads_its_tokens_in_c_and_says_so(
    setting: str, rate: float, event_loop: str, fast: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A whole bench against emu.c (tokens 2 ms apart), closed loop and paced, on either event
    loop (the pool's epoll set is one more file descriptor in the loop's own): every record
    complete, the same with the C path and without it (PROCTOR_FASTREAD=0), the tokens read in
    C where it is on, and metrics.json's client says which path read."""
    monkeypatch.setenv(fasthttp.FASTREAD_ENV, setting)
    monkeypatch.setenv(loop_env, event_loop)
    assert loop_name() == event_loop
    in_c = 0  # tokens taken in C

    def counted(*args: Any) -> Any:
        nonlocal in_c
        seen: list[tuple[bytes, float, float, int]] = []
        got = fast(*args[:5], seen)
        in_c += sum(data[:taken].count(b"data: ") for data, _, _, taken in seen)
        return got

    monkeypatch.setattr(fasthttp, "_drain", counted)
    with start_emulator(procs=1, ttft_ms=2.0, itl_ms=2.0) as emu:
        assert emu.kind == "c"
        cfg = BenchConfig(
            base_url=emu.base_url, model="emulator", tokenizer_mode="approx", isl=8, osl=16,
            range_ratio=0.0, progress=False, log_every_s=0, concurrency=8, num_prompts=32,
            num_warmups=0, request_rate=rate,
        )  # fmt: skip
        res = run_benchmark(cfg)
    # most tokens read in C where it is on (a response's first token shares the read of its
    # head, the Python path's, and more with it when the loop is late), none where it is off
    assert in_c >= 32 * 8 if setting == "" else in_c == 0
    assert res.metrics.completed == 32 and res.metrics.failed == 0
    for r in res.measured:
        assert (r.chunks, r.output_tokens, len(r.itl), r.saw_done) == (16, 16, 15, True)
        assert 0.0015 < r.ttft < 0.1 and all(g >= 0 for g in r.itl)
    assert res.client is not None
    assert res.client["reader"] == ("Python" if setting == "0" else "C")
    # the reads the C path stamped are counted as the Python path counts its own
    timing = res.client["timing"]
    assert timing["token_clock"] == rxtime.CLOCK and timing["unstamped_reads"] == 0
    # 16 tokens 2 ms apart: a read each, fewer when a loaded machine's loop reads late and
    # finds two merged; ~32 (the heads alone) if the C path's reads went uncounted
    assert timing["reads"] >= 32 * 4


@pytest.mark.parametrize(
    ("chat", "msg"),
    [(False, m) for m in MESSAGES] + [(True, m) for m in CHAT_MESSAGES],
)
def test_each_message_read_alone_gives_the_python_path_s_record(
    loop: asyncio.AbstractEventLoop, listener: socket.socket, fast: Any, chat: bool, msg: bytes
) -> None:
    """Every shape, in a read of its own before a token and after one (the property tests
    above draw them at random; this one meets each for sure)."""
    tok = _delta({"content": " t"}) if chat else _token()
    reads = [HEAD] + [b"%x\r\n%s\r\n" % (len(m), m) for m in (msg, tok, msg, tok)]
    got_c, got_py, _ = _both(loop, listener, fast, reads, chat=chat)
    assert got_c == got_py

"""The raw client's short path for whole chunks (fasthttp.Conn._whole_chunks) leaves the same
record as the chunk decoder's whole way, however the response's bytes were cut into reads."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proctor.workloads.loadgen import fasthttp
from proctor.workloads.loadgen.records import RequestRecord
from proctor.workloads.loadgen.sse import StreamState
from tests.workloads.bare_conn import bare_conn

HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
TOKEN = b'data: {"choices":[{"index":0,"text":" t"}]}\n\n'
# Messages a stream may carry: tokens mostly, and each thing that ends or fails a request.
MESSAGES = [
    TOKEN,
    TOKEN,
    TOKEN,
    b'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}\n\n',
    b"data: [DONE]\n\n",
    b": keep-alive\n\n",
    b"data: {not json\n\n",
    b'data: {"error":{"message":"boom"}}\n\n',
    b'data: {"choices":[{"index":0,"text":"x","finish_reason":"abort"}]}\n\n',
]


@pytest.fixture(scope="module")
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    lp = asyncio.new_event_loop()
    yield lp
    lp.close()


def _read(
    loop: asyncio.AbstractEventLoop, reads: list[bytes], short: bool
) -> tuple[str, dict[str, Any], list[str], bool, bool | None]:
    """Every read handed to a Conn as _readable hands it: the short path where it applies
    (`short`), else the whole way; the record and the outcome."""
    conn = bare_conn()
    rec = RequestRecord(index=0, prompt_len=1, expected_output_len=8)
    ex = fasthttp._Exchange(rec, StreamState(rec, False, 0.0), loop.create_future())
    conn.ex = ex
    for i, data in enumerate(reads):
        if ex.outcome:
            break
        ts = 1.0 + i
        if short and conn.between and conn.ex is not None and not ex.outcome:
            conn._whole_chunks(ex, data, ts, ts)
        else:
            conn.data_received(data, ts, ts)
    # where the reading stands: only for a connection still open (a closed one is spent)
    between = None if conn.closed else conn.between
    return ex.outcome, rec.to_dict(), ex.state.pieces, conn.closed, between


@st.composite
def _response(draw: st.DrawFn) -> tuple[list[bytes], bool]:
    """One chunked response as its reads. The messages are cut into chunks anywhere (a chunk
    a server write), and a read holds whole writes, mostly (a read of whole chunks is the
    short path's), or is cut anywhere in one, in its size line or its CRLF too. And whether
    every chunk's framing is right (a signed size, "0x", a stray CRLF at the end are not)."""
    body = b"".join(draw(st.lists(st.sampled_from(MESSAGES), min_size=1, max_size=8)))
    cuts = sorted(set(draw(st.lists(st.integers(1, len(body) - 1), max_size=10))))
    pieces = [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)], strict=True)]
    writes = [HEAD]
    for piece in pieces:
        ext = draw(st.sampled_from([b"", b"", b";x=1"]))
        writes.append(b"%x%s\r\n%s\r\n" % (len(piece), ext, piece))
    writes.append(draw(st.sampled_from([b"0\r\n\r\n", b"0\r\nX-T: y\r\n\r\n", b""])))
    # one in four: the framing spoiled once (a signed size, "0x", a stray CRLF at the end)
    framed = draw(st.sampled_from([True, True, True, False]))
    if not framed:
        k = draw(st.integers(1, len(writes) - 1))
        spoil = draw(st.sampled_from([b"-", b"0x", b"\r\n"]))
        writes[k] = spoil + writes[k] if k < len(writes) - 1 else b"\r\n"
    reads: list[bytes] = []
    for write in writes:
        how = draw(st.sampled_from(["alone", "alone", "with the last", "cut"]))
        if how == "with the last" and reads:
            reads[-1] += write
        elif how == "cut" and len(write) > 1:
            at = draw(st.sampled_from([len(write) - 1, len(write) - 2, 1, 2]))
            at = draw(st.sampled_from([at, draw(st.integers(1, len(write) - 1))]))
            reads += [write[:at], write[at:]]
        elif write:
            reads.append(write)
    return reads, framed


@settings(max_examples=400, deadline=None)
@given(_response())
def test_whole_chunks_read_the_short_way_give_the_record_of_the_whole_way(
    loop: asyncio.AbstractEventLoop, response: tuple[list[bytes], bool]
) -> None:
    reads, framed = response
    short, whole = _read(loop, reads, short=True), _read(loop, reads, short=False)
    if framed:
        assert short == whole
    else:
        # Both failed and closed; not always the same way. A read of whole chunks and then a
        # bad size line: the short path takes the chunks before it (their tokens, or a bad
        # message's malformed_sse, first in stream order), where the whole way decodes the
        # read's chunks before parsing any and says the bad line (client_error). A failed
        # request's times are not measured.
        assert short[0] not in ("", "done") and whole[0] not in ("", "done")
        assert short[3] and whole[3]


def test_a_read_of_many_whole_chunks_takes_the_short_path(
    loop: asyncio.AbstractEventLoop, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The test above would pass with no short path: this one fails without it (the chunk
    decoder is never asked for a read of whole token chunks)."""
    chunk = b"%x\r\n%s\r\n" % (len(TOKEN), TOKEN)

    def decoder(self: fasthttp.Conn, data: bytes) -> tuple[bytes, bool]:
        raise AssertionError("the chunk decoder read whole chunks")

    monkeypatch.setattr(fasthttp.Conn, "_dechunk", decoder)
    outcome, rec, *_ = _read(loop, [HEAD, chunk * 3, chunk, chunk * 2], short=True)
    assert (outcome, rec["chunks"], rec["itl"]) == ("", 6, [0.0, 0.0, 1.0, 1.0, 0.0])


def test_a_response_s_last_read_ends_it_without_the_chunk_decoder(
    loop: asyncio.AbstractEventLoop, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Usage, [DONE] and the last chunk in one read (how emu.c and vLLM end a stream): the
    response ends from the short path; before, the last chunk went through the decoder."""

    def chunk(payload: bytes) -> bytes:
        return b"%x\r\n%s\r\n" % (len(payload), payload)

    def decoder(self: fasthttp.Conn, data: bytes) -> tuple[bytes, bool]:
        raise AssertionError(f"the chunk decoder read {data!r}")

    monkeypatch.setattr(fasthttp.Conn, "_dechunk", decoder)
    last = chunk(MESSAGES[3]) + chunk(MESSAGES[4]) + b"0\r\n\r\n"
    outcome, rec, pieces, closed, _ = _read(loop, [HEAD, chunk(TOKEN), last], short=True)
    assert (outcome, rec["chunks"], rec["saw_done"], pieces, closed) == (
        "done",
        1,
        True,
        [" t"],
        False,
    )

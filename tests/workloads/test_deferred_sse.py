"""The raw client parses a stream when it ends (sse.StreamState.hold / flush), not read by
read (feed): the records must be the same, field for field, however the bytes were split into
reads, whatever the stream said (tokens, several in one read, role-only chat openers, usage,
comments, CR line ends, error objects, finish_reason abort, bad JSON) and wherever it failed."""

from __future__ import annotations

from itertools import pairwise
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from proctor.workloads.loadgen.records import RequestRecord
from proctor.workloads.loadgen.sse import HOLD_READS, Malformed, StreamState

MESSAGES = [
    b'data: {"choices":[{"index":0,"text":" tok"}]}',
    b'data: {"choices":[{"index":0,"text":""}]}',
    b'data: {"choices":[{"index":0,"text":"an error in the text"}]}',
    b'data: {"choices":[{"index":0,"text":"abort"}]}',
    b'data: {"choices":[{"index":0,"delta":{"content":" hi"}}]}',
    b'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}',
    b'data: {"choices":[{"index":0,"delta":{"reasoning_content":"hm"}}]}',
    b'data: {"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":3}}',
    b'data: {"choices":[{"index":0,"text":"x","finish_reason":"length"}],"usage":null}',
    b": keep-alive",
    b"event: message",
    b"data: [DONE]",
    b'data: {"error":{"message":"boom"}}',
    b'data: {"object":"error","message":"gone"}',
    b'data: {"choices":[{"index":0,"text":"","finish_reason":"abort"}]}',
    b'data: {"choices":[{"index":0,"text":"a","finish_reason":"error"}],"usage":{"prompt_tokens":9}}',
    b"data: {not json",
    b"data: [1, 2]",
    b'data: {"choices":[],"usage":{"completion_tokens":1.5}}',
    b'data: {"choices":{"0":1}}',
]
COMMON = [0, 0, 0, 0, 4, 4, 7, 9, 11]  # weights towards what servers send most


@st.composite
def streams(draw: st.DrawFn) -> tuple[bool, tuple[int, int], list[bytes]]:
    """(chat, the request's index and max_tokens (they pick when hold() parses), the reads
    of one response body)."""
    chat = draw(st.booleans())
    index = (draw(st.integers(0, 40)), draw(st.integers(1, 60)))
    pick = st.one_of(st.sampled_from(COMMON), st.integers(0, len(MESSAGES) - 1))
    n = draw(st.integers(0, 12))
    seps = st.sampled_from([b"\n\n", b"\n\n", b"\n\n", b"\n\n\n", b"\r\n\r\n", b"\r\r", b"\n"])
    body = b"".join(MESSAGES[draw(pick)] + draw(seps) for _ in range(n))
    cuts = sorted(draw(st.sets(st.integers(1, max(1, len(body) - 1)), max_size=20)))
    reads = [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)], strict=True)]
    return chat, index, [r for r in reads if r]


def run(chat: bool, index: tuple[int, int], reads: list[bytes], deferred: bool) -> dict[str, Any]:
    rec = RequestRecord(index=index[0], prompt_len=7, expected_output_len=index[1])
    state = StreamState(rec, chat, 0.25)
    said_failed, error = False, ""
    ts = 1.0
    try:
        for i, data in enumerate(reads):
            ts = 1.0 + 0.01 * i
            if state.hold(data, ts) if deferred else state.feed(data, ts):
                said_failed = True
                break
        else:
            if deferred:
                said_failed = state.flush()
            said_failed = said_failed or state.eof(ts)
    except Malformed as e:
        error = str(e)
    if not said_failed and not error:
        state.finish(None)
    return {"record": rec.to_dict(), "failed": said_failed, "malformed": error}


@settings(max_examples=400, deadline=None)
@given(streams())
def test_parsing_at_the_end_gives_the_records_of_parsing_each_read(
    stream: tuple[bool, tuple[int, int], list[bytes]],
) -> None:
    chat, index, reads = stream
    assert run(chat, index, reads, deferred=True) == run(chat, index, reads, deferred=False)


def test_tokens_that_shared_a_read_keep_that_reads_time() -> None:
    """The kernel merged two tokens into one read: both get its stamp (ITL 0), and every
    message keeps the time of the read that completed it."""
    tok = b'data: {"choices":[{"index":0,"text":"t"}]}\n\n'
    reads = [tok, tok + tok, tok[:10], tok[10:] + tok[:-1], b"\n" + b"data: [DONE]\n\n"]
    rec = RequestRecord(index=15, prompt_len=1, expected_output_len=100)  # first parse: 16 reads
    state = StreamState(rec, False, 0.5)
    for i, data in enumerate(reads):
        assert not state.hold(data, 1.0 + i)
    assert rec.chunks == 0  # nothing parsed yet: held
    assert not state.flush() and not state.eof(9.0)
    assert rec.ttft == 0.5
    assert rec.itl == [1.0, 0.0, 2.0, 1.0]  # read 1 held two tokens; 3 and 4 ended one each
    assert rec.chunks == 5 and rec.saw_done


def test_a_stream_that_says_it_failed_ends_at_that_read() -> None:
    """hold() parses at once a read that may say the request failed: the request ends there,
    as with feed(), not when the server closes the stream (which it may never do)."""
    tok = b'data: {"choices":[{"index":0,"text":"t"}]}\n\n'
    rec = RequestRecord(index=15, prompt_len=1, expected_output_len=100)
    state = StreamState(rec, False, 0.0)
    assert not state.hold(tok, 1.0)
    assert rec.chunks == 0
    assert state.hold(b'data: {"error":{"message":"overloaded"}}\n\n', 2.0)
    assert rec.reason == "http_error" and "overloaded" in rec.error
    assert rec.chunks == 1 and rec.ttft == 1.0  # the token before it counts


def test_streams_parse_every_hold_reads_reads_starting_at_different_reads() -> None:
    """Parsing is batched (HOLD_READS reads) but never all at once: a stream's first parse
    comes after 1 to HOLD_READS reads, picked by its index, so streams running in step (a
    closed loop started at once) do not all parse in the same round."""
    tok = b'data: {"choices":[{"index":0,"text":"t"}]}\n\n'
    first = []
    for index in range(HOLD_READS):
        rec = RequestRecord(index=index, prompt_len=1, expected_output_len=1000)
        state = StreamState(rec, False, 0.0)
        parsed_at = []
        for i in range(3 * HOLD_READS):
            state.hold(tok, 1.0 + i)
            if rec.chunks and (not parsed_at or rec.chunks != parsed_at[-1][1]):
                parsed_at.append((i + 1, rec.chunks))
        first.append(parsed_at[0][0])
        # after the first, one parse every HOLD_READS reads, each of the reads since
        gaps = {b[0] - a[0] for a, b in pairwise(parsed_at)}
        assert gaps == {HOLD_READS}
        assert rec.itl == [1.0] * (rec.chunks - 1)
    assert sorted(first) == list(range(1, HOLD_READS + 1))


def test_a_stream_leaves_nothing_held_for_its_end() -> None:
    """Towards max_tokens the batches shrink, so when the last token's read comes nothing is
    held: the stream's end parses that read alone, as feed() did (streams that end together
    then cost no more at their end than before)."""
    tok = b'data: {"choices":[{"index":0,"text":"t"}]}\n\n'
    for n in (1, 2, 5, 64, 300):
        for index in range(HOLD_READS):
            rec = RequestRecord(index=index, prompt_len=1, expected_output_len=n)
            state = StreamState(rec, False, 0.0)
            for i in range(n - 1):
                state.hold(tok, 1.0 + i)
            assert not state.held, (n, index)
            assert rec.chunks == n - 1


def test_a_refused_message_with_usage_counts_the_same_however_it_was_read() -> None:
    """finish_reason "error" with a usage block: the request fails as aborted and the
    message's usage is not taken, whether it came alone in a read (parsed one by one) or with
    another message (parsed as a batch). The batch took it (main before s9)."""
    tok = b'data: {"choices":[{"index":0,"text":"t"}]}\n\n'
    bad = (
        b'data: {"choices":[{"index":0,"text":"a","finish_reason":"error"}],'
        b'"usage":{"prompt_tokens":9,"completion_tokens":2}}\n\n'
    )
    got = []
    for reads in ([tok, bad], [tok + bad]):
        rec = RequestRecord(index=0, prompt_len=1, expected_output_len=9)
        state = StreamState(rec, False, 0.0)
        assert any(state.feed(d, 1.0 + i) for i, d in enumerate(reads))
        got.append((rec.reason, rec.prompt_tokens, state.usage_tokens, rec.chunks))
    assert got[0] == got[1] == ("aborted", None, None, 1)

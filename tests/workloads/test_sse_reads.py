"""The SSE side gives the same record however a response's bytes were split into reads."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proctor.workloads.loadgen.records import RequestRecord
from proctor.workloads.loadgen.sse import (
    _NO_USAGE,
    StreamState,
    _common_text,
    _failed_finish,
    _is_error,
    message_parts,
)


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


# One message per read, of every shape a server (or an adversary) may send: the common token
# message takes feed's short path, the rest the whole way (_feed). Both must agree exactly.
# Each message is the common one with at most one part changed, so every check of the short
# path meets the message that would fool it without that check.
_CHANGES = [
    "none",
    "text",
    "finish",
    "no content",
    "role",
    "reasoning_content",
    "reasoning",
    "delta list",
    "choices",
    "usage",
    "usage null",
    "error",
    "body",
    "end",
]


@st.composite
def _object(draw: st.DrawFn, chat: bool, change: str) -> dict[str, object]:
    """The common token message's object with the part `change` names changed."""
    text = draw(
        st.one_of(st.text(max_size=3), st.none(), st.integers(), st.lists(st.none()))
        if change == "text"
        else st.sampled_from(["", " t"])
    )
    finish = draw(
        st.one_of(st.sampled_from(["abort", "error", "stop"]), st.lists(st.text(max_size=2)))
        if change == "finish"
        else st.sampled_from([None, "length"])
    )
    first: dict[str, object] = {"index": 0, "finish_reason": finish}
    if chat:
        delta: dict[str, object] = {} if change == "no content" else {"content": text}
        if change in ("role", "no content"):
            delta["role"] = "assistant"
        if change in ("reasoning_content", "reasoning"):
            delta[change] = draw(st.sampled_from(["", "r", None]))
        first["delta"] = [delta] if change == "delta list" else delta
    else:
        first["text"] = text
    choices = draw(st.sampled_from([[], "c", [1]])) if change == "choices" else [first]
    obj: dict[str, object] = {"id": "x", "choices": choices}
    if change == "usage":
        obj["usage"] = {"completion_tokens": draw(st.integers(-1, 3)), "prompt_tokens": 2}
    if change == "usage null":  # every chunk but the last, where include_usage is asked
        obj["usage"] = None
    if change == "error":
        obj["error"] = {"message": "boom"}
    return obj


@st.composite
def _message(draw: st.DrawFn, chat: bool) -> bytes:
    change = draw(st.sampled_from(_CHANGES))
    body = json.dumps(draw(_object(chat, change))).encode()
    if change == "body":
        body = draw(st.sampled_from([body[:-1], b"[DONE]", b"[1]", body + b" ", body + b"\nid: 1"]))
    end = (
        draw(st.sampled_from([b"\r\n\r\n", b"\n", b"\n\n\n", b"\r", b"\r\r\n\n"]))
        if change == "end"
        else b"\n\n"
    )
    return b"data: " + body + end


def _outcome(state: StreamState, reads: list[bytes], whole_way: bool) -> tuple[object, ...]:
    feed = state._feed if whole_way else state.feed
    said: list[object] = []
    for i, data in enumerate(reads):
        try:
            said.append(feed(data, 1.0 + i))
        except Exception as e:  # the same failure, however it was read
            said.append(f"{type(e).__name__}: {e}")
            break
    rec = state.record
    return (
        said,
        rec.to_dict(),
        state.pieces,
        state.got_first,
        state.last,
        state.usage_tokens,
        state.tail,
        state.cr,
    )


@settings(max_examples=500, deadline=None)
@given(st.data())
def test_the_short_path_of_feed_gives_what_the_whole_way_gives(data: st.DataObject) -> None:
    chat = data.draw(st.booleans())
    reads = data.draw(st.lists(_message(chat), min_size=1, max_size=6))
    got = []
    for whole_way in (False, True):
        rec = RequestRecord(index=0, prompt_len=1, expected_output_len=4)
        got.append(_outcome(StreamState(rec, chat, 0.0), reads, whole_way))
    assert got[0] == got[1]


@settings(max_examples=500, deadline=None)
@given(st.data())
def test_what_the_short_cut_takes_the_full_check_gives_the_same(data: st.DataObject) -> None:
    """_common_text is a short cut of message_parts: where it gives a text, the full check of
    every shape gives that text with no usage, and the message is no error and no failed
    finish. The test above compares two paths that both begin with _common_text, so it cannot
    see a short cut that takes too much; this one holds it to message_parts."""
    chat = data.draw(st.booleans())
    obj = data.draw(_object(chat, data.draw(st.sampled_from(_CHANGES))))
    text = _common_text(obj, chat)
    if text is not None:
        assert message_parts(obj, chat) == (text, _NO_USAGE)
        assert not _is_error(obj) and _failed_finish(obj) is None


def test_a_token_chunk_with_usage_null_takes_the_short_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With stream_options.include_usage (proctor always asks for it), OpenAI's API puts
    "usage": null in every chunk but the last, and servers that follow it do the same; such
    token chunks went the whole way, for nothing (~1 us more each). Fails without the change."""
    rec = RequestRecord(index=0, prompt_len=1, expected_output_len=4)
    state = StreamState(rec, False, 0.0)

    def whole_way(self: StreamState, obj: object, body: bytes, ts: float) -> bool:
        raise AssertionError("the token message went the whole way")

    monkeypatch.setattr(StreamState, "_one", whole_way)
    msg = (
        b'data: {"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":'
        b'[{"index":0,"text":" t","logprobs":null,"finish_reason":null}],"usage":null}\n\n'
    )
    for i in range(3):
        assert not state.feed(msg, 1.0 + i)
    assert (rec.chunks, rec.ttft, rec.itl, state.pieces) == (3, 1.0, [1.0, 1.0], [" t"] * 3)


def test_the_common_token_message_takes_the_short_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """The test above would pass with no short path at all: this one fails without it."""
    rec = RequestRecord(index=0, prompt_len=1, expected_output_len=4)
    state = StreamState(rec, False, 0.0)

    def whole_way(self: StreamState, data: bytes, ts: float) -> bool:
        raise AssertionError("the common message went the whole way")

    monkeypatch.setattr(StreamState, "_feed", whole_way)
    for i in range(3):
        assert not state.feed(b'data: {"choices":[{"index":0,"text":"t"}]}\n\n', 1.0 + i)
    assert (rec.chunks, rec.ttft, rec.itl) == (3, 1.0, [1.0, 1.0])


def test_a_finish_reason_that_is_not_a_string_is_no_failure_and_no_crash() -> None:
    """A list for finish_reason raised TypeError (unhashable) in the membership test, and the
    request failed as client_error; only a string can name a failure."""
    rec = RequestRecord(index=0, prompt_len=1, expected_output_len=4)
    state = StreamState(rec, False, 0.0)
    msg = b'data: {"choices":[{"index":0,"text":"t","finish_reason":["error"]}]}\n\n'
    assert not state.feed(msg + msg, 1.0)  # two in a read: the batch parse
    assert not state.feed(msg, 2.0)
    assert (rec.chunks, rec.reason) == (3, "")


def test_a_response_s_usage_and_done_messages_skip_the_whole_way(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The property test above would pass if they went the whole way: this one fails then. A
    usage message is taken from feed's one parse, [DONE] by its bytes (half of a response's
    last read went to them, bench/NOTES.md *Reads before new requests*)."""
    rec = RequestRecord(index=0, prompt_len=1, expected_output_len=4)
    state = StreamState(rec, False, 0.0)

    def whole_way(self: StreamState, data: bytes, ts: float) -> bool:
        raise AssertionError(f"{data!r} went the whole way")

    monkeypatch.setattr(StreamState, "_feed", whole_way)
    assert not state.feed(b'data: {"choices":[{"index":0,"text":"t"}]}\n\n', 1.0)
    usage = b'{"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":1}}'
    assert not state.feed(b"data: " + usage + b"\n\n", 2.0)
    assert not state.feed(b"data: [DONE]\n\n", 2.0)
    assert (state.usage_tokens, rec.prompt_tokens, rec.saw_done, rec.chunks) == (1, 7, True, 1)
    # an error object alone in a read: the request fails, from the same one parse
    assert state.feed(b'data: {"error":{"message":"boom"}}\n\n', 3.0)
    assert rec.reason == "http_error" and "boom" in rec.error

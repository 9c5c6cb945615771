"""The C read path's scan of the common token message (`_fastread.scan`) against the parser it
stands in for: where the scan takes a message, sse.loads (orjson) and the standard library's
json.loads both read it, and sse._common_text gives the same text (and, in a chat stream, the
same role-only opener); where it does not, the parser is asked, as before. The scan may pass
anything to the parser, but it must take what the servers send (a scan that never took
would pass the first law alone)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proctor.workloads.loadgen import sse


@pytest.fixture(scope="module")
def scan(fastread: Any) -> Any:
    return fastread.scan


def _oracle(body: bytes, chat: bool) -> tuple[str, bool] | str | None:
    """What the Python path makes of the message: (text, role-only opener possible), None for
    a message that is not the common one, "invalid" where the parser refuses it."""
    try:
        obj = sse.loads(body)
    except Exception:
        return "invalid"
    if type(obj) is not dict:
        return None
    text = sse._common_text(obj, chat)
    if text is None:
        return None
    return text, chat and "role" in obj["choices"][0]["delta"]


def _law(scan: Any, body: bytes, chat: bool) -> Any:
    got = scan(body, chat)
    if got is not None:
        assert _oracle(body, chat) == got, body
        # the standard library's parser (sse.loads without orjson) reads it the same way
        assert sse._common_text(json.loads(body), chat) == got[0], body
    return got


# What servers send, from their streams: each must be taken, with this text.
SERVED = [
    # vLLM completions
    (
        b'{"id":"cmpl-1","object":"text_completion","created":1733000000,"model":"m",'
        b'"choices":[{"index":0,"text":" the","logprobs":null,"finish_reason":null,'
        b'"stop_reason":null}],"usage":null}',
        False,
        (" the", False),
    ),
    # vLLM completions, the last token
    (
        b'{"id":"cmpl-1","object":"text_completion","created":1733000000,"model":"m",'
        b'"choices":[{"index":0,"text":".","logprobs":null,"finish_reason":"length",'
        b'"stop_reason":null}],"usage":null}',
        False,
        (".", False),
    ),
    # vLLM chat: the role-only opener, then a token
    (
        b'{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1733000000,'
        b'"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},'
        b'"logprobs":null,"finish_reason":null}],"usage":null}',
        True,
        ("", True),
    ),
    (
        b'{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1733000000,'
        b'"model":"m","choices":[{"index":0,"delta":{"content":" Hi"},"logprobs":null,'
        b'"finish_reason":null}],"usage":null}',
        True,
        (" Hi", False),
    ),
    # SGLang (spaces after separators, as Python's json.dumps writes them)
    (
        b'{"id": "a1", "object": "text_completion", "created": 1733000000, "model": "m", '
        b'"choices": [{"index": 0, "text": " of", "logprobs": null, "finish_reason": null, '
        b'"matched_stop": null}], "usage": null}',
        False,
        (" of", False),
    ),
    # emu.c
    (
        b'{"id":"emu","object":"text_completion","model":"emulator","choices":[{"index":0,'
        b'"text":" tok","logprobs":null,"finish_reason":null}]}',
        False,
        (" tok", False),
    ),
]


@pytest.mark.parametrize(("body", "chat", "want"), SERVED)
def test_what_servers_send_is_taken_with_the_parser_s_text(
    scan: Any, body: bytes, chat: bool, want: tuple[str, bool]
) -> None:
    assert _law(scan, body, chat) == want


# Each is asked of the parser: escapes, bytes over 0x7f, floats, a key _common_text reads
# twice (the parser keeps the last), a failed finish, a usage, no choices, not an object, bad.
ASKED = [
    b'{"choices":[{"index":0,"text":"a\\nb"}]}',
    b'{"choices":[{"index":0,"text":"\xc3\xa9"}]}',
    b'{"choices":[{"index":0,"text":"a"}],"t":1.5}',
    b'{"choices":[{"index":0,"text":"a","text":"b"}]}',
    b'{"choices":[{"index":0,"text":"a"}],"usage":{"a":1},"usage":null}',
    b'{"choices":[{"index":0,"text":"a","finish_reason":"abort"}]}',
    b'{"choices":[{"index":0,"text":"a","finish_reason":"error"}]}',
    b'{"choices":[{"index":0,"text":"a","finish_reason":3}]}',
    b'{"choices":[{"index":0,"text":"a"}],"usage":{"prompt_tokens":1}}',
    b'{"choices":[]}',
    b'{"choices":[1]}',
    b'{"choices":{"text":"a"}}',
    b'[{"choices":[{"text":"a"}]}]',
    b'{"choices":[{"text":null}]}',
    b'{"choices":[{"text":"a"}],}',
    b'{"choices":[{"text":"a"}]} x',
    b'{"choices":[{"text":"a"}],"n":01}',
    b'{"choices":[{"text":"a"}],"n":NaN}',
    b'{"choices":[{"text":"a"}],"n":12345678901234567890}',
    b'{"choices":[{"text":"a\x01"}]}',
    b'{"choices":[{"text":"a"}]',
    b'{"choices":[{"text":"a"}],"x":' + b"[" * 40 + b"]" * 40 + b"}",
]


@pytest.mark.parametrize("body", ASKED)
def test_what_only_the_parser_may_decide_is_asked_of_it(scan: Any, body: bytes) -> None:
    assert scan(body, False) is None


@pytest.mark.parametrize(
    "body",
    [
        b'{"choices":[{"delta":{"content":"a","reasoning_content":"r"}}]}',
        b'{"choices":[{"delta":{"content":"a","reasoning":"r"}}]}',
        b'{"choices":[{"delta":"a"}]}',
        b'{"choices":[{"delta":{"content":null,"role":"assistant"}}]}',
        b'{"choices":[{"delta":{"content":"a"},"delta":null}]}',  # the parser keeps the last
        b'{"choices":[{"delta":{"content":"a"}}],"choices":[{"index":0}]}',
        b'{"choices":[{"text":"a"}]}',  # a completions message in a chat stream
    ],
)
def test_a_chat_delta_that_is_not_the_common_one_is_asked_of_the_parser(
    scan: Any, body: bytes
) -> None:
    assert scan(body, True) is None


# ---------------------------------------------------------------- laws, hypothesis

_KEYS = ["choices", "usage", "text", "delta", "content", "role", "finish_reason",
         "reasoning", "reasoning_content", "index", "id", "logprobs", "x"]  # fmt: skip
_ASCII = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=6)
_ANY_TEXT = st.one_of(_ASCII, _ASCII, st.text(max_size=4))  # escapes, non-ASCII, controls
_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**17), 10**17),
    st.floats(allow_nan=False, allow_infinity=False),
    _ANY_TEXT,
    st.sampled_from(["stop", "length", "abort", "error", "assistant"]),
)


def _pairs(values: st.SearchStrategy[Any]) -> st.SearchStrategy[list[tuple[str, Any]]]:
    """An object as its members in order, a key sometimes twice."""
    return st.lists(st.tuples(st.sampled_from(_KEYS), values), max_size=5)


_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=3), _pairs(inner).map(lambda p: ("obj", p))),
    max_leaves=12,
)


@st.composite
def _message(draw: st.DrawFn) -> Any:
    """Mostly the shape of a token message (choices with a first choice, a chat delta), its
    members drawn from what _common_text reads and what it does not."""
    delta = ("obj", [*draw(_pairs(_VALUES)), ("content", draw(_ANY_TEXT))])
    first = draw(_pairs(_VALUES)) + draw(
        st.sampled_from([[("text", draw(_ANY_TEXT))], [("delta", delta)], []])
    )
    if draw(st.booleans()):
        first.append(("finish_reason", draw(_SCALARS)))
    rest = [("obj", draw(_pairs(_VALUES)))] if draw(st.booleans()) else []
    members = [*draw(_pairs(_VALUES)), ("choices", [("obj", first), *rest])]
    if draw(st.booleans()):
        members.append(("usage", draw(st.sampled_from([None, ("obj", [("a", 1)]), 0]))))
    return ("obj", draw(st.permutations(members)))


def _dump(value: Any, ws: str, ascii_only: bool) -> str:
    if isinstance(value, tuple) and value and value[0] == "obj":
        inner = f",{ws}".join(
            json.dumps(k) + f"{ws}:{ws}" + _dump(v, ws, ascii_only) for k, v in value[1]
        )
        return "{" + ws + inner + ws + "}"
    if isinstance(value, list):
        return "[" + f",{ws}".join(_dump(v, ws, ascii_only) for v in value) + "]"
    return json.dumps(value, ensure_ascii=ascii_only)


@st.composite
def _bodies(draw: st.DrawFn) -> bytes:
    """A message of any shape, or one as servers write it, with a byte dropped, doubled or
    changed now and then, or one of its members written twice."""
    if draw(st.booleans()):
        body = _dump(
            draw(_message()), draw(st.sampled_from(["", "", " ", "\t ", "\n"])), draw(st.booleans())
        ).encode()
    else:
        body = draw(_plain())[0]
        if draw(st.booleans()):  # a member of the message or its first choice twice
            key = draw(st.sampled_from([b'"choices":', b'"usage":', b'"text":', b'"delta":',
                                        b'"content":', b'"finish_reason":', b'"index":']))  # fmt: skip
            at = body.find(key)
            if at >= 0:  # before the member, so that the parser keeps the server's
                value = draw(st.sampled_from([b"null", b"1", b'"x"', b"{}", b'{"content":"y"}']))
                body = body[:at] + key + value + b"," + body[at:]
    if draw(st.integers(0, 3)) == 0 and body:  # a byte dropped, doubled or changed
        at = draw(st.integers(0, len(body) - 1))
        how = draw(st.sampled_from(["drop", "double", "change"]))
        b = body[at : at + 1]
        new = (
            b""
            if how == "drop"
            else b + b
            if how == "double"
            else bytes([draw(st.integers(0, 255))])
        )
        body = body[:at] + new + body[at + 1 :]
    return body


@settings(max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(body=_bodies(), chat=st.booleans())
def test_a_message_the_scan_takes_is_the_parser_s_common_message(
    scan: Any, body: bytes, chat: bool
) -> None:
    _law(scan, body, chat)


@st.composite
def _plain(draw: st.DrawFn) -> tuple[bytes, bool, str]:
    """A token message as a server writes it: ASCII text without escapes, integers, keys
    once; members in any order, any JSON whitespace."""
    chat = draw(st.booleans())
    text = draw(st.text(st.sampled_from("abc xyz.,!?-:/{}[]"), max_size=8))
    first: dict[str, Any] = {"index": draw(st.integers(0, 9)), "logprobs": None}
    if chat:
        first["delta"] = {"content": text}
    else:
        first["text"] = text
    first["finish_reason"] = draw(st.sampled_from([None, "stop", "length"]))
    msg: dict[str, Any] = {"id": "x-1", "created": draw(st.integers(0, 2**40)), "choices": [first]}
    if draw(st.booleans()):
        msg["usage"] = None
    keys = draw(st.permutations(list(msg)))
    ws = draw(st.sampled_from([(",", ":"), (", ", ": "), (" ,\t", " :\n")]))
    body = json.dumps({k: msg[k] for k in keys}, separators=ws).encode()
    return body, chat, text


@settings(max_examples=500, deadline=None)
@given(plain=_plain())
def test_a_token_message_as_servers_write_it_is_taken(
    scan: Any, plain: tuple[bytes, bool, str]
) -> None:
    body, chat, text = plain
    assert _law(scan, body, chat) == (text, False)

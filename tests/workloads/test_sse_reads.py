"""The SSE side gives the same record however a response's bytes were split into reads."""

from __future__ import annotations

from proctor.workloads.loadgen.records import RequestRecord
from proctor.workloads.loadgen.sse import StreamState


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

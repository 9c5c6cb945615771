"""ReadClock.note_all (the reads of one drain, counted at once) keeps what ReadClock.note
keeps read by read: the same read count, the same reads without a stamp, every delay while
nothing is thinned, and past the limit a thinned sample of the delays noted, between half the
limit and the limit.
The read-by-read clock is the oracle."""

from __future__ import annotations

from array import array

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proctor.workloads.loadgen import rxtime

# a read: its delay in seconds, or None for a read without a kernel stamp
_reads = st.lists(st.one_of(st.none(), st.floats(0.0, 0.05)), max_size=60)


def _batch(reads: list[float | None]) -> tuple[bytes, int]:
    delays = array("d", [0.0 if d is None else d for d in reads])
    return delays.tobytes(), sum(d is None for d in reads)


@settings(max_examples=300, deadline=None)
@given(batches=st.lists(_reads, max_size=12), max_samples=st.sampled_from([4, 7, 16, 1 << 18]))
def test_a_drain_s_reads_are_kept_as_one_by_one_reads_are(
    batches: list[list[float | None]], max_samples: int
) -> None:
    one, many = rxtime.ReadClock(), rxtime.ReadClock()
    one.start()
    many.start()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(rxtime, "MAX_SAMPLES", max_samples)
        for reads in batches:
            for d in reads:  # read at 1.0 + d, arrived at 1.0
                one.note(1.0 + (d or 0.0), 1.0, d is not None)
            many.note_all(*_batch(reads))
    (d1, r1, f1), (d2, r2, f2) = one.stop(), many.stop()
    assert (r2, f2) == (r1, f1) and r2 == sum(map(len, batches))
    if one.stride == 1:  # nothing thinned: every read's delay, in order
        assert many.stride == 1 and d2 == pytest.approx(d1)
    else:  # thinned: still at least half the limit's samples, each a delay noted
        assert many.stride > 1 and len(d2) >= max_samples // 2
        noted = {round(d or 0.0, 12) for reads in batches for d in reads}
        assert {round(d, 12) for d in d2} <= noted
    assert len(d2) < max_samples


def test_a_drain_s_reads_past_the_limit_are_thinned(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rxtime, "MAX_SAMPLES", 8)
    clock = rxtime.ReadClock()
    clock.start()
    clock.note_all(*_batch([0.001 * i for i in range(20)]))
    delays, reads, unstamped = clock.stop()
    assert (reads, unstamped) == (20, 0) and clock.stride == 4
    assert delays == pytest.approx([0.001 * i for i in range(0, 20, 4)])

"""The benches' emulator (bench/emulator): emu.c and its Python fallback speak the streaming
API as proctor's client reads it, completions and chat, usage last; and emu.c's raw load client
counts what it serves."""

from __future__ import annotations

import os
import shutil
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from proctor.workloads.loadgen.config import BenchConfig
from proctor.workloads.loadgen.runner import run_benchmark

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from emulator import measure_capacity, start_emulator

pytestmark = pytest.mark.timeout(120)


def _config(base_url: str, **changes: Any) -> BenchConfig:
    """A small bench against the emulator: 8-word prompts, 16 tokens each, no progress lines."""
    fields: dict[str, Any] = {
        "base_url": base_url,
        "model": "emulator",
        "tokenizer_mode": "approx",
        "isl": 8,
        "osl": 16,
        "range_ratio": 0.0,
        "progress": False,
        "log_every_s": 0,
    }
    return BenchConfig(**(fields | changes))


@pytest.mark.parametrize("python", [False, True], ids=["emu.c-or-fallback", "pyemu"])
@pytest.mark.parametrize("endpoint", ["completions", "chat"])
@pytest.mark.parametrize("itl_ms", [0.0, 2.0])
def test_the_emulator_streams_what_the_client_expects(
    python: bool, endpoint: str, itl_ms: float
) -> None:
    with start_emulator(procs=2, itl_ms=itl_ms, ttft_ms=itl_ms, force_python=python) as emu:
        assert emu.kind == ("python" if python else emu.kind)
        res = run_benchmark(
            _config(emu.base_url, endpoint=endpoint, concurrency=8, num_prompts=32, num_warmups=4)
        )
    assert res.metrics.completed == 32 and res.metrics.failed == 0
    for r in res.measured:
        assert (r.chunks, r.output_tokens, r.output_tokens_source) == (16, 16, "usage")
        assert r.saw_done and r.prompt_tokens == r.prompt_len and len(r.itl) == 15


def test_the_raw_load_client_counts_every_chunk() -> None:
    with start_emulator(procs=2) as emu:
        emu.delay_stats(reset=True)
        cap = measure_capacity(emu, concurrency=8, requests=200, osl=16, cores=None)
        own = emu.delay_stats()
    assert cap.chunks_s > 0 and cap.req_s > 0
    assert round(cap.chunks_s / cap.req_s) == 16  # every request's 16 chunks, nothing else
    if emu.kind == "c":  # its own delay, counted once per request over both processes
        assert own is not None and own["count"] == 200 and own["max_us"] >= own["p50_us"] >= 0


def test_emu_c_counts_the_tokens_it_wrote_late() -> None:
    """bench/timing_error.py's emulate%: every token emu.c writes is counted, and one written
    more than half a gap after its due time is counted late. Stopped for 80 ms once its tokens
    flow (SIGSTOP), the emulator must own up to the tokens it held back, and its GET
    /emu/late must put every one of them in the 10 ms bins of the stop, on the clock of the
    client's records (time.perf_counter: CLOCK_MONOTONIC)."""
    if shutil.which("cc") is None:
        pytest.skip("emu.c needs a C compiler (`cc`)")
    with start_emulator(procs=1, ttft_ms=5.0, itl_ms=5.0) as emu:
        assert emu.kind == "c"
        emu.delay_stats(reset=True)
        window: list[float] = []  # when the emulator was stopped, and when it went on

        def pause() -> None:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:  # once tokens flow, not at a fixed time
                now = emu.delay_stats()
                if now and now["tokens"] > 0:
                    break
                time.sleep(0.005)
            pids = emu.pids()
            window.append(time.perf_counter())
            for pid in pids:
                os.kill(pid, signal.SIGSTOP)
            time.sleep(0.08)
            for pid in pids:
                os.kill(pid, signal.SIGCONT)
            window.append(time.perf_counter())

        stop = threading.Thread(target=pause)
        stop.start()
        try:
            res = run_benchmark(
                _config(emu.base_url, osl=40, concurrency=4, num_prompts=8, num_warmups=0)
            )
        finally:
            stop.join()
        own = emu.delay_stats()
        late = emu.late_bins()
    assert res.metrics.completed == 8
    assert own is not None and own["tokens"] == 8 * 40
    assert 0 < own["tokens_late"] <= own["tokens"] and own["token_late_max_us"] >= 40_000
    assert late is not None and sum(late.values()) == own["tokens_late"]
    # Tokens due while it was stopped were late (others may be too, on a loaded machine): the
    # first late bin from the stop on is the stop's first (each 10 ms has ~8 tokens due).
    first, last = int(window[0] * 100), int(window[1] * 100)
    assert min(b for b in late if b >= first - 1) <= first + 1, (sorted(late), first, last)
    assert sum(n for b, n in late.items() if first <= b < last) > 0


def test_timing_error_puts_emu_c_s_late_tokens_beside_the_merges_they_caused() -> None:
    """bench/timing_error.py --merges: a token that shared a read sits in the 10 ms bin of its
    arrival, and emu.c's late tokens in the bin of their due time, both CLOCK_MONOTONIC x 100
    floored: a merge beside a late token is the emulator's, one with none beside it the
    client's. One request whose 3rd token shared the 2nd's read (at 100.065 s), and emu.c
    late with 2 tokens due in that bin, 1 in another of the run and 5 before it."""
    from timing_error import merge_lines

    rec = {
        "start_time": 100.0,
        "end_time": 100.2,
        "ttft": 0.055,
        "itl": [0.01, 0.0, 0.01, 0.01],  # tokens at .055, .065, .065 (shared), .075, .085
        "success": True,
        "warmup": False,
    }
    lines = merge_lines([rec], {10006: 2, 10001: 1, 9000: 5})
    assert "stream: 1: 1;" in lines[0]  # the merged token: ITL index 1, the stream's 3rd
    assert "emu.c's late tokens: 3, 2 of them due in or just before" in lines[0]
    assert lines[2].split(":", 1)[1].split("/") == [" 0 ", " 0 ", " 2 ", " 1 ", " 2"]
    assert lines[2].strip().startswith("0.06:")
    assert merge_lines([rec])[0].endswith("stream: 1: 1")  # no emulator figures, no note

"""Token times come from when the bytes arrived, not from when a busy loop read them (issue 23).

The oracle is the server itself: it reads time.perf_counter (CLOCK_MONOTONIC, the same clock
in every process of the host) just before and just after each write. A loopback segment is
stamped by the kernel inside that write, so a token time the client records must lie in its
write's window, however long the client's loop was blocked meanwhile, as long as the stream's
next token had not arrived too before the loop read (then both carry the later stamp: the
kernel merges queued segments; the bench counts those tokens, see headroom.timing). Here the
first token arrives while the loop is blocked and the next one long after the block. The old
client stamped each read when its loop got to it, after the block: this test fails on it.
"""

from __future__ import annotations

import asyncio
import socket
import sys
import threading
import time
from collections.abc import Iterator

import pytest

from proctor.results.validity import judge_validity
from proctor.workloads.loadgen import rxtime
from proctor.workloads.loadgen.client import FastSender, PlannedRequest
from proctor.workloads.loadgen.config import BenchConfig
from proctor.workloads.loadgen.fasthttp import Pool
from proctor.workloads.loadgen.headroom import Probe, Sample, more_workers, summarize, timing
from proctor.workloads.loadgen.loop import run as run_loop
from proctor.workloads.loadgen.records import RequestRecord

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.skipif(sys.platform != "linux", reason="kernel receive timestamps: Linux"),
]

BLOCK_S = 1.0  # how long the client's loop is kept busy while the first token arrives
TOKENS = 3
GAP_S = 1.0  # between the server's token writes after the block: the loop reads in between


class WriteTimedServer:
    """One streaming response per connection; `writes` holds (before, after) perf_counter of
    every token write; `got_request` is set when a request was read, before any token."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.writes: list[tuple[float, float]] = []
        self.got_request = threading.Event()
        self.unblocked = threading.Event()  # the client's loop runs again
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        conn, _ = self.sock.accept()
        with conn:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            buf = b""
            while b"\r\n\r\n" not in buf:
                buf += conn.recv(65536)
            head, _, body = buf.partition(b"\r\n\r\n")
            length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
            while len(body) < length:
                body += conn.recv(65536)
            conn.sendall(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                b"Transfer-Encoding: chunked\r\n\r\n"
            )
            self.got_request.set()
            time.sleep(0.2)  # the client's loop is blocked by now
            for i in range(TOKENS):
                msg = b'data: {"choices":[{"index":0,"text":" t%d"}]}\n\n' % i
                before = time.perf_counter()
                conn.sendall(b"%x\r\n%s\r\n" % (len(msg), msg))
                self.writes.append((before, time.perf_counter()))
                self.unblocked.wait(30)
                time.sleep(GAP_S)
            tail = b"data: [DONE]\n\n"
            conn.sendall(b"%x\r\n%s\r\n0\r\n\r\n" % (len(tail), tail))
            conn.recv(1)  # until the client closes


@pytest.fixture
def server() -> Iterator[WriteTimedServer]:
    s = WriteTimedServer()
    yield s
    s.sock.close()


def _send_with_blocked_loop(srv: WriteTimedServer) -> tuple[RequestRecord, Sample]:
    cfg = BenchConfig(
        base_url=f"http://127.0.0.1:{srv.port}",
        model="m",
        idle_timeout_s=30.0,
        request_timeout_s=60.0,
        ignore_eos=False,
    )

    async def blocker() -> None:
        while not srv.got_request.is_set():
            await asyncio.sleep(0.001)
        time.sleep(BLOCK_S)  # a busy loop: the first token arrives while nothing reads
        srv.unblocked.set()

    async def main() -> tuple[RequestRecord, Sample]:
        probe = Probe().start()
        pool = Pool(cfg)
        try:
            b = asyncio.get_running_loop().create_task(blocker())
            rec = RequestRecord(index=0, prompt_len=4, expected_output_len=TOKENS)
            req = PlannedRequest(0, "hi", 4, TOKENS)
            await FastSender(pool).send(cfg, "m", req, rec)
            await b
        finally:
            pool.close()
        return rec, probe.stop()

    return run_loop(main())


def test_a_pool_opens_with_the_kernel_stamping_already() -> None:
    """The kernel turns stamping on from a work queue after the first socket asks; a loaded
    machine ran it after a response's first read (CI under a CPU hog: one read of five had no
    stamp). A pool opens only once a loopback segment comes back stamped."""
    pool = Pool(BenchConfig(base_url="http://127.0.0.1:9", model="m"))
    try:
        assert pool.keeper is not None
        assert rxtime.stamping_on(wait_s=0.0)
    finally:
        pool.close()


def test_token_times_are_arrival_times_not_loop_times(server: WriteTimedServer) -> None:
    rec, sample = _send_with_blocked_loop(server)
    assert rec.success, rec.error
    assert len(server.writes) == TOKENS
    first = rec.start_time + rec.ttft
    times = [first]
    for gap in rec.itl:
        times.append(times[-1] + gap)
    assert len(times) == TOKENS
    # Each token inside its own write's window (a few us of slack for the clock mapping);
    # the old client read the first after the block, ~BLOCK_S after its write.
    for (before, after), t in zip(server.writes, times, strict=True):
        assert before - 1e-3 <= t <= after + 1e-3, (before, t, after)
    # And the bench knew its loop was late: the reads it measured were delayed.
    assert sample.reads >= 1 and sample.unstamped == 0
    assert max(sample.read_delays_s) > 0.5 * BLOCK_S


def test_timing_section_names_clocks_and_error() -> None:
    stamped = Sample(1.0, 1.0, [0.001], [0.002, 0.004], reads=2, unstamped=0)
    t = timing([stamped], 1.0, 3.0, [0.01, 0.0, 0.01])
    assert t["token_clock"] == rxtime.CLOCK and t["unstamped_reads"] == 0
    assert t["tokens_sharing_a_read"] == 1
    assert t["reading_late_p99_ms"] == 10.0  # a third of the tokens share: late by one gap
    assert t["reading_late_p50_ms"] == 0.0
    assert t["loop_read_delay_max_ms"] == 4.0
    alone = timing([stamped], 1.0, 3.0, [0.01] * 200)
    assert alone["reading_late_p99_ms"] == 0.0  # stamped, none shared: at arrival
    loop_time = timing([Sample(1.0, 1.0, [0.001])], 1.0, 3.0, [0.01])
    assert loop_time["token_clock"] == rxtime.FALLBACK_CLOCK
    assert loop_time["reading_late_p99_ms"] == 3.0  # the probe's lag stands in


def test_clock_offset_skips_a_try_preempted_between_its_reads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # True offset 1000 ns. The first try is preempted 5 ms between its monotonic read and its
    # wall read (a loaded machine); a bare pair would be 5 ms off, and map every token late.
    perf = iter([0, 5_000_010, 6_000_000, 6_000_010, 7_000_000, 7_000_010])
    wall = iter([5_001_000, 6_001_005, 7_001_005])
    monkeypatch.setattr(rxtime.time, "perf_counter_ns", lambda: next(perf))
    monkeypatch.setattr(rxtime.time, "time_ns", lambda: next(wall))
    assert rxtime.clock_offset_ns() == 1000


def _merged_run(read_delay_s: float) -> dict[str, object]:
    """A client whose reads merged 3 % of its tokens with the next one (ITL 0, then 20 ms),
    each read `read_delay_s` after its kernel stamp."""
    itls = ([0.01] * 30 + [0.0, 0.02]) * 30  # 30 of 960 share a read: 3.1 %
    sample = Sample(1.0, 2.0, [0.001] * 50, [read_delay_s] * 200, reads=900, unstamped=0)
    return summarize([sample], path="fast", loop="uvloop", itls=itls)


def test_tokens_merged_by_a_late_loop_make_the_client_bound() -> None:
    client = _merged_run(read_delay_s=0.009)  # read 9 ms late against a 10 ms gap
    assert client["client_bound"] is True
    (reason,) = client["reasons"]  # CPU 50 %, loop lag 1 ms: this is the only reason
    assert "3.1% of tokens were read together with the next one" in reason
    assert "9.0 ms after arrival" in reason and "gap 10.0 ms" in reason
    timing_ = client["timing"]
    assert isinstance(timing_, dict) and timing_["inter_token_gap_p50_ms"] == 10.0
    # The verdict reads it: INVALID, with the client's words.
    v = judge_validity(
        {
            "verdict": {"ok": True, "message": "0 of 200 requests failed"},
            "warmup": {"count": 8, "failed": 0},
            "metrics": {"completed": 200, "failed": 0, "duration": 30.0},
            "config": {"request_rate": "inf"},
            "client": client,
        },
        None,
        min_requests=100,
        min_window_s=10.0,
    ).to_dict()
    assert v["verdict"] == "INVALID"
    fix = "run with --workers 2 (each on a core of its own; --client-cores to pin them)"
    assert client["fix"] == f"{fix}, or less load per client process"
    assert v["reasons"] == [f"client: client-bound: {reason}; fix: {client['fix']}"]


def test_tokens_the_server_sent_together_do_not_blame_a_prompt_client() -> None:
    # The same merged share, but every read came 0.2 ms after arrival: the server wrote the
    # two tokens together, and their one arrival time is the truth.
    client = _merged_run(read_delay_s=0.0002)
    assert client["client_bound"] is False, client["reasons"]


def test_a_server_that_writes_every_token_at_once_does_not_blame_the_client() -> None:
    # Zero ITL (an emulator, a cached answer): most tokens share a read and the typical gap
    # is ~0, so any lateness a merge hides is under that gap. The SLO search's fake engine
    # found this: its probes were called client-bound.
    itls = ([0.0] * 9 + [0.00001]) * 40
    sample = Sample(1.0, 2.0, [0.001] * 50, [0.0001] * 200, reads=100, unstamped=0)
    client = summarize([sample], path="fast", loop="uvloop", itls=itls)
    assert client["timing"]["tokens_sharing_a_read_fraction"] == 0.9
    assert client["client_bound"] is False, client["reasons"]


@pytest.mark.parametrize(
    ("workers", "busiest", "suggested"),
    [(1, 95.0, 2), (1, 40.0, 2), (4, 98.0, 8), (2, 60.0, 3), (6, 91.0, 11)],
)
def test_a_client_bound_bench_is_told_how_many_workers_to_use(
    workers: int, busiest: float, suggested: int
) -> None:
    # About half a core a worker (bench/NOTES.md), and always at least one more than now.
    assert more_workers(workers, busiest).startswith(f"run with --workers {suggested} ")

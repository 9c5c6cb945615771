"""--client-cores (each client process on a core of its own), metrics.json "client".timeline,
and a paced send that has come due going before the read the loop is about to handle."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from proctor.errors import UsageError
from proctor.jobs.bench import parse_cores
from proctor.workloads.loadgen import cores
from proctor.workloads.loadgen.config import BenchConfig
from proctor.workloads.loadgen.fasthttp import Conn, Pool, _Exchange
from proctor.workloads.loadgen.headroom import TIMELINE_COLUMNS
from proctor.workloads.loadgen.loop import run as run_loop
from proctor.workloads.loadgen.pacer import Pacer
from proctor.workloads.loadgen.records import RequestRecord
from proctor.workloads.loadgen.runner import BenchResult, run_benchmark
from proctor.workloads.loadgen.sse import StreamState
from tests.fixtures.fake_openai_server import FakeServer
from tests.helpers import proctor

pytestmark = pytest.mark.timeout(120)
Fake = Callable[..., FakeServer]
CORES = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
needs_two = pytest.mark.skipif(len(CORES) < 2, reason="needs 2 cores and sched_setaffinity")


def bench(url: str, **kw: Any) -> BenchResult:
    args: dict[str, Any] = dict(
        base_url=url,
        isl=16,
        osl=16,
        concurrency=4,
        num_prompts=8,
        num_warmups=0,
        range_ratio=0.0,
        progress=False,
        model="m",
        tokenizer_mode="approx",
        server_metrics_s=0,
    )
    args.update(kw)
    return run_benchmark(BenchConfig(**args))


@needs_two
def test_each_worker_runs_on_the_core_named_for_it_and_the_timeline_has_one_form(
    fake: Fake,
) -> None:
    s = fake(itl=0.05)  # 16 tokens: 0.8 s a request, two rounds: bins of 0.5 s fill
    before = os.sched_getaffinity(0)
    two = bench(s.base_url, workers=2, client_cores=[CORES[1], CORES[0]])
    one = bench(s.base_url, client_cores=[CORES[1]])
    assert os.sched_getaffinity(0) == before  # the parent is back where it was
    assert two.client is not None and one.client is not None
    assert two.client["cores"] == [[CORES[1]], [CORES[0]]]
    assert one.client["cores"] == [[CORES[1]]]
    for res, n in ((one, 1), (two, 2)):
        assert res.client is not None
        tl = res.client["timeline"]
        assert tl["bin_s"] == 0.5 and tl["columns"] == list(TIMELINE_COLUMNS)
        assert len(tl["per_process"]) == n
        for rows in tl["per_process"]:
            assert len(rows) >= 2 and all(len(r) == len(TIMELINE_COLUMNS) for r in rows)
            starts = [r[0] for r in rows]
            assert starts == sorted(starts) and starts[0] < 0.5
            assert all(r[1] >= 0 and r[2] >= 0 and r[3] >= 0 for r in rows)
    assert sorted(one.records[0].to_dict()) == sorted(two.records[0].to_dict())


@pytest.mark.skipif(not CORES, reason="needs sched_setaffinity")
def test_a_core_the_machine_lacks_is_a_usage_error(fake: Fake) -> None:
    s = fake()
    for workers in (1, 2):
        with pytest.raises(UsageError, match="cannot pin the client to cores 4095"):
            bench(s.base_url, workers=workers, client_cores=[CORES[0], 4095])


BENCH = ("--base-url", "http://127.0.0.1:9", "--model", "m", "--isl", "8", "--osl", "4")


@pytest.mark.skipif(not CORES, reason="needs sched_getaffinity")
@pytest.mark.parametrize(
    "command", [("bench", "--concurrency", "2"), ("sweep", "--concurrency", "2,4")]
)
def test_a_core_this_machine_lacks_is_refused_before_a_run_starts(
    command: tuple[str, ...], isolated_runs: Path
) -> None:
    # Checked in the run only, this was a bench run (or a sweep of them) recorded as failed.
    r = proctor(*command, *BENCH, "--workers", "2", "--client-cores", f"{CORES[0]},4095")
    assert r.returncode == 64, r.stdout + r.stderr
    assert f"cores 4095: this process may use cores {cores.spans(CORES)} only" in r.stderr
    assert not isolated_runs.exists() or not any(p.is_dir() for p in isolated_runs.iterdir())
    assert json.loads(proctor("runs", "list", "--json").stdout) == []


def test_on_a_far_target_its_cores_are_not_checked_here(isolated_runs: Path) -> None:
    # Nothing listens on port 1: the target is unreachable, and the cores were not the reason.
    far = ("--target", "ssh://nobody@127.0.0.1:1")
    r = proctor("bench", *far, *BENCH, "--client-cores", "4095")
    assert r.returncode == 69 and "connect failed" in r.stderr, r.stderr
    assert "cannot pin" not in r.stderr


def test_core_lists_are_written_as_they_are_given() -> None:
    assert cores.spans([5, 0, 1, 2, 8, 9]) == "0-2,5,8-9" and cores.spans([3]) == "3"
    assert parse_cores(cores.spans([0, 1, 2, 5, 8, 9])) == [0, 1, 2, 5, 8, 9]


def test_each_worker_needs_a_core_of_its_own() -> None:
    with pytest.raises(ValueError, match="different core"):
        BenchConfig(base_url="http://h", workers=2, concurrency=4, client_cores=[3])
    with pytest.raises(ValueError, match="different core"):
        BenchConfig(base_url="http://h", workers=2, concurrency=4, client_cores=[3, 3])
    assert parse_cores("2-4,7") == [2, 3, 4, 7] and parse_cores("") == []


@pytest.mark.skipif(sys.platform != "linux", reason="timerfd: Linux")
def test_a_read_that_comes_after_a_due_send_lets_the_send_go_first() -> None:
    """The socket's bytes are ready before the send's due time, the loop is busy past it:
    both are ready at the next poll, the read first (epoll's order). The read callback sees the
    send due and starts it before parsing its own token: the send is timed when it leaves, the
    token keeps its stamp however late it is parsed."""
    head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    msg = b'data: {"choices":[{"index":0,"text":" tok"}]}\n\n'
    chunk = b"%x\r\n%s\r\n" % (len(msg), msg)

    async def main() -> list[int]:
        loop = asyncio.get_running_loop()
        pool = Pool(BenchConfig(base_url="http://127.0.0.1:9", model="m"))
        a, b = socket.socketpair()
        a.setblocking(False)
        conn = Conn(pool, a, loop)
        rec = RequestRecord(index=0, prompt_len=1, expected_output_len=4)
        conn.ex = _Exchange(rec, StreamState(rec, False, time.perf_counter()), loop.create_future())
        b.sendall(head)  # the head alone first: the token's read is the one that counts
        await asyncio.sleep(0.05)
        seen: list[int] = []
        due = time.perf_counter() + 0.05

        def busy() -> None:
            b.sendall(chunk)
            while time.perf_counter() < due + 0.02:
                pass

        loop.call_soon(busy)
        try:
            with Pacer() as p:
                pool.pacer = p
                await p.run([due], lambda i: seen.append(rec.chunks))
            await asyncio.sleep(0.01)
            assert rec.chunks == 1
        finally:
            conn._abort()
            b.close()
            pool.close()
        return seen

    assert run_loop(main()) == [0]

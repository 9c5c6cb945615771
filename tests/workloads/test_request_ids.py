"""x-request-id end to end (issue 24 point 5): every request carries an id proctor chose, the
record keeps it, the server sees it, and the report finds the slowest requests' server-log
lines by it. The server here is the fake (tests/fixtures), which logs the header as vLLM does
with --enable-log-requests ("Received request cmpl-ID-0"); the real vLLM's use of the header
is checked in tests/workloads/test_real_vllm_workloads.py."""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from proctor.report.slowest import SLOWEST, log_lines, slowest_block, slowest_requests
from proctor.workloads.loadgen.config import BenchConfig
from proctor.workloads.loadgen.runner import BenchResult, run_benchmark, write_outputs
from tests.fixtures.fake_openai_server import FakeServer
from tests.workloads.conftest import FakeProcess

pytestmark = pytest.mark.timeout(180)
Fake = Callable[..., FakeServer]


def _bench(url: str, out: Path | None = None, **kw: Any) -> BenchResult:
    args: dict[str, Any] = dict(
        base_url=url,
        isl=8,
        osl=4,
        concurrency=4,
        num_prompts=12,
        num_warmups=2,
        range_ratio=0.0,
        progress=False,
        model="m",
        tokenizer_mode="approx",
        server_metrics_s=0,
        gpu_sample_s=0,
        save_detailed=True,
    )
    args.update(kw)
    res = run_benchmark(BenchConfig(**args))
    if out is not None:
        write_outputs(res, out)
    return res


@pytest.mark.parametrize(
    ("workers", "client"), [(1, "fast"), (2, "fast"), (1, "aiohttp")], ids=["one", "two", "aio"]
)
def test_every_request_carries_the_id_it_records(
    fake: Fake, monkeypatch: pytest.MonkeyPatch, workers: int, client: str
) -> None:
    monkeypatch.setenv("PROCTOR_RUN_ID", "run 7\r\nX: y")  # made header-safe
    monkeypatch.setenv("PROCTOR_HTTP_CLIENT", client)
    s = fake()
    res = _bench(s.base_url, workers=workers, repeat=2)
    ids = [r.request_id for r in res.records]
    assert len(res.records) == 2 + 2 * 12 and len(set(ids)) == len(ids)
    for r in res.records:  # BASE-REPEAT-INDEX, the same form for one worker or many
        assert r.request_id == f"run_7__X__y-{r.repeat}-{r.index}"
    assert s.app is not None
    assert Counter(s.app.state.request_ids) == Counter(ids)  # what the server was sent


def test_without_a_run_id_each_bench_draws_its_own_base(
    fake: Fake, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PROCTOR_RUN_ID", raising=False)
    s = fake()
    a = {r.request_id for r in _bench(s.base_url, num_prompts=4, num_warmups=0).records}
    b = {r.request_id for r in _bench(s.base_url, num_prompts=4, num_warmups=0).records}
    assert all(re.fullmatch(r"bench-[0-9a-f]{12}-0-\d+", x) for x in a | b)
    assert not a & b


def test_report_links_the_slowest_requests_to_the_server_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PROCTOR_RUN_ID", "20261206-000000-bench")
    runs = tmp_path / "runs"
    server_dir, bench_dir = runs / "20261206-000000-serve", runs / "20261206-000000-bench"
    server_dir.mkdir(parents=True)
    bench_dir.mkdir()
    # Later requests wait longer (latency grows with the requests already running).
    srv = FakeProcess(["--enable-log-requests", "--ttft-per-running", "0.01", "--itl", "0.002"])
    try:
        srv.wait_for("Application startup complete.", timeout=60)
        _bench(srv.base_url, bench_dir, num_prompts=24, concurrency=12, num_warmups=0)
        srv.wait_for("Received request cmpl-20261206-000000-bench-0-23-0")
    finally:
        srv.proc.terminate()
        srv.proc.wait(30)
    (server_dir / "server.log").write_text("\n".join(srv.lines) + "\n")
    record = {"server_run": server_dir.name}

    slow = slowest_requests(bench_dir / "requests.jsonl")
    recs = [json.loads(x) for x in (bench_dir / "requests.jsonl").read_text().splitlines()]
    flights = sorted((r["end_time"] - r["start_time"] for r in recs), reverse=True)
    assert [r["end_time"] - r["start_time"] for r in slow] == flights[:SLOWEST]

    page = slowest_block(bench_dir, record)
    assert "<h2>Slowest requests</h2>" in page and "server.log" in page
    for r in slow:
        rid = r["request_id"]
        assert f"<code>{rid}</code>" in page
        assert f"Received request cmpl-{rid}-0:" in page  # its own line, from the log
    # An id is never found inside a longer one (…-0-1 is not …-0-10).
    one = log_lines(server_dir / "server.log", ["20261206-000000-bench-0-1"])
    assert [t for _, t in one["20261206-000000-bench-0-1"]] and all(
        "bench-0-1-0:" in t for _, t in one["20261206-000000-bench-0-1"]
    )

    # No server run recorded, or a log that never names the ids: the table still stands,
    # and says why no line is shown.
    assert "no server run of proctor's recorded" in slowest_block(bench_dir, {})
    (server_dir / "server.log").write_text("INFO: started\n")
    assert "names none of these ids" in slowest_block(bench_dir, record)

"""The raw HTTP/1.1 client (fasthttp.py): framings, keep-alive, same records as aiohttp's;
and what every bench now reports about itself: "client" headroom and "schedule"."""

from __future__ import annotations

import contextlib
import json
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from proctor.workloads.loadgen import rxtime
from proctor.workloads.loadgen.config import BenchConfig
from proctor.workloads.loadgen.headroom import format_headroom
from proctor.workloads.loadgen.runner import BenchResult, result_document, run_benchmark
from tests.fixtures.fake_openai_server import FakeServer
from tests.workloads.conftest import FakeProcess

pytestmark = pytest.mark.timeout(120)
Fake = Callable[..., FakeServer]


def bench(url: str, **kw: Any) -> BenchResult:
    args: dict[str, Any] = dict(
        base_url=url,
        isl=16,
        osl=8,
        concurrency=4,
        num_prompts=8,
        num_warmups=0,
        range_ratio=0.0,
        progress=False,
        model="m",
        tokenizer_mode="approx",
        idle_timeout_s=5.0,
        request_timeout_s=20.0,
        server_metrics_s=0,
    )  # no /metrics reads
    args.update(kw)
    return run_benchmark(BenchConfig(**args))


def _sse(n: int, bad: bool = False) -> list[bytes]:
    msgs = [b'data: {"choices":[{"index":0,"text":" tok"}]}\n\n' for _ in range(n)]
    if bad:  # a malformed message after the second token
        msgs.insert(2, b"data: {not json\n\n")
    msgs.append(b'data: {"choices":[],"usage":{"prompt_tokens":16,"completion_tokens":%d}}\n\n' % n)
    msgs.append(b"data: [DONE]\n\n")
    return msgs


def _response(framing: str, n: int) -> list[bytes]:
    """The bytes of one response, as the writes the server makes."""
    msgs = _sse(n, bad=framing == "chunked-plain-bad")
    if framing.startswith("content-length"):
        body = b"".join(msgs)
        length = b"-5" if framing == "content-length-negative" else b"%d" % len(body)
        return [
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            b"Content-Length: %s\r\n\r\n" % length,
            body,
        ]
    if framing == "close-delimited":
        return [b"HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\n\r\n", *msgs]
    head = (
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n"
    )
    # chunked-plain: no chunk extensions, one chunk a write: the reader's short path (a read of
    # exactly one whole chunk); the others take the whole way.
    ext = b"" if framing.startswith("chunked-plain") else b";ext=1"
    chunks = [b"%x%s\r\n%s\r\n" % (len(m), ext, m) for m in msgs]
    if framing == "chunked-plain-negative":  # "-6" once made the chunk decoder loop for ever
        chunks[2] = b"-6\r\n%s\r\n" % msgs[2]
    end = b"0\r\nX-Trailer: yes\r\n\r\n" if framing == "chunked-trailers" else b"0\r\n\r\n"
    if framing == "chunked-bytewise":  # every byte its own write: every split a read can have
        return [bytes([b]) for b in head + b"".join(chunks) + end]
    return [head, *chunks, end]


class RawServer:
    """A socket server that answers every POST with one scripted response; counts connections."""

    def __init__(self, framing: str, n: int) -> None:
        self.framing, self.n = framing, n
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.connections = 0
        self.heads: list[bytes] = []
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        buf = b""
        with conn:
            while True:
                while b"\r\n\r\n" not in buf:
                    data = conn.recv(65536)
                    if not data:
                        return
                    buf += data
                head, _, buf = buf.partition(b"\r\n\r\n")
                self.heads.append(head)
                if head.startswith(b"GET"):  # /v1/models
                    models = b'{"data":[{"id":"m"}]}'
                    conn.sendall(
                        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                        b"Content-Length: %d\r\n\r\n%s" % (len(models), models)
                    )
                    continue
                length = next(
                    int(line.split(b":")[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length")
                )
                while len(buf) < length:
                    buf += conn.recv(65536)
                buf = buf[length:]
                for part in _response(self.framing, self.n):
                    try:
                        conn.sendall(part)
                    except OSError:  # the client gave up on a bad response (it may)
                        return
                    if self.framing == "chunked-plain-bad":
                        time.sleep(0.02)  # one chunk a read: the reader's short path
                if self.framing == "close-delimited":
                    return

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def raw() -> Iterator[Callable[[str, int], RawServer]]:
    servers: list[RawServer] = []

    def start(framing: str, n: int) -> RawServer:
        servers.append(RawServer(framing, n))
        return servers[-1]

    yield start
    for s in servers:
        s.close()


@pytest.mark.parametrize(
    "framing",
    [
        "chunked",
        "chunked-plain",
        "chunked-bytewise",
        "chunked-trailers",
        "content-length",
        "close-delimited",
    ],
)
def test_every_framing_gives_the_same_records(
    raw: Callable[[str, int], RawServer], framing: str
) -> None:
    server = raw(framing, 5)
    res = bench(server.url, concurrency=1, num_prompts=4)
    assert res.client is not None and res.client["path"] == "fast"
    for r in res.measured:
        assert r.success, r.error
        assert (r.status, r.chunks, r.output_tokens, r.output_tokens_source) == (200, 5, 5, "usage")
        assert r.saw_done and r.prompt_tokens == 16 and r.generated_chars == 20
        assert len(r.itl) == 4
    # Keep-alive: one connection carried every request (one more was aiohttp's /v1/models),
    # except where the server closes it after each.
    assert server.connections == (1 + 4 if framing == "close-delimited" else 1 + 1)


def test_a_malformed_message_read_on_the_short_path_fails_the_request(
    raw: Callable[[str, int], RawServer],
) -> None:
    """One whole chunk a read takes the reader's short path: a bad message found there fails
    its request as malformed_sse (it once escaped into the event loop, and the request went on
    to succeed without it)."""
    server = raw("chunked-plain-bad", 6)
    res = bench(server.url, concurrency=2, num_prompts=4, osl=6)
    assert [r.reason for r in res.measured] == ["malformed_sse"] * 4
    assert all("not JSON" in r.error for r in res.measured)


@pytest.mark.parametrize(
    ("framing", "why"),
    [("chunked-plain-negative", "bad chunk size"), ("content-length-negative", "Content-Length")],
)
def test_a_signed_size_fails_the_request_and_the_bench_goes_on(
    raw: Callable[[str, int], RawServer], framing: str, why: str
) -> None:
    """Python's int() takes "-6" as a chunk size and "-5" as a Content-Length: the decoder
    went backwards over the read, took garbage as tokens, and for "-6" looped for ever with the
    event loop inside it (no deadline could fire, the bench hung). A size is digits only."""
    server = raw(framing, 5)
    res = bench(server.url, concurrency=2, num_prompts=4)
    assert [r.reason for r in res.measured] == ["client_error"] * 4
    assert all(why in r.error for r in res.measured), res.measured[0].error


def test_url_credentials_are_sent_as_basic_auth(raw: Callable[[str, int], RawServer]) -> None:
    server = raw("chunked", 2)
    url = server.url.replace("http://", "http://us%40er:p%3Ass@")
    res = bench(url, concurrency=1, num_prompts=2)
    assert res.metrics.completed == 2
    posts = [h for h in server.heads if h.startswith(b"POST")]
    assert len(posts) == 2
    for head in posts:  # base64("us@er:p:ss"), and the credentials are not in the request line
        assert b"\r\nAuthorization: Basic dXNAZXI6cDpzcw==" in head
        assert head.startswith(b"POST /v1/completions HTTP/1.1\r\n")


def test_fast_and_aiohttp_paths_write_the_same_records(
    fake: Fake, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = fake(itl=0.001)
    fast = bench(s.base_url, endpoint="chat", num_warmups=2)
    monkeypatch.setenv("PROCTOR_HTTP_CLIENT", "aiohttp")
    slow = bench(s.base_url, endpoint="chat", num_warmups=2)
    assert fast.client is not None and slow.client is not None
    assert (fast.client["path"], slow.client["path"]) == ("fast", "aiohttp")

    def shape(res: BenchResult) -> list[tuple[Any, ...]]:
        return [
            (
                r.index,
                r.warmup,
                r.success,
                r.status,
                r.chunks,
                len(r.itl),
                r.output_tokens,
                r.output_tokens_source,
                r.prompt_tokens,
                r.saw_done,
                r.generated_chars,
                sorted(r.to_dict()),
            )
            for r in res.records
        ]

    assert shape(fast) == shape(slow)
    a, b = result_document(fast), result_document(slow)
    assert sorted(a) == sorted(b) and sorted(a["metrics"]) == sorted(b["metrics"])


def test_https_and_credentials_with_a_key_take_the_aiohttp_path() -> None:
    from pydantic import SecretStr

    from proctor.workloads.loadgen.client import http_path

    assert http_path(BenchConfig(base_url="http://127.0.0.1:9")) == "fast"
    assert http_path(BenchConfig(base_url="https://127.0.0.1:9")) == "aiohttp"
    assert http_path(BenchConfig(base_url="http://u:p@127.0.0.1:9")) == "fast"
    keyed = BenchConfig(base_url="http://u:p@127.0.0.1:9", api_key=SecretStr("k"))
    assert http_path(keyed) == "aiohttp"


def test_metrics_json_reports_client_headroom_and_schedule(fake: Fake, tmp_path: Path) -> None:
    import subprocess

    s = fake(itl=0.001)
    out = tmp_path / "out"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "proctor.workloads.loadgen",
            "--base-url",
            s.base_url,
            "--output-dir",
            str(out),
            "--isl",
            "8",
            "--osl",
            "4",
            "--concurrency",
            "2",
            "--num-prompts",
            "10",
            "--num-warmups",
            "0",
            "--request-rate",
            "50",
            "--no-progress",
            "--log-every",
            "0",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    doc = json.loads((out / "metrics.json").read_text())
    client = doc["client"]
    for key in (
        "cpu_percent",
        "loop_lag_p50_ms",
        "loop_lag_p99_ms",
        "loop_lag_max_ms",
        "client_bound",
        "reasons",
        "path",
        "loop",
    ):
        assert key in client
    assert client["path"] == "fast" and client["loop_lag_samples"] > 0
    timing = client["timing"]
    assert timing["clock"].startswith("time.perf_counter")
    assert timing["start_clock"].startswith("time.perf_counter")
    if sys.platform == "linux":  # token times are the kernel's receive stamps (rxtime.py)
        assert timing["token_clock"] == rxtime.CLOCK
        assert timing["reads"] > 0 and timing["unstamped_reads"] == 0
        assert timing["loop_read_delay_p99_ms"] >= timing["loop_read_delay_p50_ms"] >= 0
    assert isinstance(client["client_bound"], bool) and isinstance(client["reasons"], list)
    sched = doc["schedule"]
    assert sched["target_rate"] == 50.0 and sched["sent"] == 10
    assert sched["achieved_rate"] > 0
    assert sched["schedule_delay_p50_ms"] is not None and sched["schedule_delay_p99_ms"] is not None
    assert ("client headroom: ok" in r.stdout) or ("client-bound: " in r.stdout)


def test_rate_inf_has_no_schedule_to_keep(fake: Fake) -> None:
    s = fake()
    doc = result_document(bench(s.base_url))
    assert doc["schedule"]["target_rate"] is None
    assert doc["schedule"]["schedule_delay_p99_ms"] is None and doc["schedule"]["sent"] == 8


@contextlib.contextmanager
def _gil_hog() -> Iterator[None]:
    """A thread that holds the GIL for 50 ms at a time: the client's loop starves."""
    stop = threading.Event()
    old = sys.getswitchinterval()
    sys.setswitchinterval(0.05)

    def burn() -> None:
        x = 0
        while not stop.is_set():
            x += 1

    t = threading.Thread(target=burn, daemon=True)
    t.start()
    try:
        yield
    finally:
        stop.set()
        t.join()
        sys.setswitchinterval(old)


def test_a_starved_client_says_it_was_client_bound(fake: Fake) -> None:
    s = fake(itl=0.002)
    with _gil_hog():
        res = bench(s.base_url, osl=20, num_prompts=16)
    assert res.client is not None
    assert res.client["client_bound"] is True and res.client["reasons"]
    assert format_headroom(res.client).startswith("client-bound: ")


def test_a_light_client_is_not_client_bound(fake_process: Callable[..., FakeProcess]) -> None:
    # The server in its own process: nothing else in the client's process wants the GIL.
    srv = fake_process("--itl", "0.01")
    srv.wait_for("Application startup complete.")
    res = bench(srv.base_url, osl=20, concurrency=1, num_prompts=4)
    assert res.client is not None
    assert res.client["client_bound"] is False, res.client["reasons"]
    assert format_headroom(res.client).startswith("client headroom: ok")


GOOD = b'data: {"choices":[{"index":0,"text":"a"}]}\n\n'


@pytest.mark.parametrize(
    ("bad", "why"),
    [
        (b"data: {not json\n\n", "not JSON"),
        (b"data: [1, 2]\n\n", "not a JSON object"),
        (b'data: {"choices":[null]}\n\n', "unexpected shape"),
        (b'data: {"a":1},{"b":2}\n\n', "not JSON"),
    ],
)
def test_a_bad_message_in_a_read_of_many_fails_as_alone(bad: bytes, why: str) -> None:
    from proctor.workloads.loadgen.records import RequestRecord
    from proctor.workloads.loadgen.sse import Malformed, StreamState

    state = StreamState(RequestRecord(index=0, prompt_len=1, expected_output_len=1), False, 0.0)
    with pytest.raises(Malformed, match=why):
        state.feed(GOOD * 3 + bad + GOOD, 1.0)
    assert state.record.chunks == 3  # the good ones before it were counted, in order


def test_an_error_object_in_a_read_of_many_ends_the_request() -> None:
    from proctor.workloads.loadgen.records import RequestRecord
    from proctor.workloads.loadgen.sse import StreamState

    rec = RequestRecord(index=0, prompt_len=1, expected_output_len=1)
    state = StreamState(rec, True, 0.0)
    chat = b'data: {"choices":[{"index":0,"delta":{"content":"a"}}]}\n\n'
    assert state.feed(chat + b'data: {"error":{"message":"boom"}}\n\n' + b"data: [DONE]\n\n", 1.0)
    assert (rec.reason, rec.chunks, rec.saw_done) == ("http_error", 1, False)
    assert "boom" in rec.error


def test_workers_merge_headroom_and_records_of_the_same_form(fake: Fake) -> None:
    s = fake(itl=0.001)
    one = bench(s.base_url, num_warmups=2)
    two = bench(s.base_url, num_warmups=2, workers=2)
    assert two.client is not None and two.client["processes"] == 2
    assert len(two.client["cpu_percent_per_process"]) == 2
    assert two.client["cpu_percent"] == pytest.approx(
        sum(two.client["cpu_percent_per_process"]), abs=0.2
    )
    assert [sorted(r.to_dict()) for r in one.records] == [sorted(r.to_dict()) for r in two.records]
    assert [r.index for r in two.records] == [r.index for r in one.records]
    assert {r.worker for r in two.records} == {0, 1}
    assert result_document(two)["schedule"]["sent"] == 8


def test_workers_share_the_measured_requests_so_no_worker_idles_at_the_end(
    fake: Fake, tmp_path: Path
) -> None:
    # Every even request is long, every odd one short. Split statically (every 2nd request to
    # each worker), worker 1 would get only short ones and idle while worker 0 sends every
    # long one; claiming from one list, worker 1 takes long ones as soon as it is free.
    data = tmp_path / "alternating.jsonl"
    data.write_text(
        '{"prompt": "long one", "output_len": 40}\n{"prompt": "short one", "output_len": 1}\n'
    )
    s = fake(itl=0.005)
    got = bench(s.base_url, dataset=f"jsonl:{data}", workers=2, concurrency=2, num_prompts=20)
    assert [r.index for r in got.records] == list(range(20))
    assert all(r.success for r in got.records)
    long_by = {
        w: sum(1 for r in got.records if r.worker == w and r.expected_output_len == 40)
        for w in (0, 1)
    }
    assert long_by[0] + long_by[1] == 10
    assert long_by[1] >= 3, long_by

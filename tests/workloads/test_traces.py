"""bench --dataset trace:PATH: Mooncake and BurstGPT traces replayed on their own clock, through
the load generator as a process against the fake server as a process (real sockets, a prefix
cache of known accounting), and the readers and prompt blocks as laws."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proctor.errors import UsageError
from proctor.results.validity import delay_limit_ms
from proctor.workloads.loadgen import datafiles
from proctor.workloads.loadgen.config import BenchConfig
from proctor.workloads.loadgen.trace_workload import (
    MAX_TRACE_REQUESTS,
    Blocks,
    _info,
    expected_hits,
    trace_note,
)
from proctor.workloads.loadgen.tracefiles import BLOCK_TOKENS, MAX_HELD_TOKENS, read_trace
from tests.workloads.conftest import FakeProcess
from tests.workloads.test_entrypoint import loadgen, started

pytestmark = pytest.mark.timeout(180)

TRACES = Path(__file__).resolve().parents[1] / "data" / "traces"
MOONCAKE = TRACES / "mooncake_conversation_head.jsonl"
BURSTGPT = TRACES / "burstgpt_head.csv"
TIMER_EARLY_S = 0.002  # uvloop rounds a timer to whole ms: one may fire up to ~1.4 ms early
FEW = ["--num-warmups", "1", "--no-progress", "--save-detailed", "--min-requests", "1"]


def run(srv: FakeProcess, out: Path, *args: str) -> tuple[int, str, str]:
    r = loadgen("--port", str(srv.port), "--output-dir", str(out), *FEW, *args)
    return r.returncode, r.stdout, r.stderr


def doc(out: Path) -> dict[str, Any]:
    return json.loads((out / "metrics.json").read_text())  # type: ignore[no-any-return]


def measured(out: Path) -> list[dict[str, Any]]:
    lines = (out / "requests.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if not r["warmup"]]


def mooncake_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_the_real_mooncake_sample_shares_its_first_block_on_the_server(
    fake_process: Callable[..., FakeProcess], tmp_path: Path
) -> None:
    """Every record of Mooncake's conversation trace starts with hash id 0: the server's
    prefix cache (the fake's, 4-token blocks, vLLM's accounting) hits those 512 tokens in every
    request but the first, and the lengths sent are the trace's."""
    srv = started(fake_process, "--prefix-block", "4")
    out = tmp_path / "run"
    code, stdout, stderr = run(
        srv, out, "--dataset", f"trace:{MOONCAKE}", "--num-prompts", "6", "--concurrency", "8"
    )
    assert code == 0, stderr
    d = doc(out)
    info = d["dataset"]
    records = mooncake_lines(MOONCAKE)[:6]
    assert info["kind"] == "trace" and info["format"] == "mooncake"
    assert info["entries"] == 11 and info["replayed"] == 6
    assert info["cut"] == {"records": 11, "replayed": 6, "by": "--num-prompts 6"}
    sent = measured(out)
    # The fake counts whitespace words: one word is one token, no special token.
    assert [r["prompt_tokens"] for r in sent] == [x["input_length"] for x in records]
    assert [r["output_tokens"] for r in sent] == [x["output_length"] for x in records]
    cache = info["prefix_cache"]
    assert cache["hits_tokens"] == 5 * BLOCK_TOKENS
    assert cache["queries_tokens"] == sum(x["input_length"] for x in records)
    assert info["expected_hit_rate"] == pytest.approx(cache["hit_rate"])
    assert "cut: the first 6 of 11 records (--num-prompts 6)" in stdout
    assert "Prefix cache hit rate: expected 7.3%, achieved 7.3%" in stdout


def _chain_trace(path: Path, rng: random.Random, n: int) -> list[dict[str, Any]]:
    """Records 40 ms apart whose hash ids extend earlier ones (as conversations do), each
    ending with a block of its own so no prompt is cached whole."""
    lines: list[dict[str, Any]] = []
    next_id = 1000
    for i in range(n):
        if lines and rng.random() < 0.7:
            base = rng.choice(lines)["hash_ids"][:-1]
            base = base[: rng.randint(1, len(base))] if base else []
        else:
            base = []
        shared = [*base, *(next_id + k for k in range(rng.randint(0, 2)))]
        next_id += 3
        ids = [*shared, next_id]
        next_id += 1
        n_in = BLOCK_TOKENS * (len(ids) - 1) + rng.randint(BLOCK_TOKENS // 2, BLOCK_TOKENS)
        lines.append(
            {"timestamp": 40 * i, "input_length": n_in, "output_length": 3, "hash_ids": ids}
        )
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return lines


def _oracle_hits(lines: list[dict[str, Any]]) -> int:
    """Tokens the fake's cache hits: whole 512-token blocks whose id chain was sent before."""
    seen: set[tuple[int, ...]] = set()
    hits = 0
    for x in lines:
        ids = x["hash_ids"]
        full = x["input_length"] // BLOCK_TOKENS
        run = True
        for b in range(min(full, len(ids))):
            chain = tuple(ids[: b + 1])
            run = run and chain in seen
            hits += BLOCK_TOKENS if run else 0
            seen.add(chain)
    return hits


def test_shared_hash_ids_hit_the_server_cache_exactly_as_the_trace_says(
    fake_process: Callable[..., FakeProcess], tmp_path: Path
) -> None:
    trace = tmp_path / "chains.jsonl"
    lines = _chain_trace(trace, random.Random(7), 14)
    srv = started(fake_process, "--prefix-block", "4")
    out = tmp_path / "run"
    code, _, stderr = run(
        srv, out, "--dataset", f"trace:{trace}", "--concurrency", "16", "--trace-speed", "2"
    )
    assert code == 0, stderr
    info = doc(out)["dataset"]
    want = _oracle_hits(lines)
    assert want > 0
    assert info["prefix_cache"]["hits_tokens"] == want
    total = sum(x["input_length"] for x in lines)
    assert info["expected_hit_rate"] == pytest.approx(want / total)


def test_every_request_leaves_at_its_trace_time_over_speed_within_its_recorded_delay(
    fake_process: Callable[..., FakeProcess], tmp_path: Path
) -> None:
    """The law: each request is due at timestamp / speed after the first; it was sent no earlier
    than that and its recorded delay is the difference; the schedule section summarises those
    delays, the rate is the trace's mean rate, and the verdict judges the delays as it judges a
    --request-rate schedule's."""
    rng = random.Random(3)
    stamps = sorted(rng.uniform(0, 3000) for _ in range(60))
    stamps = [s - stamps[0] for s in stamps]
    trace = tmp_path / "t.jsonl"
    trace.write_text(
        "".join(
            json.dumps({"timestamp": s, "input_length": 20 + i, "output_length": 4}) + "\n"
            for i, s in enumerate(stamps)
        )
    )
    srv = started(fake_process, "--ttft", "0.002", "--itl", "0.001")
    out = tmp_path / "run"
    speed = 4.0
    code, _, stderr = run(
        srv,
        out,
        "--dataset",
        f"trace:{trace}",
        "--trace-speed",
        str(speed),
        "--concurrency",
        "64",
    )
    assert code == 0, stderr
    sent = sorted(measured(out), key=lambda r: r["index"])
    t0 = sent[0]["queued_at"]
    delays = []
    for rec, stamp in zip(sent, stamps, strict=True):
        assert rec["queued_at"] - t0 == pytest.approx(stamp / 1000 / speed, abs=1e-6)
        # Never sent before its time, but for uvloop's whole-millisecond timers (docs/bench.md).
        assert rec["start_time"] >= rec["queued_at"] - TIMER_EARLY_S
        delays.append(max(0.0, rec["start_time"] - rec["queued_at"]) * 1000)
    d = doc(out)
    schedule = d["schedule"]
    assert schedule["sent"] == len(stamps)
    assert schedule["schedule_delay_max_ms"] == pytest.approx(max(delays))
    rate = len(stamps) / (stamps[-1] / 1000 / speed)
    assert schedule["target_rate"] == pytest.approx(rate)
    assert d["dataset"]["offered_rate"] == pytest.approx(rate)
    check = d["validity"]["checks"]["rate"]
    assert check["ok"] == (schedule["schedule_delay_p99_ms"] <= delay_limit_ms(rate))
    assert f"at {rate:g} req/s" in check["detail"]


def test_the_real_burstgpt_sample_replays_its_seconds_and_lengths(
    fake_process: Callable[..., FakeProcess], tmp_path: Path
) -> None:
    srv = started(fake_process)
    out = tmp_path / "run"
    code, stdout, stderr = run(
        srv, out, "--dataset", f"trace:{BURSTGPT}", "--trace-speed", "1000", "--concurrency", "4"
    )
    assert code == 0, stderr
    sent = sorted(measured(out), key=lambda r: r["index"])
    assert [r["prompt_tokens"] for r in sent] == [472, 1087, 417]
    assert [r["output_tokens"] for r in sent] == [18, 230, 276]
    due = [r["queued_at"] - sent[0]["queued_at"] for r in sent]
    assert due == pytest.approx([0.0, 0.040, 0.113], abs=1e-6)  # 5 s, 45 s, 118 s at 1000x
    info = doc(out)["dataset"]
    assert info["format"] == "burstgpt" and info["cut"] is None
    assert info["expected_hit_rate"] is None  # BurstGPT names no blocks: no sharing invented
    assert "Trace: burstgpt, 3 requests over 0.1 s (speed 1000" in stdout
    assert "proctor: Trace: burstgpt" in stderr  # said before the replay starts


@pytest.mark.parametrize(
    ("name", "content", "where", "why"),
    [
        (
            "t.jsonl",
            b'{"timestamp": 5, "input_length": 3, "output_length": 2}\n'
            b'{"timestamp": 4, "input_length": 3, "output_length": 2}\n',
            "t.jsonl:2",
            "before the previous record's 5 (line 1): a trace must be sorted by time",
        ),
        (
            "t.jsonl",
            b'{"timestamp": 0, "input_length": -3, "output_length": 2}\n',
            "t.jsonl:1",
            "input_length must not be negative",
        ),
        (
            "t.jsonl",
            b'{"timestamp": 0, "input_length": 3, "output_length": 2}\n'
            b'{"timestamp": 1, "input_length": 3, "output_length": 2, "hash_ids": ["\xff"]}\n',
            "t.jsonl:2",
            "not UTF-8",
        ),
        (
            "t.jsonl",
            b'{"timestamp": 0, "input_length": 3}\n',
            "t.jsonl:1",
            "output_length is missing",
        ),
        (
            "t.jsonl",
            b'{"timestamp": 0, "input_length": 3, "output_length": 2}\n{x\n',
            "t.jsonl:2",
            "not JSON",
        ),
        (
            "t.jsonl",
            b'{"timestamp": "0", "input_length": 3, "output_length": 2}\n',
            "t.jsonl:1",
            "timestamp must be a number",
        ),
        (
            "t.jsonl",
            b'{"timestamp": 0, "input_length": 3, "output_length": 2, "hash_ids": 7}\n',
            "t.jsonl:1",
            "hash_ids must be a list",
        ),
        (
            "t.jsonl",
            b'{"timestamp": 0, "input_length": 3, "output_length": 0}\n',
            "t.jsonl",
            "no request in the trace (1 with a zero length)",
        ),
        (
            "t.csv",
            b"Timestamp,Model,Request tokens\n1,m,3\n",
            "t.csv:1",
            "no Response tokens column",
        ),
        (
            "t.csv",
            b"Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
            b"1,m,3,2,5,API log\n2,m,-3,2,5,API log\n",
            "t.csv:3",
            "Request tokens must not be negative",
        ),
        (
            "t.csv",
            b"Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
            b"9,m,3,2,5,API log\n2,m,3,2,5,API log\n",
            "t.csv:3",
            "a trace must be sorted by time",
        ),
        (
            "t.csv",
            b"Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
            b"1,m,three,2,5,API log\n",
            "t.csv:2",
            "Request tokens must be a number, not 'three'",
        ),
        ("t.bin", b"\0\0\0\0", "t.bin", "not a text file"),
        ("t.txt", b"hello\n", "t.txt", "neither a Mooncake trace"),
    ],
)
def test_a_bad_trace_is_one_usage_error_naming_the_record(
    tmp_path: Path, name: str, content: bytes, where: str, why: str
) -> None:
    bad = tmp_path / name
    bad.write_bytes(content)
    with pytest.raises(UsageError) as caught:
        read_trace(str(bad), limit=10)
    line = caught.value.one_line()
    assert where in line and why in line, line
    assert "\n" not in line


def test_a_bad_trace_fails_the_bench_with_64_and_one_line(
    fake_process: Callable[..., FakeProcess], tmp_path: Path
) -> None:
    srv = started(fake_process)
    bad = tmp_path / "t.jsonl"
    bad.write_bytes(
        b'{"timestamp": 5, "input_length": 3, "output_length": 2}\n'
        b'{"timestamp": 4, "input_length": 3, "output_length": 2}\n'
    )
    code, _, stderr = run(srv, tmp_path / "run", "--dataset", f"trace:{bad}")
    assert code == 64, stderr
    lines = [x for x in stderr.splitlines() if x.startswith("proctor:")]
    assert len(lines) == 1 and "t.jsonl:2" in lines[0] and "sorted by time" in lines[0]
    assert "Traceback" not in stderr
    assert not (tmp_path / "run" / "metrics.json").exists()


def test_a_trace_larger_than_the_cap_is_refused_before_it_is_read_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    big = tmp_path / "big.jsonl"
    big.write_bytes(b'{"timestamp": 0, "input_length": 3, "output_length": 2}\n' * 40_000)
    monkeypatch.setattr(datafiles, "MAX_DATASET_BYTES", 1 << 20)
    with pytest.raises(UsageError, match="larger than 0 GiB: not read further"):
        read_trace(str(big), limit=10)


def test_a_million_requests_in_one_second_end_in_bounded_time_and_are_judged_late(
    fake_process: Callable[..., FakeProcess], tmp_path: Path
) -> None:
    """The adversary: 1e6 requests due within 1 s. Every record is read and checked, only the
    first --num-prompts are held and sent; the client cannot keep that schedule at
    concurrency 2, and the rate verdict says so from the recorded delays."""
    n = 1_000_000
    trace = tmp_path / "burst.csv"
    with trace.open("w") as f:
        f.write("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n")
        f.writelines(f"{i / n:.6f},m,2,1,3,API log\n" for i in range(n))
    srv = started(fake_process, "--ttft", "0.002")
    out = tmp_path / "run"
    code, stdout, stderr = run(
        srv, out, "--dataset", f"trace:{trace}", "--num-prompts", "150", "--concurrency", "2"
    )
    assert code == 0, stderr
    d = doc(out)
    assert d["dataset"]["cut"] == {"records": n, "replayed": 150, "by": "--num-prompts 150"}
    assert "cut: the first 150 of 1,000,000 records" in stdout
    rate = d["validity"]["checks"]["rate"]
    assert rate["ok"] is False and "the client sent requests late" in rate["detail"]
    assert d["schedule"]["schedule_delay_max_ms"] > delay_limit_ms(d["schedule"]["target_rate"])


def test_without_num_prompts_a_long_trace_is_cut_at_the_cap_with_a_note(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text(
        "".join(
            json.dumps({"timestamp": i, "input_length": 1, "output_length": 1}) + "\n"
            for i in range(50)
        )
    )
    held = read_trace(str(trace), limit=20)
    assert len(held) == 20 and held.kept == 50 and held.records == 50
    cfg = BenchConfig(dataset=f"trace:{trace}")
    info = _info(cfg, held, [t / cfg.trace_speed for t in held.times_s], None)
    assert info["cut"]["by"].startswith(f"the cap of {MAX_TRACE_REQUESTS:,} requests")
    assert "cut: the first 20 of 50 records" in trace_note(info)


@pytest.mark.parametrize(
    ("args", "why"),
    [
        (["--request-rate", "5"], "takes neither --workers nor a finite --request-rate"),
        (["--workers", "2", "--concurrency", "4"], "takes neither --workers"),
        (["--trace-speed", "0"], "trace_speed"),
        (["--trace-speed", "inf"], "trace_speed"),
    ],
)
def test_settings_a_trace_cannot_take_are_refused(
    tmp_path: Path, args: list[str], why: str
) -> None:
    r = loadgen(
        "--port", "9", "--output-dir", str(tmp_path / "o"), "--dataset", f"trace:{MOONCAKE}", *args
    )
    assert r.returncode == 64 and why in r.stderr, r.stderr


def test_trace_speed_without_a_trace_is_refused(tmp_path: Path) -> None:
    r = loadgen("--port", "9", "--output-dir", str(tmp_path / "o"), "--trace-speed", "2")
    assert r.returncode == 64 and "--trace-speed applies to --dataset trace:PATH only" in r.stderr


def _words_by_block(blocks: Blocks, text: str) -> list[list[str]]:
    words = text.split()
    out, b = [], 0
    while words:
        cap = blocks.capacity(b)
        out.append(words[:cap])
        words = words[cap:]
        b += 1
    return out


@settings(max_examples=60, deadline=None)
@given(
    chains=st.lists(
        st.tuples(
            st.lists(st.integers(0, 5), min_size=0, max_size=4),
            st.integers(1, 4 * BLOCK_TOKENS + 7),
        ),
        min_size=1,
        max_size=8,
    ),
    n_special=st.integers(0, 2),
    seed=st.integers(0, 3),
)
def test_blocks_named_alike_are_the_same_words_and_the_hits_oracle_agrees(
    chains: list[tuple[list[int], int]], n_special: int, seed: int
) -> None:
    """A law over any hash-id chains: a prompt has its planned number of words, block b of two
    prompts is the same words exactly when both name the same id there (a shared block), and
    expected_hits equals a cache simulated on the prompts' own words."""
    words = [f"w{i}" for i in range(50)]
    blocks = Blocks(words, n_special, seed)
    texts = []
    for i, (ids, n_in) in enumerate(chains):
        text, planned = blocks.prompt(n_in, tuple(ids), "r0", f"own{i}")
        assert planned == max(1, n_in - n_special) + n_special
        assert len(text.split()) == planned - n_special
        texts.append(_words_by_block(blocks, text))
    for i, ((ids_a, _), a) in enumerate(zip(chains, texts, strict=True)):
        for j, ((ids_b, _), b) in enumerate(zip(chains, texts, strict=True)):
            for k in range(min(len(a), len(b)) if i != j else 0):
                n = min(len(a[k]), len(b[k]))
                same = k < len(ids_a) and k < len(ids_b) and ids_a[k] == ids_b[k]
                if same:
                    assert a[k][:n] == b[k][:n]
                elif n >= 8:  # blocks of their own: 8 random words of 50 never repeat
                    assert a[k][:n] != b[k][:n]
    # The oracle: whole blocks cached by the text of the prompt up to and including them.
    seen: set[str] = set()
    hits = 0
    for blocks_of, (ids, _) in zip(texts, chains, strict=True):
        run = True
        for k, block in enumerate(blocks_of):
            if len(block) < blocks.capacity(k) or k >= len(ids):
                break
            key = " ".join(" ".join(x) for x in blocks_of[: k + 1])
            run = run and key in seen
            hits += BLOCK_TOKENS if run else 0
            seen.add(key)
    assert expected_hits([n for _, n in chains], [tuple(i) for i, _ in chains], n_special) == hits


def test_a_trace_of_absurd_lengths_is_cut_at_the_token_cap_or_refused(tmp_path: Path) -> None:
    """Every prompt is built before the replay: lengths that would not fit in memory are cut
    (the held records stay a prefix), and a first record alone over the cap is refused."""
    trace = tmp_path / "t.jsonl"
    lengths = [400, 500, 10**12, 3]
    trace.write_text(
        "".join(
            json.dumps({"timestamp": i, "input_length": n, "output_length": 1}) + "\n"
            for i, n in enumerate(lengths)
        )
    )
    held = read_trace(str(trace), limit=10, token_limit=1000)
    assert list(held.input_lens) == [400, 500] and held.kept == 4 and held.token_cut
    cfg = BenchConfig(dataset=f"trace:{trace}")
    info = _info(cfg, held, list(held.times_s), None)
    assert info["cut"] == {
        "records": 4,
        "replayed": 2,
        "by": f"the cap of {MAX_HELD_TOKENS:,} prompt tokens held by one bench",
    }
    with pytest.raises(UsageError, match="its first request alone asks for more than 300"):
        read_trace(str(trace), limit=10, token_limit=300)


@settings(max_examples=40, deadline=None)
@given(
    rows=st.lists(
        st.tuples(
            st.integers(0, 10**7), st.integers(0, 5000), st.integers(0, 900), st.integers(0, 4)
        ),
        min_size=1,
        max_size=30,
    ),
    burstgpt=st.booleans(),
    limit=st.integers(1, 40),
)
def test_any_sorted_trace_reads_back_relative_to_its_first_kept_record(
    tmp_path_factory: pytest.TempPathFactory,
    rows: list[tuple[int, int, int, int]],
    burstgpt: bool,
    limit: int,
) -> None:
    """A law over any sorted trace, in both forms: the held records are the first `limit` with
    both lengths above zero, in order, their times from the first of them (ms or s as the
    format says), the zero-length ones counted as skipped."""
    stamps = sorted(r[0] for r in rows)
    rows = [(s, n_in, n_out, k) for s, (_, n_in, n_out, k) in zip(stamps, rows, strict=True)]
    path = tmp_path_factory.mktemp("law") / ("t.csv" if burstgpt else "t.jsonl")
    if burstgpt:
        path.write_text(
            "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
            + "".join(f"{s},GPT-4,{i},{o},{i + o},API log\n" for s, i, o, _ in rows)
        )
    else:
        path.write_text(
            "".join(
                json.dumps(
                    {"timestamp": s, "input_length": i, "output_length": o, "hash_ids": [*range(k)]}
                )
                + "\n"
                for s, i, o, k in rows
            )
        )
    kept = [r for r in rows if r[1] > 0 and r[2] > 0]
    if not kept:
        with pytest.raises(UsageError, match="no request in the trace"):
            read_trace(str(path), limit=limit)
        return
    held = read_trace(str(path), limit=limit)
    want = kept[:limit]
    unit = 1.0 if burstgpt else 1e-3
    assert held.format == ("burstgpt" if burstgpt else "mooncake")
    assert (held.records, held.kept, held.skipped) == (len(rows), len(kept), len(rows) - len(kept))
    assert list(held.input_lens) == [r[1] for r in want]
    assert list(held.output_lens) == [r[2] for r in want]
    assert list(held.times_s) == pytest.approx([(r[0] - want[0][0]) * unit for r in want])
    assert held.hash_ids == [() if burstgpt else tuple(range(r[3])) for r in want]


def test_blocks_follow_the_seed_and_each_repeat_gets_its_own() -> None:
    words = [f"w{i}" for i in range(50)]
    a = Blocks(words, 1, seed=5).prompt(1500, (0, 1, 2), "r0", "r0:0")
    assert a == Blocks(words, 1, seed=5).prompt(1500, (0, 1, 2), "r0", "r0:0")  # reproducible
    assert a != Blocks(words, 1, seed=6).prompt(1500, (0, 1, 2), "r0", "r0:0")  # another seed
    again = Blocks(words, 1, seed=5).prompt(1500, (0, 1, 2), "r1", "r1:0")  # the next repeat
    assert a[0].split()[:8] != again[0].split()[:8]

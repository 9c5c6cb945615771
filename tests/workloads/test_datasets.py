"""bench --dataset (jsonl, sharegpt, shared-prefix, multi-turn) and --repeat, through the load
generator as a process against the fake server as a process: files, records, exit codes."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from proctor.workloads.loadgen.repeats import describe, t95
from tests.workloads.conftest import FakeProcess
from tests.workloads.test_entrypoint import loadgen, started

pytestmark = pytest.mark.timeout(120)

DATA = Path(__file__).resolve().parents[1] / "data" / "datasets"
FEW = ["--concurrency", "2", "--num-warmups", "1", "--no-progress", "--save-detailed"]


def run(srv: FakeProcess, out: Path, *args: str) -> tuple[int, str, str]:
    r = loadgen("--port", str(srv.port), "--output-dir", str(out), *FEW, *args)
    return r.returncode, r.stdout, r.stderr


def doc(out: Path) -> dict[str, Any]:
    return json.loads((out / "metrics.json").read_text())  # type: ignore[no-any-return]


def records(out: Path) -> list[dict[str, Any]]:
    lines = (out / "requests.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def test_jsonl_prompts_and_output_lengths_come_from_the_file(
    fake_process: Callable[..., FakeProcess], tmp_path: Path
) -> None:
    srv = started(fake_process)
    out = tmp_path / "run"
    code, stdout, stderr = run(
        srv, out, "--dataset", f"jsonl:{DATA / 'prompts.jsonl'}", "--num-prompts", "4", "--osl", "7"
    )
    assert code == 0, stderr
    d = doc(out)
    assert d["dataset"]["kind"] == "jsonl" and d["dataset"]["entries"] == 4
    assert len(d["dataset"]["sha256"]) == 64
    meas = [r for r in records(out) if not r["warmup"]]
    # output_len, max_tokens, output_len, and --osl for the line without one.
    assert [r["expected_output_len"] for r in meas] == [6, 4, 3, 7]
    assert [r["output_tokens"] for r in meas] == [6, 4, 3, 7]
    # Prompt lengths counted by the server's tokenizer (whitespace words in the fake).
    assert [r["prompt_len"] for r in meas] == [7, 9, 4, 8]
    assert "Dataset: jsonl" in stdout


@pytest.mark.parametrize(
    ("content", "where", "why"),
    [
        (b'{"prompt": "ok"}\n{"prompt": "ok", "output_len": "ten"}\n', ":2", "output_len"),
        (b'{"prompt": "ok"}\n\n{"prompt": 3}\n', ":3", "prompt must be"),
        (b'{"prompt": "ok"}\n{"prompt": "caf\xe9"}\n', ":2", "not UTF-8"),
        (b'{"prompt": "ok"}\n{prompt: x}\n', ":2", "not JSON"),
        (b"\n\n", "", "no prompt"),
    ],
)
def test_a_bad_jsonl_line_is_one_usage_error_naming_the_line(
    fake_process: Callable[..., FakeProcess],
    tmp_path: Path,
    content: bytes,
    where: str,
    why: str,
) -> None:
    srv = started(fake_process)
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(content)
    code, _, stderr = run(srv, tmp_path / "run", "--dataset", f"jsonl:{bad}")
    assert code == 64, stderr
    assert f"bad.jsonl{where}" in stderr and why in stderr
    assert "Traceback" not in stderr
    assert not (tmp_path / "run" / "metrics.json").exists()


@pytest.mark.parametrize(
    ("name", "content", "where", "why"),
    [
        (
            "c.json",
            b'[{"conversations": []}, {"turns": []}]',
            "c.json entry 2",
            "conversations list",
        ),
        ("c.json", b"[1]", "c.json entry 1", "conversations list"),
        (
            "c.jsonl",
            b'{"conversations": [{"from": "human", "value": 1}]}\n',
            "c.jsonl:1",
            "string value",
        ),
        (
            "c.json",
            b'[{"conversations": [{"from": "gpt", "value": "x"}]}]',
            "c.json",
            "no conversation",
        ),
        (
            "c.json",
            b'[\n{"conversations": [{"from": "human", "value": "\xff"}]}]',
            "c.json:2",
            "not UTF-8",
        ),
    ],
)
def test_a_bad_sharegpt_file_is_one_usage_error_naming_the_entry(
    fake_process: Callable[..., FakeProcess],
    tmp_path: Path,
    name: str,
    content: bytes,
    where: str,
    why: str,
) -> None:
    srv = started(fake_process)
    bad = tmp_path / name
    bad.write_bytes(content)
    for kind in ("sharegpt", "multi-turn"):
        code, _, stderr = run(srv, tmp_path / kind, "--dataset", f"{kind}:{bad}")
        assert code == 64, stderr
        assert where in stderr and why in stderr and "Traceback" not in stderr


def test_missing_dataset_file_and_bad_spec_are_usage_errors(
    fake_process: Callable[..., FakeProcess], tmp_path: Path
) -> None:
    srv = started(fake_process)
    code, _, stderr = run(srv, tmp_path / "a", "--dataset", f"jsonl:{tmp_path / 'nope.jsonl'}")
    assert code == 64 and "cannot read dataset" in stderr
    code, _, stderr = run(srv, tmp_path / "b", "--dataset", "sharegpt")
    assert code == 64 and "needs a file" in stderr
    code, _, stderr = run(srv, tmp_path / "c", "--dataset", "parquet:x")
    assert code == 64 and "must be one of" in stderr


def test_sharegpt_first_human_turn_with_the_gpt_reply_length(
    fake_process: Callable[..., FakeProcess], tmp_path: Path
) -> None:
    srv = started(fake_process)
    out = tmp_path / "run"
    code, _, stderr = run(
        srv, out, "--dataset", f"sharegpt:{DATA / 'sharegpt.json'}", "--num-prompts", "3"
    )
    assert code == 0, stderr
    d = doc(out)
    # Entry c has no human turn: skipped and counted.
    assert d["dataset"]["entries"] == 4 and d["dataset"]["skipped"] == 1
    meas = [r for r in records(out) if not r["warmup"]]
    # Replies: "The capital of France is Paris" (6 words), "one two ... all" (9), "hello" (1).
    assert [r["expected_output_len"] for r in meas] == [6, 9, 1]
    # The prompt is the first human turn only; the system turn is not sent.
    assert [r["prompt_tokens"] for r in meas] == [6, 5, 2]


def test_shared_prefix_reports_expected_and_achieved_hit_rate(
    fake_process: Callable[..., FakeProcess], tmp_path: Path
) -> None:
    srv = started(fake_process, "--prefix-block", "4")
    out = tmp_path / "run"
    code, stdout, stderr = run(
        srv,
        out,
        "--dataset",
        "shared-prefix",
        "--isl",
        "64",
        "--osl",
        "4",
        "--num-prompts",
        "16",
        "--prefix-groups",
        "2",
        "--prefix-hit-rate",
        "0.6",
    )
    assert code == 0, stderr
    info = doc(out)["dataset"]
    # P = 0.6 * 64 * 16 / (16 - 2) = 43.9 -> 44 tokens; expected (16-2)*44/(16*64) = 0.60.
    assert info["prefix_len"] == 44 and info["groups"] == 2
    assert info["expected_hit_rate"] == pytest.approx(0.6015625)
    hit = info["prefix_cache"]["hit_rate"]
    # The fake caches whole 4-token blocks: 44 of each later prompt's 64 tokens hit.
    assert hit == pytest.approx(14 * 44 / (16 * 64), abs=0.01)
    assert info["prefix_cache"]["queries_tokens"] == 16 * 64  # warmups are outside the window
    assert "Prefix cache hit rate: expected 60.2%, achieved" in stdout


def test_a_server_without_prefix_cache_counters_gives_no_rate_and_says_so(
    fake_process: Callable[..., FakeProcess], tmp_path: Path
) -> None:
    srv = started(fake_process, "--prefix-block", "0")
    out = tmp_path / "run"
    code, stdout, stderr = run(
        srv, out, "--dataset", "shared-prefix", "--isl", "32", "--osl", "2", "--num-prompts", "8"
    )
    assert code == 0, stderr
    cache = doc(out)["dataset"]["prefix_cache"]
    assert cache["hit_rate"] is None and "no prefix-cache counters" in cache["reason"]
    assert "achieved unknown" in stdout


def test_multi_turn_sends_turns_in_order_with_the_history(
    fake_process: Callable[..., FakeProcess], tmp_path: Path
) -> None:
    srv = started(fake_process, "--itl", "0.002")
    out = tmp_path / "run"
    code, _, stderr = run(
        srv, out, "--dataset", f"multi-turn:{DATA / 'conversations.jsonl'}", "--chat"
    )
    assert code == 0, stderr
    d = doc(out)
    assert d["dataset"]["conversations"] == 3 and d["dataset"]["turns"] == 6
    assert d["dataset"]["history"] == "dataset replies"
    meas = [r for r in records(out) if not r["warmup"]]
    assert len(meas) == 6 and all(r["success"] for r in meas)
    by_conv: dict[int, list[dict[str, Any]]] = {}
    for r in meas:
        by_conv.setdefault(r["conversation"], []).append(r)
    first = sorted(by_conv[0], key=lambda r: r["turn"])
    assert [r["turn"] for r in first] == [0, 1, 2]
    for a, b in itertools.pairwise(first):
        assert b["start_time"] >= a["end_time"]  # a turn waits for the previous one
    # The fake counts the words of every message: each turn carries the whole history
    # (user turns and the dataset's replies).
    assert [r["prompt_tokens"] for r in first] == [6, 6 + 7 + 4, 6 + 7 + 4 + 7 + 6]
    assert [r["expected_output_len"] for r in first] == [7, 7, 6]
    per_turn = d["dataset"]["per_turn"]
    assert [t["requests"] for t in per_turn] == [3, 2, 1]


def test_repeat_gives_each_metric_a_mean_and_confidence_interval(
    fake_process: Callable[..., FakeProcess], tmp_path: Path
) -> None:
    srv = started(fake_process, "--itl", "0.001")
    out = tmp_path / "run"
    code, stdout, stderr = run(
        srv, out, "--isl", "16", "--osl", "4", "--num-prompts", "6", "--repeat", "3"
    )
    assert code == 0, stderr
    d = doc(out)
    rep = d["repeats"]
    assert rep["n"] == 3 and len(rep["per_repeat"]) == 3
    s = rep["stats"]["output_throughput"]
    assert s["ci95_low"] <= s["mean"] <= s["ci95_high"]
    values = [r["output_throughput"] for r in rep["per_repeat"]]
    assert s["mean"] == pytest.approx(sum(values) / 3)
    assert s["ci95_half"] == pytest.approx(4.303 * s["stdev"] / 3**0.5)
    # Totals over the repeats, rates averaged; warmups once.
    assert d["metrics"]["completed"] == 18
    assert d["metrics"]["output_throughput"] == pytest.approx(s["mean"])
    assert d["warmup"]["count"] == 1
    meas = [r for r in records(out) if not r["warmup"]]
    assert sorted({r["repeat"] for r in meas}) == [0, 1, 2]
    # Each repeat sends its own prompts: the same ones would be answered from a prefix cache.
    assert len({r["index"] for r in meas}) == 18
    assert "Repeats: 3, mean ± 95% CI" in stdout


def test_t_critical_values_and_interval() -> None:
    assert t95(1) == pytest.approx(12.706)
    assert t95(9) == pytest.approx(2.262)
    assert t95(35) == pytest.approx(2.042)  # between rows: the lower df, wider
    assert t95(10_000) == pytest.approx(1.960)
    s = describe([10.0, 12.0, 14.0])
    assert s["mean"] == 12.0 and s["stdev"] == pytest.approx(2.0)
    assert s["ci95_half"] == pytest.approx(4.303 * 2.0 / 3**0.5)

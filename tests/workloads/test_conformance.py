"""Conformance of what was measured (issue 24 point 3): with ignore-eos every request produced
the output length asked for, the server counted the planned prompt lengths, and two runs with
one seed sent byte-identical prompts (by hash)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proctor.results.validity import judge_validity
from proctor.workloads.loadgen.conformance import (
    conformance_report,
    input_allowed,
    prompts_sha256,
)
from proctor.workloads.loadgen.records import RequestRecord
from tests.fixtures.fake_openai_server import FakeServer
from tests.helpers import proctor

pytestmark = pytest.mark.timeout(180)

BENCH = (
    "--isl",
    "8",
    "--osl",
    "6",
    "--range-ratio",
    "0",
    "--num-prompts",
    "6",
    "--concurrency",
    "2",
    "--num-warmups",
    "1",
    "--min-requests",
    "1",
    "--min-window",
    "0",
    "--json",
)


def _bench(url: str, runs: Path, *extra: str) -> dict[str, Any]:
    r = proctor("bench", "--base-url", url, *BENCH, *extra)
    assert r.returncode == 0, r.stderr
    run_id = json.loads(r.stdout)["run_id"]
    return json.loads((runs / run_id / "metrics.json").read_text())  # type: ignore[no-any-return]


def test_a_server_that_stops_early_under_ignore_eos_is_invalid(isolated_runs: Path) -> None:
    with FakeServer(output_tokens=2) as srv:  # ignores max_tokens=6: stops after 2
        doc = _bench(srv.base_url, isolated_runs, "--tokenizer-mode", "approx")
    out = doc["conformance"]["output"]
    assert (out["judged"], out["checked"], out["short"], out["long"]) == (True, 6, 6, 0)
    assert out["examples"][0]["asked"] == 6 and out["examples"][0]["produced"] == 2
    assert doc["validity"]["verdict"] == "INVALID"
    assert doc["validity"]["checks"]["conformance"]["ok"] is False
    assert "6 of 6 requests produced fewer output tokens" in " ".join(doc["validity"]["reasons"])


def test_a_conforming_server_passes_and_its_prompt_lengths_are_checked(
    isolated_runs: Path,
) -> None:
    with FakeServer() as srv:
        doc = _bench(srv.base_url, isolated_runs, "--tokenizer-mode", "server")
    section = doc["conformance"]
    assert section["output"]["judged"] and section["output"]["short"] == 0
    assert section["input"]["judged"] and section["input"]["off"] == 0, section["input"]
    assert doc["validity"]["checks"]["conformance"]["ok"] is True


def test_a_server_that_miscounts_prompts_is_invalid(isolated_runs: Path) -> None:
    with FakeServer(usage_prompt_tokens="400") as srv:  # 8-token prompts counted as 400
        doc = _bench(srv.base_url, isolated_runs, "--tokenizer-mode", "server")
    inp = doc["conformance"]["input"]
    assert (inp["judged"], inp["off"]) == (True, 6)
    assert doc["validity"]["checks"]["conformance"]["ok"] is False


def test_without_ignore_eos_or_exact_lengths_nothing_is_judged(isolated_runs: Path) -> None:
    with FakeServer(output_tokens=2) as srv:
        doc = _bench(srv.base_url, isolated_runs, "--tokenizer-mode", "approx", "--no-ignore-eos")
    assert doc["conformance"]["output"]["judged"] is False
    assert doc["conformance"]["input"] == {
        "judged": False,
        "reason": "planned lengths are approx, not exact",
    }
    assert doc["validity"]["checks"]["conformance"]["ok"] is True


def test_one_seed_sends_byte_identical_prompts_and_another_does_not(isolated_runs: Path) -> None:
    with FakeServer() as srv:
        hashes = [
            _bench(srv.base_url, isolated_runs, "--seed", seed)["conformance"]["prompts_sha256"]
            for seed in ("7", "7", "8")
        ]
    assert hashes[0] == hashes[1] != hashes[2]
    assert all(isinstance(h, str) and len(h) == 64 for h in hashes)


# -- laws --------------------------------------------------------------------------------------


@given(st.lists(st.text(max_size=20), max_size=6), st.lists(st.text(max_size=20), max_size=6))
def test_the_prompt_hash_is_of_the_sequence(a: list[str], b: list[str]) -> None:
    assert (prompts_sha256(a) == prompts_sha256(b)) == (a == b)


@given(st.lists(st.tuples(st.integers(1, 64), st.integers(0, 64)), min_size=1, max_size=30))
def test_output_counts_add_up_and_any_miss_is_invalid(pairs: list[tuple[int, int]]) -> None:
    recs = [
        RequestRecord(
            index=i, prompt_len=8, expected_output_len=asked, output_tokens=got, success=True
        )
        for i, (asked, got) in enumerate(pairs)
    ]
    section = conformance_report(
        recs, ignore_eos=True, chat=False, prompt_source="approx", prompts_hash=None
    )
    out = section["output"]
    short = sum(got < asked for asked, got in pairs)
    long = sum(got > asked for asked, got in pairs)
    assert (out["checked"], out["short"], out["long"]) == (len(pairs), short, long)
    doc = {"metrics": {"completed": len(pairs)}, "verdict": {"ok": True}, "conformance": section}
    ok = judge_validity(doc, None, min_requests=1, min_window_s=0).checks["conformance"]["ok"]
    assert ok == (short == long == 0)


@given(st.integers(1, 100_000), st.integers(-10, 10))
def test_the_input_tolerance_is_symmetric_and_at_least_the_floor(planned: int, d: int) -> None:
    allowed = input_allowed(planned)
    assert allowed >= 4
    recs = [
        RequestRecord(
            index=0,
            prompt_len=planned,
            expected_output_len=1,
            output_tokens=1,
            prompt_tokens=planned + s * d,
            success=True,
        )
        for s in (1, -1)
    ]
    inp = conformance_report(
        recs, ignore_eos=False, chat=False, prompt_source="server", prompts_hash=None
    )["input"]
    assert inp["off"] == (2 if abs(d) > allowed else 0)


def test_an_older_document_without_the_section_is_not_judged() -> None:
    doc = {"metrics": {"completed": 1}, "verdict": {"ok": True}}
    check = judge_validity(doc, None, min_requests=1, min_window_s=0).checks["conformance"]
    assert check == {"ok": True, "detail": "not measured (an older document)"}

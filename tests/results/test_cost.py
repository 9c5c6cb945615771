"""Cost per million output tokens (results/cost.py): the arithmetic, "not measured" (never 0)
without a price, and the `.cost.json` beside a run read by the store and by `runs compare`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from proctor.results.cost import COST_FILE, cost_of, format_cost
from proctor.results.parsers import parse_path
from proctor.store.db import Store

DOC = {
    "schema": "proctor.bench.metrics",
    "metrics": {"duration": 36.0, "total_output_tokens": 20_000, "output_throughput": 555.6},
}


def test_price_times_window_over_output_tokens() -> None:
    cost = cost_of(DOC, 2.5, 50.0, source="costPerHr from the Runpod API, 1 pod")
    # 2.5 USD/hr x 36 s = 0.025 USD for 20,000 tokens: 1.25 USD per million.
    assert cost["available"] is True
    assert cost["window_usd"] == pytest.approx(0.025)
    assert cost["usd_per_million_output_tokens"] == pytest.approx(1.25)
    assert cost["run_usd"] == pytest.approx(2.5 * 50 / 3600, rel=1e-4)
    line = format_cost(cost)
    assert line.startswith("Cost: $1.2500 per million output tokens ($2.5/hr, 20000 tokens")


@pytest.mark.parametrize(
    ("price", "doc", "why"),
    [
        (None, DOC, "price is unknown"),
        (2.5, {"metrics": {"duration": 0, "total_output_tokens": 10}}, "no measured window"),
        (2.5, {"metrics": {"duration": 5.0, "total_output_tokens": 0}}, "no output tokens"),
    ],
)
def test_unknown_is_not_measured_never_zero(price: float | None, doc: dict, why: str) -> None:
    cost = cost_of(doc, price, 10.0)
    assert cost["available"] is False and why in cost["reason"]
    assert "usd_per_million_output_tokens" not in cost
    assert format_cost(cost).startswith("Cost: not measured (")


def _run(tmp_path: Path, cost: dict) -> Path:
    run = tmp_path / "20261203-000000-bench-abcd"
    run.mkdir()
    (run / "metrics.json").write_text(json.dumps(DOC))
    (run / "record.json").write_text(
        json.dumps({"run_id": run.name, "kind": "bench", "schema_version": 1})
    )
    (run / COST_FILE).write_text(json.dumps(cost))
    return run


def test_store_and_compare_read_the_cost_beside_the_run(tmp_path: Path) -> None:
    run = _run(tmp_path, cost_of(DOC, 2.5, 50.0))
    parsed = parse_path(run)
    assert parsed.metrics["usd_per_million_output_tokens"].value == pytest.approx(1.25)
    assert parsed.metrics["usd_per_million_output_tokens"].direction == "lower"
    with Store(tmp_path / "proctor.sqlite") as store:
        assert store.index_run_dir(run)
        got = {m["name"]: m for m in store.metrics(run.name)}
    assert got["usd_per_million_output_tokens"]["value"] == pytest.approx(1.25)
    assert got["usd_per_million_output_tokens"]["unit"] == "USD/Mtok"
    assert got["run_cost_usd"]["unit"] == "USD"


def test_no_price_indexes_no_cost_metric(tmp_path: Path) -> None:
    run = _run(tmp_path, cost_of(DOC, None, 50.0))
    assert "usd_per_million_output_tokens" not in parse_path(run).metrics
    with Store(tmp_path / "proctor.sqlite") as store:
        store.index_run_dir(run)
        names = {m["name"] for m in store.metrics(run.name)}
    assert "output_throughput" in names and not names & {
        "usd_per_million_output_tokens",
        "run_cost_usd",
    }

"""The report's cost section of a bench: the run's `.cost.json` (results/cost.py), written by the
controller beside a bench fetched from a priced machine (Runpod)."""

from __future__ import annotations

from typing import Any

from proctor.report.load import RunView
from proctor.report.page import esc, table
from proctor.results.cost import read_cost


def _num(value: Any, digits: int) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return "n/a"
    return f"{value:,.{digits}f}"


def cost_block(view: RunView) -> str:
    cost = read_cost(view.run.path)
    if cost is None:
        return '<p class="note">cost: not measured (the run was not on a priced machine)</p>'
    if not cost.get("available"):
        return f'<p class="note">cost: not measured ({esc(cost.get("reason"))})</p>'
    rows = [
        ["USD per million output tokens", _num(cost.get("usd_per_million_output_tokens"), 4)],
        ["price (USD/hr)", f"{_num(cost.get('usd_per_hour'), 4)} ({cost.get('price_source')})"],
        ["measured window (s)", _num(cost.get("window_s"), 1)],
        ["output tokens", _num(cost.get("output_tokens"), 0)],
        ["window cost (USD)", _num(cost.get("window_usd"), 6)],
        [
            "run cost (USD)",
            f"{_num(cost.get('run_usd'), 6)} over {_num(cost.get('run_wall_s'), 1)} s",
        ],
    ]
    return table(["", "value"], rows)


__all__ = ["cost_block"]

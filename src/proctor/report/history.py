"""The history page: one metric across runs and commits, from the store.

    build_history(runs_dir, store_path, metric, name=, kind=, since=, x="time"|"commit")
    load_history(store, metric, name=, kind=, since=) -> [Point] (Store.metric_history)
    history_report(points, metric, x) -> Report

A point per run that has the metric (its metrics.json, indexed in the store), at the time
the run was created or at its commit (commits in the order they were first run; a dirty
tree is its own column, `abc1234*`), with its verdict: VALID, INVALID (the run's `valid`
metric is 0), the outcome of a run that did not end ok, or `ok` for a run with no validity
verdict. Each verdict is drawn as its own trace with its own marker, so an INVALID run never
reads as a measurement; hovering a point names its run id, name, commit and verdict.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta, timezone
from pathlib import Path
from statistics import median
from typing import Any, Literal

from proctor.errors import UsageError
from proctor.report.build import Report, _footer
from proctor.report.figures import Figure, axis_time, zone_name
from proctor.report.page import badge, esc, figure_block, render_page, table
from proctor.report.series import parse_time
from proctor.report.verdict import fmt_value
from proctor.store.db import Store, open_up_to_date

XAxis = Literal["time", "commit"]
X_AXES: tuple[str, ...] = ("time", "commit")

# verdict -> (badge class, marker): INVALID is a hollow red cross, never a filled dot.
STYLES: dict[str, tuple[str, dict[str, Any]]] = {
    "VALID": ("ok", {"symbol": "circle", "size": 9, "color": "#0072B2"}),
    "ok": ("ok", {"symbol": "circle", "size": 9, "color": "#009E73"}),
    "INVALID": (
        "fail",
        {"symbol": "x-open", "size": 10, "color": "#D55E00", "line": {"width": 2}},
    ),
}
OTHER_STYLE: dict[str, Any] = {"symbol": "diamond-open", "size": 9, "color": "#5f6368"}


@dataclass(frozen=True)
class Point:
    run_id: str
    name: str
    kind: str
    created_at: str | None
    commit: str | None
    dirty: bool
    value: float
    unit: str
    verdict: str

    @property
    def commit_label(self) -> str:
        if not self.commit:
            return "no commit"
        return self.commit[:10] + ("*" if self.dirty else "")


def verdict_of_row(row: dict[str, Any]) -> str:
    """VALID/INVALID from the run's `valid` metric when it ended ok; its outcome otherwise."""
    outcome = str(row.get("outcome") or "unknown")
    if outcome != "ok":
        return outcome
    valid = row.get("valid")
    if valid is None:
        return "ok"
    return "VALID" if valid else "INVALID"


def points_of(rows: Sequence[dict[str, Any]]) -> list[Point]:
    return [
        Point(
            run_id=str(r["id"]),
            name=str(r.get("name") or ""),
            kind=str(r.get("kind") or ""),
            created_at=r.get("created_at"),
            commit=r.get("source_commit"),
            dirty=bool(r.get("source_dirty")),
            value=float(r["value"]),
            unit=str(r.get("unit") or ""),
            verdict=verdict_of_row(r),
        )
        for r in rows
    ]


def load_history(
    store: Store,
    metric: str,
    *,
    name: str | None = None,
    kind: str | None = None,
    since: str | None = None,
) -> list[Point]:
    """The points of `metric`, oldest first; UsageError (naming the metrics there are) when
    no run matches."""
    points = points_of(store.metric_history(metric, name=name, kind=kind, since=since))
    if points:
        return points
    filters = ", ".join(
        f"{label} {value}"
        for label, value in (("name", name), ("kind", kind), ("since", since))
        if value
    )
    known = store.metric_names(kind)
    close = difflib.get_close_matches(metric, known, n=3, cutoff=0.6)
    shown = ", ".join(known[:12]) + (f" (+{len(known) - 12} more)" if len(known) > 12 else "")
    hint = f"metrics in the store: {shown}" if known else "no run in the store has metrics"
    raise UsageError(
        f"no run has metric {metric!r}" + (f" ({filters})" if filters else ""),
        hint=f"did you mean {' or '.join(close)}?" if close else hint,
    )


def _zone(points: Sequence[Point]) -> timezone:
    for point in reversed(points):
        when = parse_time(point.created_at)
        if when is not None and when.tzinfo is not None:
            return timezone(when.utcoffset() or timedelta(0))
    return timezone.utc


def history_figure(points: Sequence[Point], metric: str, x: XAxis = "time") -> Figure:
    zone = _zone(points)
    unit = next((p.unit for p in points if p.unit), "")
    commits: list[str] = []
    for point in points:
        if point.commit_label not in commits:
            commits.append(point.commit_label)

    def where(point: Point) -> Any:
        return point.commit_label if x == "commit" else axis_time(point.created_at or "", zone)

    drawn = [p for p in points if where(p) is not None]
    # A thin line in run order under the points: the trend, whatever each verdict is.
    data: list[dict[str, Any]] = [
        {
            "type": "scatter",
            "mode": "lines",
            "name": "in run order",
            "x": [where(p) for p in drawn],
            "y": [p.value for p in drawn],
            "line": {"color": "#c9ced6", "width": 1},
            "hoverinfo": "skip",
        }
    ]
    order = ["VALID", "ok", "INVALID"]
    verdicts = order + sorted({p.verdict for p in drawn} - set(order))
    for verdict in verdicts:
        group = [p for p in drawn if p.verdict == verdict]
        if not group:
            continue
        marker = STYLES[verdict][1] if verdict in STYLES else OTHER_STYLE
        data.append(
            {
                "type": "scatter",
                "mode": "markers",
                "name": verdict,
                "x": [where(p) for p in group],
                "y": [p.value for p in group],
                "marker": marker,
                "customdata": [
                    [p.run_id, p.name, p.commit_label, p.verdict, p.created_at or ""] for p in group
                ],
                "hovertemplate": (
                    "%{customdata[0]}<br>%{customdata[1]}<br>commit %{customdata[2]}<br>"
                    "%{customdata[4]}<br>%{customdata[3]}: %{y}"
                    + (f" {unit}" if unit else "")
                    + "<extra></extra>"
                ),
            }
        )
    xaxis: dict[str, Any] = (
        {
            "title": {"text": "commit (first run left; * dirty tree)"},
            "type": "category",
            "categoryorder": "array",
            "categoryarray": commits,
        }
        if x == "commit"
        else {"title": {"text": f"run created ({zone_name(zone)})"}, "type": "date"}
    )
    layout = {
        "title": {"text": f"{metric} across {len(drawn)} run(s)"},
        "xaxis": xaxis,
        "yaxis": {"title": {"text": f"{metric} ({unit})" if unit else metric}},
        "margin": {"l": 70, "r": 20, "t": 50, "b": 60},
        "legend": {"orientation": "h", "y": -0.25},
        "hovermode": "closest",
        "height": 480,
    }
    note = "INVALID runs are hollow red crosses: a measurement that does not count."
    return Figure("history", f"{metric} history", data, layout, note)


def summary_card(points: Sequence[Point], metric: str) -> str:
    values = [p.value for p in points]
    unit = points[-1].unit
    invalid = sum(1 for p in points if p.verdict == "INVALID")
    counted = [p.value for p in points if p.verdict in ("VALID", "ok")]
    tiles = [
        (f"{len(points):,}", "runs"),
        (fmt_value(points[-1].value, unit), f"latest ({points[-1].verdict})"),
        (fmt_value(median(counted), unit) if counted else "n/a", "median of VALID/ok"),
        (f"{fmt_value(min(values), unit)} .. {fmt_value(max(values), unit)}", "range (all)"),
        (f"{invalid:,}", "INVALID runs"),
        (f"{len({p.commit_label for p in points}):,}", "commits"),
    ]
    html = "".join(
        f'<div class="tile"><b>{esc(value)}</b><span>{esc(label)}</span></div>'
        for value, label in tiles
    )
    return (
        f'<section class="card"><h3>{esc(metric)}{f" ({esc(unit)})" if unit else ""}</h3>'
        f'<div class="tiles">{html}</div></section>'
    )


def runs_table(points: Sequence[Point]) -> str:
    rows = [
        [
            p.created_at or "",
            p.run_id,
            p.name,
            p.kind,
            p.commit_label,
            (fmt_value(p.value, p.unit), "num"),
            badge(p.verdict, STYLES[p.verdict][0] if p.verdict in STYLES else p.verdict),
        ]
        for p in reversed(points)
    ]
    return table(
        ["created", "run", "name", "kind", "commit", "value", "verdict"], rows, raw_columns=(6,)
    )


def history_report(
    points: Sequence[Point], metric: str, x: XAxis = "time", filters: str = ""
) -> Report:
    """The page: a summary card, the figure, and every run (newest first)."""
    fig = history_figure(points, metric, x)
    where = f" ({filters})" if filters else ""
    title = f"proctor history: {metric}{where}"
    blocks = [
        f"<h1>{esc(metric)} across runs{esc(where)}</h1>",
        summary_card(points, metric),
        figure_block(fig),
        "<h2>Runs</h2>",
        runs_table(points),
    ]
    html = render_page(title, blocks, [fig], _footer())
    report = Report("history", title, html, [], [fig], default_name(metric))
    report.runs = [p.run_id for p in points]
    return report


def build_history(
    runs_dir: Path,
    store_path: Path,
    metric: str,
    *,
    name: str | None = None,
    kind: str | None = None,
    since: str | None = None,
    x: str = "time",
) -> Report:
    """The history page of `metric` from the store at `store_path` (runs it is missing
    indexed first, as `runs list` does; from the run directories when it cannot be used)."""
    if x not in X_AXES:
        raise UsageError(f"invalid --x {x!r}", hint="give time or commit")
    axis: XAxis = "commit" if x == "commit" else "time"
    store, _warning = open_up_to_date(store_path, runs_dir)
    try:
        points = load_history(store, metric, name=name, kind=kind, since=since)
    finally:
        store.close()
    filters = ", ".join(
        f"{label} {value}"
        for label, value in (("name", name), ("kind", kind), ("since", since))
        if value
    )
    return history_report(points, metric, axis, filters)


def default_name(metric: str) -> str:
    return "history-" + (re.sub(r"[^A-Za-z0-9_.-]+", "_", metric).strip("._") or "metric")


__all__ = [
    "X_AXES",
    "Point",
    "build_history",
    "default_name",
    "history_figure",
    "history_report",
    "load_history",
    "points_of",
    "runs_table",
    "summary_card",
    "verdict_of_row",
]

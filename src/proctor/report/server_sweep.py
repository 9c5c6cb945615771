"""The report of a server sweep: its summary table (server point x bench point), throughput
against latency (one line per server point) and the Pareto front of tokens/s per user against
tokens/s per GPU, from the sweep's summary.json."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from proctor.record.rundir import RunDir, is_run_id
from proctor.record.schema import read_view
from proctor.report.build import Report, Subject, _fmt, _footer, run_header
from proctor.report.figures import Figure, _layout, colour
from proctor.report.load import load_run
from proctor.report.page import figure_block, render_page, table
from proctor.report.verdict import fmt_value
from proctor.results.names import metric_info
from proctor.server_sweep import SUMMARY_METRICS, pareto_front, point_key


def newest_server_sweep(runs_dir: Path, group: str) -> RunDir | None:
    """The newest server-sweep run of `group` (each invocation of a group is a run)."""
    found = None
    if not runs_dir.is_dir():
        return None
    for path in sorted(runs_dir.iterdir()):
        if is_run_id(path.name):
            record = read_view(path)
            if record.kind == "server-sweep" and record.group == group:
                found = RunDir(path)
    return found


def server_sweep_report(sweep: RunDir) -> Report:
    summary = sweep.read_json("summary.json") or {}
    rows: list[dict[str, Any]] = list(summary.get("rows") or [])
    front = pareto_front(rows)
    view = load_run(sweep)
    figures = _figures(rows, front)
    group = str(summary.get("group") or view.name)
    blocks = [run_header(view), "<h2>Summary</h2>", _table(rows, set(front))]
    blocks += [figure_block(f) for f in figures] or ['<p class="note">no benchmark metrics</p>']
    title = f"proctor report: server sweep {group} ({sweep.run_id})"
    html = render_page(title, blocks, figures, _footer())
    return Report(
        "server-sweep",
        title,
        html,
        [Subject(group, [view], group=group)],
        figures,
        f"server-sweep-{group}",
    )


def _table(rows: list[dict[str, Any]], front: set[int]) -> str:
    columns = [
        "server",
        "bench",
        *SUMMARY_METRICS,
        "tok/s/user",
        "tok/s/GPU",
        "exit",
        "Pareto",
        "flow",
    ]
    body = []
    for i, r in enumerate(rows):
        m = r.get("metrics") or {}
        cells: list[Any] = [point_key(r.get("server") or {}), point_key(r.get("bench") or {})]
        cells += [(fmt_value(m.get(k), metric_info(k).unit), "num") for k in SUMMARY_METRICS]
        cells += [(_fmt(r.get("tok_s_per_user")), "num"), (_fmt(r.get("tok_s_per_gpu")), "num")]
        cells += [str(r.get("exit_code")), "yes" if i in front else "", str(r.get("flow_run"))]
        body.append(cells)
    return table(columns, body)


def _figures(rows: list[dict[str, Any]], front: list[int]) -> list[Figure]:
    ok = [r for r in rows if r.get("exit_code") == 0 and (r.get("metrics") or {})]
    by_server: dict[str, list[dict[str, Any]]] = {}
    for r in ok:
        by_server.setdefault(point_key(r["server"]), []).append(r)
    lines = []
    for i, (name, members) in enumerate(by_server.items()):
        pts = [r for r in members if "p99_tpot_ms" in r["metrics"]]
        lines.append(
            {
                "type": "scatter",
                "mode": "lines+markers",
                "name": name,
                "x": [r["metrics"]["p99_tpot_ms"] for r in pts],
                "y": [r["metrics"].get("output_throughput") for r in pts],
                "text": [point_key(r["bench"]) for r in pts],
                "line": {"color": colour(i)},
                "hovertemplate": "%{text}: %{y:.1f} tok/s at %{x:.2f} ms<extra></extra>",
            }
        )
    figures = []
    if lines:
        figures.append(
            Figure(
                "server-sweep-throughput-latency",
                "Throughput against latency",
                lines,
                _layout("Throughput against latency", "p99 TPOT (ms)", "output tokens/s"),
            )
        )
    scored = [r for r in ok if r.get("tok_s_per_user") and r.get("tok_s_per_gpu")]
    if scored:
        best = [rows[i] for i in front]
        label = [point_key({**r["server"], **r["bench"]}) for r in scored]
        data = [
            {
                "type": "scatter",
                "mode": "markers",
                "name": "points",
                "text": label,
                "x": [r["tok_s_per_user"] for r in scored],
                "y": [r["tok_s_per_gpu"] for r in scored],
                "marker": {"color": "#999999"},
                "hovertemplate": "%{text}<extra></extra>",
            },
            {
                "type": "scatter",
                "mode": "lines+markers",
                "name": "Pareto front",
                "x": [r["tok_s_per_user"] for r in best],
                "y": [r["tok_s_per_gpu"] for r in best],
                "text": [point_key({**r["server"], **r["bench"]}) for r in best],
                "line": {"color": "#D55E00"},
                "hovertemplate": "%{text}<extra></extra>",
            },
        ]
        figures.append(
            Figure(
                "server-sweep-pareto",
                "Pareto front",
                data,
                _layout(
                    "Pareto front",
                    "tokens/s per user (1000 / median TPOT)",
                    "output tokens/s per GPU",
                ),
            )
        )
    return figures


__all__ = ["newest_server_sweep", "server_sweep_report"]

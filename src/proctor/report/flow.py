"""The report of a flow: its server's GPU timeline with the flow's steps, then one section per
workload (what ran, its exit, its results), in the order the flow ran them."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeGuard

from proctor.record.rundir import RunDir
from proctor.record.schema import FlowRecord, FlowWorkloadRun, RecordCore
from proctor.report.build import (
    Report,
    Subject,
    _footer,
    eval_block,
    gpu_block,
    metrics_table,
    run_header,
)
from proctor.report.figures import Figure, latency_cdfs
from proctor.report.headline import headline_card
from proctor.report.load import RunView, load_run
from proctor.report.page import badge, esc, figure_block, render_page, table
from proctor.report.series import read_server_csv
from proctor.report.telemetry import telemetry_blocks
from proctor.report.verdict import fmt_value, verdict_of
from proctor.results.baselines import Baseline

# The few figures a workload's row shows; the section below it has every metric.
HEADLINE = (
    ("output tok/s", "output_throughput"),
    ("p99 TTFT ms", "p99_ttft_ms"),
    ("p99 TPOT ms", "p99_tpot_ms"),
    ("GSM8K flexible", "gsm8k_exact_match_flexible"),
    ("GSM8K strict", "gsm8k_exact_match_strict"),
)


def is_flow_with_workloads(record: RecordCore) -> TypeGuard[FlowRecord]:
    return isinstance(record, FlowRecord) and bool(record.workload_runs)


def flow_report(
    runs_dir: Path,
    record: FlowRecord,
    baseline: Baseline | None = None,
    model: str | None = None,
) -> Report:
    figures: list[Figure] = []
    flow_view = load_run(RunDir(runs_dir / record.run_id))
    views: list[RunView] = [flow_view]
    cards = [headline_card(flow_view, "the flow")]
    for row in record.workload_runs:  # each workload's verdict and numbers, before the detail
        if row.run_id and (runs_dir / row.run_id).is_dir():
            cards.append(
                headline_card(
                    load_run(RunDir(runs_dir / row.run_id)),
                    f"{row.index + 1}. {row.name} ({row.kind})",
                )
            )
    blocks = [run_header(flow_view, lead="".join(cards))]
    server_id = record.server_run
    if server_id and (runs_dir / server_id).is_dir():
        server = load_run(RunDir(runs_dir / server_id))
        if not server.server.traces:
            # The flow scraped its server's /metrics from ready to teardown into its own directory.
            server.server = read_server_csv(runs_dir / record.run_id / "server_metrics.csv")
        views.append(server)
        blocks += ["<h2>GPU memory (server)</h2>", gpu_block([server], figures, "gpu-memory")]
        # As a run's report: the server's queue and KV cache on one time axis with the GPU.
        blocks += telemetry_blocks(server, figures)
    loaded: list[tuple[FlowWorkloadRun, RunView | None]] = []
    for row in record.workload_runs:
        view = load_run(RunDir(runs_dir / row.run_id)) if row.run_id else None
        loaded.append((row, view))
        if view is not None:
            views.append(view)
    blocks += ["<h2>Workloads, in the order they ran</h2>", _workloads_table(loaded)]
    for i, (row, view) in enumerate(loaded):
        blocks.append(f"<h2>{i + 1}. {esc(row.name)} ({esc(row.kind)})</h2>")
        if view is None:
            blocks.append('<p class="note">no run: the workload did not start</p>')
            continue
        if view.kind == "gsm8k":
            blocks.append(eval_block([view], baseline, model, figures))
        elif view.latencies:
            cdfs = latency_cdfs([view], prefix=f"latency-cdf-{i}")
            figures += cdfs
            blocks += [figure_block(f) for f in cdfs]
        blocks.append(metrics_table(view))
    title = f"proctor report: flow {record.name or ''} ({record.run_id})"
    html = render_page(title, blocks, figures, _footer())
    return Report("flow", title, html, [Subject(record.run_id, views)], figures, record.run_id)


def _workloads_table(loaded: list[tuple[FlowWorkloadRun, RunView | None]]) -> str:
    rows = []
    for row, view in loaded:
        code = row.exit_code
        # The workload run's verdict (a bench that exited 0 may be INVALID), else its exit.
        verdict = verdict_of(view) if view is not None else None
        status, css = (
            (verdict.text, verdict.css)
            if verdict is not None
            else ("ok", "ok")
            if code == 0
            else ("failed", "failed")
        )
        cells: list[Any] = [
            str(row.index + 1),
            str(row.name),
            str(row.kind),
            str(row.run_id or "-"),
            (badge(status, css), ""),
            "-" if code is None else str(code),
        ]
        for _, metric in HEADLINE:
            m = view.metrics.get(metric) if view is not None else None
            cells.append((fmt_value(m.value, m.unit) if m else "", "num"))
        rows.append(cells)
    columns = ["#", "workload", "kind", "run", "outcome", "exit", *[h for h, _ in HEADLINE]]
    return table(columns, rows, raw_columns=(4,))


__all__ = ["flow_report", "is_flow_with_workloads"]

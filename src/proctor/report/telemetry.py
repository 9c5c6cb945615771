"""Report blocks for a bench's validity verdict, the server's view against the client's, and
energy per token (metrics.json "validity", "server", "energy"); the timeline figure of the
server's queue with the GPUs' power is in figures.timeline."""

from __future__ import annotations

from typing import Any

from proctor.jobs.documents import (
    BenchDocument,
    Reconcile,
    ReconcileCheck,
    ServerHistogram,
    Stat,
)
from proctor.report.figures import Figure, timeline
from proctor.report.load import RunView
from proctor.report.page import badge, esc, figure_block, table


def _num(value: Any, unit: str = "", digits: int = 2) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return "n/a"
    return f"{value:,.{digits}f} {unit}".strip()


def validity_block(doc: BenchDocument) -> str:
    validity = doc.validity
    if validity is None:
        return '<p class="note">no validity verdict in metrics.json</p>'
    verdict = str(validity.verdict)
    head = f"<p>{badge(verdict, 'ok' if verdict == 'VALID' else 'fail')}</p>"
    rows = [
        [name, ("ok", "ok") if c.ok else ("fail", "fail"), c.detail]
        for name, c in validity.checks.items()
    ]
    return head + table(["check", "result", "detail"], rows)


def _agree(check: ReconcileCheck | None) -> tuple[str, str]:
    if check is None:
        return ("", "")
    return ("agree", "ok") if check.ok else ("DISAGREE", "fail")


def server_block(doc: BenchDocument) -> str:
    server = doc.server
    if server is None:
        return '<p class="note">no server metrics in metrics.json</p>'
    if not server.available or server.window is None:
        return f'<p class="note">server metrics: none ({esc(server.note)})</p>'
    stats = doc.stats_ms.get("ttft") or Stat()
    ttft = server.ttft_ms or ServerHistogram()
    rec = server.reconcile or Reconcile()
    percentiles = stats.percentiles
    rows: list[list[Any]] = [
        [
            "generated tokens",
            _num(server.generation_tokens, digits=0),
            _num(doc.metrics.raw("total_output_tokens"), digits=0),
            _agree(rec.tokens),
        ],
        ["mean TTFT (ms)", _num(ttft.mean), _num(stats.mean), _agree(rec.ttft_mean_ms)],
        ["median TTFT (ms)", _num(ttft.p50), _num(stats.median), ""],
        [
            "p99 TTFT (ms)",
            _num(ttft.p99),
            _num(percentiles.get("99.0", percentiles.get("99"))),
            "",
        ],
        [
            "requests",
            _num(ttft.count, digits=0),
            _num(doc.metrics.raw("completed"), digits=0),
            "",
        ],
    ]
    extra = [
        f"{key.replace('_', ' ')}: {_num(getattr(server, key))}"
        for key in ("running_max", "waiting_max", "kv_cache_usage_max")
        if key in server.model_fields_set
    ]
    cache = server.prefix_cache
    if cache is not None and cache.hit_rate is not None:
        extra.append(f"prefix-cache hit rate: {cache.hit_rate:.1%}")
    note = (
        f'<p class="note">{esc(server.engine)}, {esc(server.scrapes)} scrapes '
        f"of {esc(server.url)}; {esc('; '.join(extra))}. Server percentiles are "
        "interpolated within its histogram buckets.</p>"
    )
    return table(["", "server", "client", ""], rows) + note


def energy_block(doc: BenchDocument) -> str:
    energy = doc.energy
    if energy is None:
        return '<p class="note">no energy figures in metrics.json</p>'
    if not energy.available:
        return f'<p class="note">energy: not measured ({esc(energy.reason)})</p>'
    rows = [
        ["energy per output token", _num(energy.j_per_output_token, "J", 4)],
        ["gross (idle included)", _num(energy.gross_j_per_output_token, "J", 4)],
        ["mean GPU power", _num(energy.mean_power_w, "W", 1)],
        [
            "idle GPU power",
            f"{_num(energy.idle_power_w, 'W', 1)} ({energy.idle_source})",
        ],
        ["window", _num(energy.window_s, "s", 1)],
        ["GPUs", str(energy.gpus)],
    ]
    return table(["", "value"], rows)


def telemetry_blocks(view: RunView, figures: list[Figure]) -> list[str]:
    """The report's sections for one bench run (nothing for runs that are not benches)."""
    blocks: list[str] = []
    fig = timeline([view], "timeline")
    if fig is not None:
        figures.append(fig)
        blocks += ["<h2>Server and GPU over time</h2>", figure_block(fig)]
    doc = view.bench
    if doc is not None:
        blocks += [
            "<h2>Validity</h2>",
            validity_block(doc),
            "<h2>Server against client</h2>",
            server_block(doc),
            "<h2>Energy</h2>",
            energy_block(doc),
        ]
    return blocks

"""Report blocks for a bench's validity verdict, the server's view against the client's, and
energy per token (metrics.json "validity", "server", "energy"); the timeline figure of the
server's queue with the GPUs' power is in figures.timeline."""

from __future__ import annotations

from typing import Any

from proctor.report.figures import Figure, timeline
from proctor.report.load import RunView
from proctor.report.page import badge, esc, figure_block, table


def _num(value: Any, unit: str = "", digits: int = 2) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return "n/a"
    return f"{value:,.{digits}f} {unit}".strip()


def validity_block(doc: dict[str, Any]) -> str:
    validity = doc.get("validity")
    if not isinstance(validity, dict):
        return '<p class="note">no validity verdict in metrics.json</p>'
    verdict = str(validity.get("verdict"))
    head = f"<p>{badge(verdict, 'ok' if verdict == 'VALID' else 'fail')}</p>"
    checks = (validity.get("checks") or {}).items()
    rows = [
        [name, ("ok", "ok") if c.get("ok") else ("fail", "fail"), str(c.get("detail"))]
        for name, c in checks
    ]
    return head + table(["check", "result", "detail"], rows)


def server_block(doc: dict[str, Any]) -> str:
    server = doc.get("server")
    if not isinstance(server, dict):
        return '<p class="note">no server metrics in metrics.json</p>'
    if not server.get("available") or "window" not in server:
        return f'<p class="note">server metrics: none ({esc(server.get("note"))})</p>'
    stats = (doc.get("stats_ms") or {}).get("ttft") or {}
    ttft = server.get("ttft_ms") or {}
    rec = server.get("reconcile") or {}
    tokens, mean = rec.get("tokens") or {}, rec.get("ttft_mean_ms") or {}

    def agree(check: dict[str, Any]) -> tuple[str, str]:
        if not check:
            return ("", "")
        return ("agree", "ok") if check.get("ok") else ("DISAGREE", "fail")

    percentiles = stats.get("percentiles") or {}
    rows: list[list[Any]] = [
        [
            "generated tokens",
            _num(server.get("generation_tokens"), digits=0),
            _num((doc.get("metrics") or {}).get("total_output_tokens"), digits=0),
            agree(tokens),
        ],
        ["mean TTFT (ms)", _num(ttft.get("mean")), _num(stats.get("mean")), agree(mean)],
        ["median TTFT (ms)", _num(ttft.get("p50")), _num(stats.get("median")), ""],
        [
            "p99 TTFT (ms)",
            _num(ttft.get("p99")),
            _num(percentiles.get("99.0", percentiles.get("99"))),
            "",
        ],
        [
            "requests",
            _num(ttft.get("count"), digits=0),
            _num((doc.get("metrics") or {}).get("completed"), digits=0),
            "",
        ],
    ]
    extra = [
        f"{key.replace('_', ' ')}: {_num(server.get(key))}"
        for key in ("running_max", "waiting_max", "kv_cache_usage_max")
        if key in server
    ]
    cache = server.get("prefix_cache")
    if isinstance(cache, dict) and cache.get("hit_rate") is not None:
        extra.append(f"prefix-cache hit rate: {cache['hit_rate']:.1%}")
    note = (
        f'<p class="note">{esc(server.get("engine"))}, {esc(server.get("scrapes"))} scrapes '
        f"of {esc(server.get('url'))}; {esc('; '.join(extra))}. Server percentiles are "
        "interpolated within its histogram buckets.</p>"
    )
    return table(["", "server", "client", ""], rows) + note


def energy_block(doc: dict[str, Any]) -> str:
    energy = doc.get("energy")
    if not isinstance(energy, dict):
        return '<p class="note">no energy figures in metrics.json</p>'
    if not energy.get("available"):
        return f'<p class="note">energy: not measured ({esc(energy.get("reason"))})</p>'
    rows = [
        ["energy per output token", _num(energy.get("j_per_output_token"), "J", 4)],
        ["gross (idle included)", _num(energy.get("gross_j_per_output_token"), "J", 4)],
        ["mean GPU power", _num(energy.get("mean_power_w"), "W", 1)],
        [
            "idle GPU power",
            f"{_num(energy.get('idle_power_w'), 'W', 1)} ({energy.get('idle_source')})",
        ],
        ["window", _num(energy.get("window_s"), "s", 1)],
        ["GPUs", str(energy.get("gpus"))],
    ]
    return table(["", "value"], rows)


def telemetry_blocks(view: RunView, figures: list[Figure]) -> list[str]:
    """The report's sections for one bench run (nothing for runs that are not benches)."""
    blocks: list[str] = []
    fig = timeline([view], "timeline")
    if fig is not None:
        figures.append(fig)
        blocks += ["<h2>Server and GPU over time</h2>", figure_block(fig)]
    doc = view.metrics_doc or {}
    if view.kind == "bench":
        blocks += [
            "<h2>Validity</h2>",
            validity_block(doc),
            "<h2>Server against client</h2>",
            server_block(doc),
            "<h2>Energy</h2>",
            energy_block(doc),
        ]
    return blocks

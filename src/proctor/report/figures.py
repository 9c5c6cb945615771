"""Plotly figures as plain dicts (data + layout), built from loaded runs.

Plain dicts, not plotly.graph_objects: nothing to validate at build time, and the page
hands them to plotly.js as they are. Times go on the axis as local wall-clock strings of one
time zone (plotly.js does not read ISO offsets) and the axis title names that zone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from proctor.report.load import Phase, RunView
from proctor.report.series import LATENCY_KINDS, cdf_points, parse_time

# Colour-blind-safe palette (Okabe-Ito), cycled per run or GPU.
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000")
PHASE_COLOURS = {
    "start": "#009E73",
    "ready": "#0072B2",
    "workload": "#E69F00",
    "workload end": "#E69F00",
    "drain": "#CC79A7",
    "drained": "#CC79A7",
    "stop": "#D55E00",
    "stop (time limit)": "#D55E00",
    "end": "#555555",
    "plateau": "#56B4E9",
    "drain-out": "#56B4E9",
}
KIND_TITLES = {
    "ttft": "Time to first token (TTFT)",
    "tpot": "Time per output token (TPOT)",
    "itl": "Inter-token latency (ITL)",
    "e2el": "End-to-end latency (E2EL)",
}


DEFAULT_HEIGHT = 430  # px, a figure that does not set layout.height


@dataclass
class Figure:
    id: str
    title: str
    data: list[dict[str, Any]]
    layout: dict[str, Any] = field(default_factory=dict)
    note: str = ""

    @property
    def height(self) -> int:
        """Pixels tall, as drawn: the page gives the figure's div this height, so a figure
        never spills over what follows it (layout.height when the figure sets one)."""
        value = self.layout.get("height")
        return int(value) if isinstance(value, (int, float)) and value > 0 else DEFAULT_HEIGHT

    @property
    def points(self) -> int:
        """How many data points the figure holds (the browser test expects them drawn)."""
        return sum(len(t.get("x") or t.get("y") or []) for t in self.data)


def colour(i: int) -> str:
    return PALETTE[i % len(PALETTE)]


def _layout(title: str, x: str, y: str, **extra: Any) -> dict[str, Any]:
    layout: dict[str, Any] = {
        "title": {"text": title},
        "xaxis": {"title": {"text": x}},
        "yaxis": {"title": {"text": y}},
        "margin": {"l": 70, "r": 20, "t": 50, "b": 60},
        "legend": {"orientation": "h", "y": -0.2},
        "hovermode": "closest",
        "template": None,
    }
    layout.update(extra)
    return layout


# -- time axis -------------------------------------------------------------------------------
def reference_zone(views: Sequence[RunView]) -> timezone:
    for view in views:
        when = parse_time(view.typed.created_at or view.typed.started_at)
        if when is not None and when.tzinfo is not None:
            offset = when.utcoffset() or timedelta(0)
            return timezone(offset)
    return timezone.utc


def zone_name(zone: timezone) -> str:
    offset = zone.utcoffset(None)
    minutes = int(offset.total_seconds() // 60)
    sign = "+" if minutes >= 0 else "-"
    return f"UTC{sign}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"


def axis_time(text: str, zone: timezone) -> str | None:
    when = parse_time(text)
    if when is None:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=zone)
    return when.astimezone(zone).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


# -- GPU memory timeline ----------------------------------------------------------------------
def gpu_timeline(views: Sequence[RunView], fig_id: str = "gpu-memory") -> Figure | None:
    zone = reference_zone(views)
    data: list[dict[str, Any]] = []
    gpu_indexes = sorted({t.index for v in views for t in v.gpu.traces})
    several = len(views) > 1
    for view in views:
        for trace in view.gpu.traces:
            xs = [axis_time(t, zone) for t in trace.times]
            pairs = [(x, y) for x, y in zip(xs, trace.used_mib, strict=True) if x is not None]
            if not pairs:
                continue
            name = f"GPU {trace.index} {trace.name}"
            if several:
                name += f" / {view.name}"
            total = f" of {trace.total_mib:.0f} MiB" if trace.total_mib else ""
            data.append(
                {
                    "type": "scatter",
                    "mode": "lines+markers",
                    "name": name,
                    "x": [p[0] for p in pairs],
                    "y": [p[1] for p in pairs],
                    "line": {"color": colour(gpu_indexes.index(trace.index)), "width": 2},
                    "marker": {"size": 4},
                    "legendgroup": f"gpu{trace.index}",
                    "hovertemplate": f"%{{y:.0f}} MiB{total}<br>%{{x}}<extra>{name}</extra>",
                }
            )
    if not data:
        return None
    shapes, annotations = phase_marks([p for v in views for p in v.phases], zone, several)
    layout = _layout(
        "GPU memory used, per GPU, with the workflow's phases",
        f"time ({zone_name(zone)})",
        "memory used (MiB)",
        shapes=shapes,
        annotations=annotations,
    )
    layout["xaxis"]["type"] = "date"
    layout["yaxis"]["rangemode"] = "tozero"
    return Figure(fig_id, "GPU memory timeline", data, layout)


def unix_axis_time(t: float, zone: timezone) -> str:
    return datetime.fromtimestamp(t, zone).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


_SERVER_LABELS = {
    "num_requests_running": "running requests",
    "num_running_reqs": "running requests",
    "num_requests_waiting": "waiting requests",
    "num_queue_reqs": "waiting requests",
    "kv_cache_usage_perc": "KV cache used (%)",
    "gpu_cache_usage_perc": "KV cache used (%)",
    "token_usage": "KV cache used (%)",
}


def _server_traces(views: Sequence[RunView], zone: timezone) -> list[dict[str, Any]]:
    data: list[dict[str, Any]] = []
    several = len(views) > 1
    for i, view in enumerate(views):
        for j, trace in enumerate(view.server.traces):
            short = trace.name.split(":", 1)[-1]
            label = _SERVER_LABELS.get(short, short)
            percent = label.endswith("(%)")
            ys = [v * 100.0 if percent else v for v in trace.values]
            name = f"server: {label}" + (f" / {view.name}" if several else "")
            data.append(
                {
                    "type": "scatter",
                    "mode": "lines",
                    "name": name,
                    "yaxis": "y3" if percent else "y",
                    "x": [unix_axis_time(t, zone) for t in trace.times],
                    "y": ys,
                    "line": {
                        "shape": "hv",
                        "color": colour(i * 3 + j),
                        "width": 2,
                        "dash": "dot" if percent else "solid",
                    },
                    "hovertemplate": f"%{{y:.1f}}<br>%{{x}}<extra>{name}</extra>",
                }
            )
    return data


def _gpu_power_traces(views: Sequence[RunView], zone: timezone) -> list[dict[str, Any]]:
    data: list[dict[str, Any]] = []
    several = len(views) > 1
    for view in views:
        for trace in view.gpu.traces:
            for values, what, axis, dash in (
                (trace.power_w, "power (W)", "y2", "solid"),
                (trace.util_pct, "utilisation (%)", "y4", "dash"),
            ):
                pairs = [
                    (axis_time(t, zone), v)
                    for t, v in zip(trace.times, values, strict=True)
                    if v is not None
                ]
                pairs = [(x, v) for x, v in pairs if x is not None]
                if not pairs:
                    continue
                name = f"GPU {trace.index} {what}" + (f" / {view.name}" if several else "")
                data.append(
                    {
                        "type": "scatter",
                        "mode": "lines+markers",
                        "name": name,
                        "yaxis": axis,
                        "x": [p[0] for p in pairs],
                        "y": [p[1] for p in pairs],
                        "line": {"color": colour(4 + trace.index), "dash": dash},
                        "marker": {"size": 3},
                        "hovertemplate": f"%{{y:.0f}}<br>%{{x}}<extra>{name}</extra>",
                    }
                )
    return data


def timeline(views: Sequence[RunView], fig_id: str = "timeline") -> Figure | None:
    """The server's queue and KV cache (server_metrics.csv) above the GPUs' power (gpu.csv), on
    one time axis; percentages (KV cache, GPU utilisation) on the right-hand axis. A panel with
    nothing to draw (no GPU on a CPU engine, no scrape of the server) is left out, not drawn
    empty, and so is a right-hand axis with no trace on it."""
    zone = reference_zone(views)
    server, gpu = _server_traces(views, zone), _gpu_power_traces(views, zone)
    if not server and not gpu:
        return None
    shapes, annotations = phase_marks([p for v in views for p in v.phases], zone, len(views) > 1)
    both = bool(server and gpu)
    layout = _layout(
        "Server and GPU over time",
        f"time ({zone_name(zone)})",
        "requests",
        shapes=shapes,
        annotations=annotations,
        height=560 if both else 430,
    )
    layout["xaxis"]["type"] = "date"
    if not server:  # the GPU's panel alone: it takes the primary axes
        gpu = [{**t, "yaxis": {"y2": "y", "y4": "y3"}[t["yaxis"]]} for t in gpu]
        layout["yaxis"]["title"] = {"text": "GPU power (W)"}
    layout["yaxis"]["rangemode"] = "tozero"
    if both:
        layout["xaxis"]["anchor"] = "y2"  # the time axis under the lower panel
        layout["yaxis"]["domain"] = [0.55, 1.0]
        layout["yaxis2"] = {
            "title": {"text": "GPU power (W)"},
            "domain": [0.0, 0.45],
            "anchor": "x",
            "rangemode": "tozero",
        }
    data = server + gpu
    for base, over in (("y", "y3"), ("y2", "y4")):
        if not any(t.get("yaxis", "y") == base for t in data):
            # Only percentages in this panel (utilisation, no power): they take its left axis.
            data = [{**t, "yaxis": base} if t.get("yaxis") == over else t for t in data]
            key = "yaxis" if base == "y" else "yaxis2"
            if key in layout:
                layout[key].update(title={"text": "%"}, range=[0, 105])
    used = {t.get("yaxis", "y") for t in data}
    for axis, over in (("y3", "y"), ("y4", "y2")):
        if axis in used:
            layout[f"yaxis{axis[1:]}"] = {
                "title": {"text": "%"},
                "overlaying": over,
                "side": "right",
                "range": [0, 105],
                "showgrid": False,
            }
    note = (
        "top: the engine's requests (its /metrics); bottom: GPU board power"
        if both
        else "the engine's requests (its /metrics); no GPU samples"
        if server
        else "GPU board power; no scrape of the server's /metrics"
    )
    return Figure(fig_id, "Server and GPU timeline", data, layout, note)


def phase_marks(
    phases: Sequence[Phase], zone: timezone, with_run: bool
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    shapes: list[dict[str, Any]] = []
    annotations: list[dict[str, Any]] = []
    for i, phase in enumerate(phases):
        x = axis_time(phase.time, zone)
        if x is None:
            continue
        col = PHASE_COLOURS.get(phase.name, "#777777")
        shapes.append(
            {
                "type": "line",
                "xref": "x",
                "yref": "paper",
                "x0": x,
                "x1": x,
                "y0": 0,
                "y1": 1,
                "line": {"color": col, "width": 1, "dash": "dot"},
            }
        )
        label = phase.name + (f" {phase.run_id[-6:]}" if with_run and phase.run_id else "")
        annotations.append(
            {
                "x": x,
                "xref": "x",
                "yref": "paper",
                "y": 1 - 0.07 * (i % 4),
                "text": label,
                "showarrow": False,
                "xanchor": "left",
                "font": {"size": 10, "color": col},
                "hovertext": phase.detail or phase.name,
            }
        )
    return shapes, annotations


# -- latency distributions --------------------------------------------------------------------
def _stat_points(view: RunView, kind: str) -> tuple[list[float], list[float]]:
    """Percentile points from the summary (metrics.json stats_ms) when requests.jsonl is absent."""
    stats = view.bench.stats_ms.get(kind) if view.bench else None
    if stats is None:
        return [], []
    points: list[tuple[float, float]] = []
    if stats.median is not None:
        points.append((0.5, float(stats.median)))
    for key, value in stats.percentiles.items():
        try:
            if value is not None:
                points.append((float(key) / 100.0, float(value)))
        except ValueError:
            continue
    points.sort()
    return [p[1] for p in points], [p[0] for p in points]


def latency_cdfs(views: Sequence[RunView], prefix: str = "latency") -> list[Figure]:
    figures: list[Figure] = []
    for kind in LATENCY_KINDS:
        data: list[dict[str, Any]] = []
        summary_only = False
        for i, view in enumerate(views):
            values = view.latencies.of(kind) if view.latencies else []
            if values:
                xs, ps = cdf_points(values)
                mode = "lines"
                hover = f"%{{x:.2f}} ms: %{{y:.4f}} of {len(values)}"
            else:
                xs, ps = _stat_points(view, kind)
                if not xs:
                    continue
                summary_only, mode, hover = True, "lines+markers", "%{x:.2f} ms at p%{y:.2f}"
            data.append(
                {
                    "type": "scatter",
                    "mode": mode,
                    "name": view.label,
                    "x": xs,
                    "y": ps,
                    "line": {"color": colour(i), "shape": "hv" if mode == "lines" else "linear"},
                    "hovertemplate": hover + "<extra></extra>",
                }
            )
        if not data:
            continue
        note = (
            "from the summary percentiles (run with --save-detailed for every request)"
            if summary_only
            else ""
        )
        layout = _layout(
            f"{KIND_TITLES[kind]}: CDF", "ms", "fraction of requests", showlegend=len(views) > 1
        )
        layout["yaxis"]["range"] = [0, 1.02]
        figures.append(Figure(f"{prefix}-{kind}", KIND_TITLES[kind], data, layout, note))
    return figures


# -- sweeps ----------------------------------------------------------------------------------
@dataclass
class Curve:
    """One sweep (or a set of runs) drawn as one curve, ordered by concurrency."""

    label: str
    views: list[RunView]


def concurrency_of(view: RunView) -> float | None:
    m = view.metrics.get("max_concurrency")
    if m is not None:
        return m.value
    value = view.bench.config.concurrency if view.bench else None
    return float(value) if value is not None else None


def _value(view: RunView, name: str) -> float | None:
    m = view.metrics.get(name)
    return m.value if m is not None else None


def sweep_figures(curves: Sequence[Curve]) -> list[Figure]:
    tput: list[dict[str, Any]] = []
    lat: list[dict[str, Any]] = []
    for i, curve in enumerate(curves):
        points = sorted(
            ((concurrency_of(v), v) for v in curve.views if concurrency_of(v) is not None),
            key=lambda p: p[0] or 0.0,
        )
        if not points:
            continue
        cs = [p[0] for p in points]
        views = [p[1] for p in points]
        col = colour(i)
        for metric, dash, what in (
            ("output_throughput", "solid", "output"),
            ("total_token_throughput", "dash", "total"),
        ):
            ys = [_value(v, metric) for v in views]
            tput.append(
                {
                    "type": "scatter",
                    "mode": "lines+markers",
                    "x": cs,
                    "y": ys,
                    "name": f"{curve.label}: {what} tok/s",
                    "line": {"color": col, "dash": dash},
                    "text": [v.run_id for v in views],
                    "hovertemplate": "c=%{x}: %{y:.1f} tok/s<br>%{text}<extra></extra>",
                }
            )
        xs = [_value(v, "output_throughput") for v in views]
        for metric, dash, what in (
            ("median_tpot_ms", "solid", "median TPOT"),
            ("p99_tpot_ms", "dot", "p99 TPOT"),
            ("median_ttft_ms", "dash", "median TTFT"),
        ):
            ys = [_value(v, metric) for v in views]
            if all(y is None for y in ys):
                continue
            lat.append(
                {
                    "type": "scatter",
                    "mode": "lines+markers",
                    "x": xs,
                    "y": ys,
                    "name": f"{curve.label}: {what}",
                    "line": {"color": col, "dash": dash},
                    "text": [f"c={c:g}" for c in cs],
                    "hovertemplate": "%{text}: %{y:.2f} ms at %{x:.1f} tok/s<extra></extra>",
                }
            )
    figures: list[Figure] = []
    if tput:
        figures.append(
            Figure(
                "sweep-throughput",
                "Throughput against concurrency",
                tput,
                _layout(
                    "Throughput against concurrency",
                    "max concurrency",
                    "tokens/s",
                    xaxis={"title": {"text": "max concurrency"}, "type": "log"},
                ),
            )
        )
    if lat:
        figures.append(
            Figure(
                "sweep-latency",
                "Latency against throughput",
                lat,
                _layout("Latency against throughput", "output throughput (tok/s)", "latency (ms)"),
            )
        )
    return figures


# -- evals -----------------------------------------------------------------------------------
def eval_figure(
    views: Sequence[RunView], threshold: float | None, baseline: float | None
) -> Figure | None:
    data: list[dict[str, Any]] = []
    for i, (metric, label) in enumerate(
        (
            ("gsm8k_exact_match_flexible", "flexible-extract"),
            ("gsm8k_exact_match_strict", "strict-match"),
        )
    ):
        xs, ys, errs = [], [], []
        for view in views:
            m = view.metrics.get(metric)
            if m is None:
                continue
            xs.append(view.label)
            ys.append(m.value)
            errs.append(m.stderr or 0.0)
        if xs:
            data.append(
                {
                    "type": "bar",
                    "name": label,
                    "x": xs,
                    "y": ys,
                    "error_y": {"type": "data", "array": errs, "visible": True},
                    "marker": {"color": colour(i)},
                    "hovertemplate": "%{y:.4f} ± %{error_y.array:.4f}<extra>" + label + "</extra>",
                }
            )
    if not data:
        return None
    shapes: list[dict[str, Any]] = []
    annotations: list[dict[str, Any]] = []
    for value, text, dash in ((threshold, "threshold", "solid"), (baseline, "baseline", "dash")):
        if value is None:
            continue
        shapes.append(
            {
                "type": "line",
                "xref": "paper",
                "x0": 0,
                "x1": 1,
                "yref": "y",
                "y0": value,
                "y1": value,
                "line": {"color": "#D55E00", "dash": dash},
            }
        )
        annotations.append(
            {
                "xref": "paper",
                "x": 1,
                "xanchor": "right",
                "y": value,
                "yref": "y",
                "text": f"{text} {value:.4f}",
                "showarrow": False,
                "yanchor": "bottom",
                "font": {"color": "#D55E00"},
            }
        )
    layout = _layout(
        "GSM8K exact match (bars: ± one stderr)",
        "run",
        "exact match",
        barmode="group",
        shapes=shapes,
        annotations=annotations,
    )
    layout["yaxis"]["range"] = [0, 1.05]
    return Figure("eval-scores", "GSM8K scores", data, layout)


# -- comparisons ------------------------------------------------------------------------------
def change_figure(
    rows: Sequence[tuple[str, float, float | None, bool]], title: str, fig_id: str
) -> Figure | None:
    """rows: (metric, change in %, noise band in %, regression)."""
    if not rows:
        return None
    data = [
        {
            "type": "bar",
            "orientation": "h",
            "name": "change",
            "y": [r[0] for r in rows],
            "x": [r[1] for r in rows],
            "error_x": {"type": "data", "array": [r[2] or 0.0 for r in rows], "visible": True},
            "marker": {"color": ["#D55E00" if r[3] else "#0072B2" for r in rows]},
            "hovertemplate": "%{y}: %{x:+.2f}% (noise ± %{error_x.array:.2f}%)<extra></extra>",
        }
    ]
    layout = _layout(
        title, "change (%)", "", height=max(300, 22 * len(rows) + 120), showlegend=False
    )
    layout["yaxis"]["automargin"] = True
    layout["margin"]["l"] = 180
    return Figure(fig_id, title, data, layout)

"""A concurrency sweep: one supervised bench run per point, grouped under one sweep id.

The sweep is a directory of its own (kind "sweep") holding summary.json, summary.csv,
summary.txt and throughput_latency.png (output tok/s against mean TPOT, one marker per
concurrency; needs matplotlib, the `proctor[plot]` extra), rewritten after every point, so
points already measured are kept whatever happens to a later one.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from proctor import redact
from proctor.jobs.documents import (
    SWEEP_SCHEMA,
    SWEEP_VERSION,
    BenchDocument,
    Document,
    SweepSummary,
    read_bench,
    write_checked,
)
from proctor.record.recorder import Recorder
from proctor.record.rundir import RunDir, write_atomic
from proctor.record.schema import SweepRecord, parse_as
from proctor.spec.config import ProjectConfig
from proctor.spec.plan import RunFlags, resolve_run_plan, resolve_store_path
from proctor.supervise.controller import controller_fields, controlling
from proctor.supervise.launch import RunSpec, record_of, start_run
from proctor.targets.service import wait_or_stop
from proctor.version import __version__

COLUMNS = (
    ("concurrency", "concurrency", "{:.0f}"),
    ("output tok/s", "output_throughput", "{:.1f}"),
    ("total tok/s", "total_token_throughput", "{:.1f}"),
    ("mean TTFT ms", "mean_ttft_ms", "{:.1f}"),
    ("mean TPOT ms", "mean_tpot_ms", "{:.2f}"),
    ("p99 TTFT ms", "p99_ttft_ms", "{:.1f}"),
    ("p99 TPOT ms", "p99_tpot_ms", "{:.2f}"),
    ("p99 E2EL ms", "p99_e2el_ms", "{:.1f}"),
    ("failed", "failed", "{:.0f}"),
)


@dataclass
class SweepPoint:
    concurrency: int
    run_id: str
    exit_code: int | None
    metrics: dict[str, float] = field(default_factory=dict)
    failure: str | None = None  # why the point failed, from the bench's verdict

    def row(self) -> dict[str, Any]:
        return {
            "concurrency": self.concurrency,
            "run_id": self.run_id,
            "exit_code": self.exit_code,
            "failure": self.failure,
            **self.metrics,
        }


def bench_argv(base: list[str], concurrency: int) -> list[str]:
    return [*base, "--concurrency", str(concurrency)]


def run_sweep(
    base_argv: list[str],
    concurrencies: list[int],
    config: ProjectConfig,
    *,
    runs_dir: str | None,
    name: str,
    say: Callable[[str], None] = print,
) -> tuple[RunDir, list[SweepPoint]]:
    """A bench per concurrency, grouped under one sweep run; a failing point is recorded and the
    sweep goes on."""
    flags0 = RunFlags(argv=bench_argv(base_argv, concurrencies[0]), runs_dir=runs_dir)
    runs_root = Path(resolve_run_plan(flags0, config).runs_dir.value)
    recorder = Recorder.create(runs_root)
    sweep = recorder.run
    store_path = resolve_store_path(config, runs_root).value
    started = recorder.start(
        {
            "name": name,
            "kind": "sweep",
            **controller_fields(Path.cwd(), runs_root, Path(str(store_path))),
            "bench_argv": base_argv,
            "concurrencies": concurrencies,
            "proctor_version": __version__,
            "outcome": "running",
            "points": [],
        }
    )
    # The sweep's own record, typed: write_summary sets its points and plot and writes them
    # through the recorder (which finish() then ends).
    record = parse_as(SweepRecord, started)
    reason = plot_unavailable()
    if reason:
        say(f"[sweep] the PNG plot is skipped: {reason}")
    points: list[SweepPoint] = []
    try:
        with controlling(recorder):
            for conc in concurrencies:
                points.append(_run_point(base_argv, conc, config, runs_root, name, sweep, say))
                write_summary(recorder, record, points)
    except KeyboardInterrupt:  # Ctrl-C, or `runs stop` of the sweep (controller.Stopped)
        write_summary(recorder, record, points)
        recorder.finish(
            code=130, outcome="stopped", store_path=store_path, who="sweep", reason="stopped"
        )
        raise
    except BaseException as error:
        # No status can be established for a sweep that died: no exit_code (unknown).
        write_summary(recorder, record, points)
        recorder.finish(
            code=None, outcome="unknown", store_path=store_path, who="sweep", error=repr(error)
        )
        raise
    failing = [p for p in points if p.exit_code != 0]
    code = 0 if not failing else (failing[0].exit_code if failing[0].exit_code is not None else 6)
    write_summary(recorder, record, points)
    recorder.finish(
        code=code, outcome="ok" if code == 0 else "failed", store_path=store_path, who="sweep"
    )
    return sweep, points


def _run_point(
    base_argv: list[str],
    conc: int,
    config: ProjectConfig,
    runs_root: Path,
    name: str,
    sweep: RunDir,
    say: Callable[[str], None],
) -> SweepPoint:
    flags = RunFlags(
        argv=bench_argv(base_argv, conc),
        runs_dir=str(runs_root),
        name=f"{name}-c{conc}",
        gpu_sample=0,
    )
    plan = resolve_run_plan(flags, config)
    started = start_run(
        plan,
        RunSpec(
            kind="bench", group=sweep.run_id, extra={"sweep": sweep.run_id, "concurrency": conc}
        ),
    )
    say(f"[sweep] concurrency {conc}: run {started.run.run_id}")
    state = wait_or_stop(started.run)
    document = read_bench(started.run.path / "metrics.json")
    code = state.exit.code if state.exit else None
    point = SweepPoint(
        conc,
        started.run.run_id,
        code,
        document.metrics.numbers() if document else {},
        failure=_failure(document, code),
    )
    say(
        f"[sweep] concurrency {conc}: exit {point.exit_code}, "
        f"total {point.metrics.get('total_token_throughput', float('nan')):.1f} tok/s"
        + (f"; FAILED: {point.failure}" if point.failure else "")
    )
    return point


def _failure(document: BenchDocument | None, exit_code: int | None) -> str | None:
    """Why a point failed: its bench verdict, else its exit status; None when it passed."""
    verdict = document.verdict if document else None
    if verdict is not None and verdict.ok is False:
        return str(verdict.message)
    if exit_code is None:
        return "result unknown (no exit status)"
    return None if exit_code == 0 else f"bench exited {exit_code}"


def point_status(p: SweepPoint) -> str:
    """ok, FAILED (the bench failed: its figures are not those of the load), UNKNOWN (no exit
    status) or INVALID (the bench's validity verdict: no measurement, docs/bench.md)."""
    if p.exit_code is None:
        return "UNKNOWN"
    if p.exit_code != 0:
        return "FAILED"
    return "INVALID" if p.metrics.get("valid") == 0 else "ok"


def summary_text(points: list[SweepPoint]) -> str:
    header = [c[0] for c in COLUMNS] + ["status"]
    rows = []
    for p in points:
        values = {"concurrency": float(p.concurrency), **p.metrics}
        rows.append(
            [fmt.format(values[key]) if key in values else "-" for _, key, fmt in COLUMNS]
            + [point_status(p)]
        )
    widths = [
        max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)
    ]
    lines = ["  ".join(h.rjust(w) for h, w in zip(header, widths, strict=True))]
    lines += ["  ".join(v.rjust(w) for v, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(lines) + "\n"


def summary_csv(points: list[SweepPoint]) -> str:
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["concurrency", "run_id", "exit_code", *[c[1] for c in COLUMNS[1:]]])
    for p in points:
        writer.writerow(
            [p.concurrency, p.run_id, p.exit_code, *[p.metrics.get(c[1], "") for c in COLUMNS[1:]]]
        )
    return out.getvalue()


PLOT_NAME = "throughput_latency.png"
PLOT_X = ("mean_tpot_ms", "mean TPOT (ms)")
PLOT_Y = ("output_throughput", "output throughput (tok/s)")


def plot_unavailable() -> str | None:
    """Why no PNG can be drawn here, or None when matplotlib is installed."""
    import importlib.util

    if importlib.util.find_spec("matplotlib") is None:
        return "matplotlib is not installed (pip install 'matplotlib>=3.8': the plot extra)"
    return None


def write_plot(path: Path, points: list[SweepPoint], title: str = "") -> bool:
    """Draw output throughput against mean TPOT to `path` (PNG, written atomically).

    Points without both figures are left out; failed points that have them are drawn as
    red crosses. False when there is nothing to draw.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    drawn = [p for p in points if PLOT_X[0] in p.metrics and PLOT_Y[0] in p.metrics]
    if not drawn:
        return False
    # The Figure API, not pyplot: no global state, no GUI backend.
    fig = Figure(figsize=(7, 4.5), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ok = [p for p in drawn if p.exit_code == 0]
    xs = [p.metrics[PLOT_X[0]] for p in ok]
    ax.plot(xs, [p.metrics[PLOT_Y[0]] for p in ok], "o-", color="tab:blue", label="ok")
    bad = [p for p in drawn if p.exit_code != 0]
    if bad:
        ax.plot(
            [p.metrics[PLOT_X[0]] for p in bad],
            [p.metrics[PLOT_Y[0]] for p in bad],
            "x",
            color="tab:red",
            markersize=9,
            label="failed",
        )
    for p in drawn:
        ax.annotate(
            f"c={p.concurrency}",
            (p.metrics[PLOT_X[0]], p.metrics[PLOT_Y[0]]),
            textcoords="offset points",
            xytext=(5, 5),
            fontsize=8,
        )
    ax.set_xlabel(PLOT_X[1])
    ax.set_ylabel(PLOT_Y[1])
    ax.set_title(title or "throughput against latency")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("wb") as handle:
        fig.savefig(handle, format="png", metadata={"Software": None})
    tmp.replace(path)
    return True


def write_summary_json(sweep: RunDir, summary: dict[str, Any], model: type[Document]) -> None:
    """summary.json (secrets masked, as RunDir.write_json does), checked against its model."""
    path = sweep.path / "summary.json"
    write_checked(redact.data(summary), model, lambda text: write_atomic(path, text, mask=False))


def write_summary(recorder: Recorder, record: SweepRecord, points: list[SweepPoint]) -> None:
    """summary.json/.csv/.txt and the PNG of the points so far; the sweep's typed record gets
    them (points, plot, plot_skipped), written through its recorder."""
    sweep = recorder.run
    record.points = [p.row() for p in points]
    summary: dict[str, Any] = {
        "schema": SWEEP_SCHEMA,
        "schema_version": SWEEP_VERSION,
        "sweep": sweep.run_id,
        "points": record.points,
    }
    skipped = plot_unavailable()
    if skipped is None:
        try:
            drawn = write_plot(sweep.path / PLOT_NAME, points, f"sweep {record.name or ''}")
        except (OSError, ValueError, RuntimeError) as error:  # a plot must not lose a sweep
            skipped = f"plot failed: {error}"
        else:
            summary["plot"] = PLOT_NAME if drawn else None
            if not drawn:
                skipped = "no point has both output throughput and mean TPOT"
    summary["plot_skipped"] = skipped
    record.plot, record.plot_skipped = summary.get("plot"), skipped
    write_summary_json(sweep, summary, SweepSummary)
    write_atomic(sweep.path / "summary.csv", summary_csv(points))
    write_atomic(sweep.path / "summary.txt", summary_text(points))
    recorder.update(points=record.points, plot=record.plot, plot_skipped=record.plot_skipped)


__all__ = [
    "PLOT_NAME",
    "SweepPoint",
    "plot_unavailable",
    "point_status",
    "record_of",
    "run_sweep",
    "summary_csv",
    "summary_text",
    "write_plot",
    "write_summary",
]

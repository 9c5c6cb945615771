"""Reports of one run, of a sweep (runs sharing a `group`), and of runs compared side by side.

build_report(runs_dir, ["RUN"])                  one run
build_report(runs_dir, ["SWEEP"])                every run whose record has group SWEEP
build_report(runs_dir, ["A", "B"], compare=True) every metric of B (, C...) against A
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from proctor.errors import ProctorError, UsageError
from proctor.jobs.documents import RepeatStat
from proctor.monitors.gpu_health import record_text
from proctor.record.rundir import RunDir, is_run_id, write_atomic
from proctor.record.schema import FlowRecord, read_view
from proctor.report.cost import cost_block
from proctor.report.figures import (
    Curve,
    Figure,
    change_figure,
    concurrency_of,
    eval_figure,
    gpu_timeline,
    latency_cdfs,
    sweep_figures,
)
from proctor.report.headline import headline_card
from proctor.report.load import RunView, load_run
from proctor.report.page import (
    PLOTLY_SLOT,
    badge,
    esc,
    figure_block,
    kv_table,
    mark,
    plotly_script,
    render_page,
    table,
    write_plotly_asset,
)
from proctor.report.series import read_server_csv
from proctor.report.slowest import slowest_block
from proctor.report.telemetry import telemetry_blocks
from proctor.report.verdict import Verdict, fmt_value, unit_text, verdict_of
from proctor.results.baselines import (
    DEFAULT_TOLERANCE,
    AccuracyEntry,
    Baseline,
    CompareRow,
    check,
    compare,
    select_entry,
)
from proctor.supervise.launch import resolve_run
from proctor.version import __version__


@dataclass
class Subject:
    """What one report argument named: a single run, or a sweep (a group of runs)."""

    label: str
    views: list[RunView]
    group: str | None = None


@dataclass
class Report:
    kind: str  # run | sweep | compare | flow | server-sweep | history
    title: str
    html: str
    subjects: list[Subject]
    figures: list[Figure]
    default_name: str
    #: The runs it shows, where they are not its subjects' (a history page's).
    runs: list[str] | None = None

    @property
    def run_ids(self) -> list[str]:
        if self.runs is not None:
            return list(self.runs)
        return [v.run_id for s in self.subjects for v in s.views]


# -- finding what to report on -----------------------------------------------------------------
def group_runs(runs_dir: Path, group: str) -> list[RunDir]:
    """Run directories whose record.json has this group, oldest first."""
    found: list[RunDir] = []
    if not runs_dir.is_dir():
        return found
    for child in sorted(runs_dir.iterdir()):
        if not (child.is_dir() and is_run_id(child.name)):
            continue
        if read_view(child).group == group:
            found.append(RunDir(child))
    return found


def resolve_subject(runs_dir: Path, ref: str) -> Subject:
    flow_dir: Path | None = None
    with contextlib.suppress(ProctorError):
        run = resolve_run(runs_dir, ref)
        record = read_view(run.path)
        # A flow's report is its server's: the GPU timeline with the flow's steps marked on it.
        if isinstance(record, FlowRecord) and record.server_run:
            ref = record.server_run
            flow_dir = run.path
        elif record.kind == "sweep":
            ref = record.run_id
    members = group_runs(runs_dir, ref)
    if members:
        return Subject(ref, [load_run(r) for r in members], group=ref)
    view = load_run(resolve_run(runs_dir, ref))
    if flow_dir is not None and not view.server.traces:
        # The flow scraped its server's /metrics from ready to teardown into its own directory.
        view.server = read_server_csv(flow_dir / "server_metrics.csv")
    return Subject(view.label, [view])


# -- shared blocks ----------------------------------------------------------------------------
def _count(items: object) -> int:
    return len(items) if isinstance(items, list) else 0


def _source_text(source: dict[str, object]) -> str:
    if not source or not source.get("is_git", bool(source.get("commit"))):
        return f"not a git checkout ({source.get('reason') or 'no source identity recorded'})"
    parts = [str(source.get("commit") or "no commit")]
    if source.get("branch"):
        parts.append(f"on {source['branch']}")
    if source.get("dirty"):
        changed = sum(_count(source.get(k)) for k in ("modified", "staged", "deleted"))
        untracked = _count(source.get("untracked"))
        parts.append(f"DIRTY ({changed} changed, {untracked} untracked)")
    else:
        parts.append("clean")
    return " ".join(parts)


def _gpu_text(gpu: dict[str, object]) -> str:
    gpus = gpu.get("gpus")
    if isinstance(gpus, list) and gpus:
        names = sorted({str(g.get("name")) for g in gpus if isinstance(g, dict)})
        driver = f", driver {gpu['driver']}" if gpu.get("driver") else ""
        backend = f" via {gpu['backend']}" if gpu.get("backend") else ""
        return f"{len(gpus)}x {' / '.join(names)}{driver}{backend}"
    return f"none recorded ({gpu.get('reason') or 'no GPU inventory'})"


def _target_text(view: RunView) -> str:
    target = view.typed.target
    words = [str(target.get("kind") or "local")]
    for key in ("host", "pod_id", "cluster", "job_id", "nodes"):
        if target.get(key):
            words.append(f"{key.replace('_', ' ')} {target[key]}")
    return ", ".join(words)


def checks_html(view: RunView) -> str:
    return "".join(
        f'<div class="check">{mark(c.status)}<b>{esc(c.name)}</b>: {esc(c.detail)}</div>'
        for c in view.checks
    )


def outcome_html(view: RunView) -> str:
    """The verdict's badge, the exit status, and why when it is not ok: a bench that exited 0
    with an INVALID measurement reads INVALID, never a green ok."""
    verdict = verdict_of(view)
    why = f": {esc(verdict.why)}" if verdict.why and not verdict.ok else ""
    return f"{badge(verdict.text, verdict.css)} exit status {esc(view.exit_text)}{why}"


def run_header(view: RunView, level: str = "h1", lead: str = "") -> str:
    """The run's title, `lead` (its headline card), then every fact about the run."""
    r = view.typed
    source = r.source or {}
    gpu = r.fact("gpu")
    gpu = gpu if isinstance(gpu, dict) else {}
    digest = source.get("source_id") or source.get("diff_sha256")
    manifest = source.get("manifest") or source.get("archive_manifest")
    times = [("created", r.created_at), ("started", r.started_at), ("ended", r.ended_at)]
    pairs = [
        ("outcome", outcome_html(view)),
        ("command", f"<code>{esc(view.command)}</code>"),
        ("source", esc(_source_text(source))),
        ("remote", esc(source.get("remote_url") or "none")),
        (
            "source id / manifest",
            esc(" / ".join(str(x) for x in (digest, manifest) if x) or "none recorded"),
        ),
        ("target", esc(_target_text(view))),
        ("GPU", esc(_gpu_text(gpu))),
        ("GPU health", esc(record_text(r.fact("gpu_health"), r.fact("gpu_health_change")))),
        *[(f"{k}", esc(v or "not recorded")) for k, v in times],
        ("duration", esc(f"{r.duration_s:.3f} s" if r.duration_s is not None else "unknown")),
        ("kind / group", esc(f"{view.kind} / {r.group or 'none'}")),
        ("proctor", esc(r.proctor_version or "unknown")),
        ("run directory", f"<code>{esc(view.run.path)}</code>"),
        ("completion checks", checks_html(view)),
    ]
    heading = f"<{level}>{esc(view.name)} <small>{esc(view.run_id)}</small></{level}>"
    error = f'<p class="note">error: {esc(r.error)}</p>' if r.error else ""
    return f"<header>{heading}{lead}{kv_table(pairs, raw=True)}{error}</header>"


def runs_table(views: Sequence[RunView]) -> str:
    rows = []
    for v in views:
        typed = v.typed
        commit = (typed.source_commit or "")[:12] + (" dirty" if typed.source_dirty else "")
        checks = "".join(mark(c.status) for c in v.checks)
        conc = concurrency_of(v)
        verdict = verdict_of(v)
        rows.append(
            [
                v.run_id,
                v.name,
                (badge(verdict.text, verdict.css), ""),
                v.exit_text,
                "" if conc is None else f"{conc:g}",
                commit or "none",
                typed.started_at or "",
                (checks, ""),
            ]
        )
    return table(
        [
            "run",
            "name",
            "outcome",
            "exit",
            "concurrency",
            "commit",
            "started",
            "result / logs / machine",
        ],
        rows,
        raw_columns=(2, 7),
    )


def _fmt(value: float | None, unit: str = "") -> str:
    if value is None:
        return "n/a"
    text = f"{value:.4f}" if abs(value) < 10 else f"{value:,.2f}"
    return f"{text} {unit}".strip()


def _repeat_stats(view: RunView) -> tuple[int, dict[str, RepeatStat]]:
    """bench --repeat N: N and each metric's statistics over the repeats, by metric name."""
    from proctor.results.names import json_key_to_name

    repeats = view.bench.repeats if view.bench else None
    n = repeats.n if repeats else None
    if repeats is None or "stats" not in repeats.model_fields_set or n is None or n < 2:
        return 0, {}
    return n, {json_key_to_name(k) or k: s for k, s in repeats.stats.items()}


def _repeat_cell(stat: RepeatStat | None) -> str:
    """ "15.83 ± 0.92 (n=3)": the mean over repeats and its 95% CI half-width (Student's t)."""
    if stat is None or stat.mean is None or stat.ci95_half is None:
        return ""
    return f"{stat.mean:,.2f} ± {stat.ci95_half:,.2f} (n={stat.n})"


def metrics_table(view: RunView) -> str:
    if not view.metrics:
        return '<p class="note">no metrics.json in this run</p>'
    n, stats = _repeat_stats(view)
    rows = [
        [
            name,
            (fmt_value(m.value, m.unit), "num"),
            unit_text(m.unit),
            "" if m.stderr is None else _fmt(m.stderr),
            m.direction,
        ]
        for name, m in view.metrics.items()
    ]
    headers = ["metric", "value", "unit", "stderr", "better"]
    if not stats:
        return table(headers, rows)
    for row, name in zip(rows, view.metrics, strict=True):
        row.insert(2, (_repeat_cell(stats.get(name)), "num"))
    note = (
        f'<p class="note">{n} repeats: each metric\'s mean over the repeats ± the 95% '
        "confidence half-width of the mean (Student's t, n - 1 degrees of freedom); "
        "stderr is over the repeats</p>"
    )
    return note + table([*headers[:2], f"mean ± 95% CI ({n} repeats)", *headers[2:]], rows)


def phases_table(view: RunView) -> str:
    if not view.phases:
        return '<p class="note">no phases recorded</p>'
    return table(["time", "phase", "detail"], [[p.time, p.name, p.detail] for p in view.phases])


def _failures(view: RunView) -> str:
    failures = view.bench.failures if view.bench else None
    if failures is None or not failures.count:
        return ""
    by = ", ".join(f"{k}: {v}" for k, v in failures.by_reason.items())
    return f'<p class="note">failed requests: {esc(failures.count)} ({esc(by)})</p>'


def gpu_block(views: Sequence[RunView], figures: list[Figure], fig_id: str) -> str:
    fig = gpu_timeline(views, fig_id)
    if fig is None:
        reasons = {str((v.typed.fact("gpu") or {}).get("reason") or "no gpu.csv") for v in views}
        return f'<p class="note">no GPU samples ({esc("; ".join(sorted(reasons)))})</p>'
    figures.append(fig)
    bad = sum(v.gpu.bad_rows for v in views)
    note = f'<p class="note">{bad} unreadable gpu.csv rows skipped</p>' if bad else ""
    return figure_block(fig) + note


def _accuracy_entry(
    baseline: Baseline | None, views: Sequence[RunView], model: str | None
) -> AccuracyEntry | None:
    if not isinstance(baseline, list):
        return None
    name = model or (views[0].configured_model if views else None)
    return select_entry(baseline, name)


def verdicts_block(view: RunView, baseline: Baseline | None, model: str | None) -> str:
    if baseline is None:
        return ""
    name = model if model is not None else view.configured_model
    verdicts = check(view.metrics, baseline, name)
    rows = [
        [
            v.metric,
            (badge(v.status), ""),
            (_fmt(v.value), "num"),
            (_fmt(v.baseline), "num"),
            (_fmt(v.threshold), "num"),
            _fmt(v.noise),
            v.message,
        ]
        for v in verdicts
    ]
    return "<h3>Against the baseline</h3>" + table(
        ["metric", "verdict", "value", "baseline", "threshold", "noise (1 stderr)", "why"],
        rows,
        raw_columns=(1,),
    )


def eval_block(
    views: Sequence[RunView], baseline: Baseline | None, model: str | None, figures: list[Figure]
) -> str:
    entry = _accuracy_entry(baseline, views, model)
    fig = eval_figure(
        views,
        entry.accuracy_threshold if entry else None,
        entry.accuracy_baseline if entry else None,
    )
    if fig is None:
        return '<p class="note">no GSM8K scores in metrics.json</p>'
    figures.append(fig)
    rows = []
    for v in views:
        for metric in ("gsm8k_exact_match_flexible", "gsm8k_exact_match_strict"):
            m = v.metrics.get(metric)
            if m is not None:
                rows.append([v.label, metric, (_fmt(m.value), "num"), _fmt(m.stderr)])
    note = (
        ""
        if entry
        else '<p class="note">no accuracy baseline given '
        "(--baseline models_accuracy.json draws its threshold)</p>"
    )
    return figure_block(fig) + note + table(["run", "metric", "score", "stderr"], rows)


# -- the three kinds ---------------------------------------------------------------------------
def _footer() -> str:
    return (
        f"proctor {__version__}, report written "
        f"{time.strftime('%Y-%m-%dT%H:%M:%S%z')}; no network needed"
    )


def run_report(view: RunView, baseline: Baseline | None = None, model: str | None = None) -> Report:
    figures: list[Figure] = []
    blocks = [
        run_header(view, lead=headline_card(view)),
        "<h2>GPU memory</h2>",
        gpu_block([view], figures, "gpu-memory"),
    ]
    blocks += telemetry_blocks(view, figures)
    if view.kind == "gsm8k":
        blocks += ["<h2>Evaluation</h2>", eval_block([view], baseline, model, figures)]
    elif view.kind == "bench" or view.latencies:
        cdfs = latency_cdfs([view])
        figures += cdfs
        blocks.append("<h2>Latency distributions</h2>")
        blocks += [figure_block(f) for f in cdfs] or ['<p class="note">no latency data</p>']
        blocks.append(_failures(view))
        blocks.append(slowest_block(view.run.path, view.record))
    blocks += ["<h2>Metrics</h2>", metrics_table(view)]
    if view.kind == "bench":
        blocks += ["<h2>Cost</h2>", cost_block(view)]
    if view.kind != "gsm8k":
        blocks.append(verdicts_block(view, baseline, model))
    blocks += ["<h2>Phases</h2>", phases_table(view)]
    title = f"proctor report: {view.name} ({view.run_id})"
    html = render_page(title, blocks, figures, _footer())
    return Report("run", title, html, [Subject(view.label, [view])], figures, view.run_id)


def sweep_summary_table(views: Sequence[RunView]) -> str:
    cols = [
        "concurrency",
        "run",
        "req/s",
        "output tok/s",
        "total tok/s",
        "median TTFT ms",
        "p99 TTFT ms",
        "median TPOT ms",
        "p99 TPOT ms",
        "median E2EL ms",
        "failed",
        "J/token",
        "valid",
    ]
    names = [
        "request_throughput",
        "output_throughput",
        "total_token_throughput",
        "median_ttft_ms",
        "p99_ttft_ms",
        "median_tpot_ms",
        "p99_tpot_ms",
        "median_e2el_ms",
        "failed",
        "energy_per_output_token_j",
        "valid",
    ]
    ordered = sorted(views, key=lambda v: concurrency_of(v) or 0.0)
    rows = []
    for v in ordered:
        conc = concurrency_of(v)
        cells: list[str | tuple[str, str]] = ["" if conc is None else f"{conc:g}", v.run_id]
        for n in names:
            m = v.metrics.get(n)
            if n == "valid":  # the verdict in words; n/a for runs older than the verdict
                cells.append("n/a" if m is None else "VALID" if m.value else "INVALID")
                continue
            cells.append((fmt_value(m.value if m else None, m.unit if m else ""), "num"))
        rows.append(cells)
    return table(cols, rows)


def sweep_report(
    subjects: Sequence[Subject], baseline: Baseline | None = None, model: str | None = None
) -> Report:
    figures: list[Figure] = []
    everyone = [v for s in subjects for v in s.views]
    name = " vs ".join(s.label for s in subjects)
    blocks = [
        f"<h1>Sweep {esc(name)}</h1>",
        f'<p class="note">{len(everyone)} runs</p>',
        runs_table(everyone),
    ]
    sweeps = sweep_figures([Curve(s.label, s.views) for s in subjects])
    figures += sweeps
    blocks.append("<h2>Throughput and latency</h2>")
    blocks += [figure_block(f) for f in sweeps] or ['<p class="note">no benchmark metrics</p>']
    for s in subjects:
        blocks += [f"<h2>Summary: {esc(s.label)}</h2>", sweep_summary_table(s.views)]
    if any(v.kind == "gsm8k" for v in everyone):
        blocks += ["<h2>Evaluation</h2>", eval_block(everyone, baseline, model, figures)]
    cdfs = latency_cdfs(everyone, prefix="sweep-latency-cdf")
    figures += cdfs
    if cdfs:
        blocks.append("<h2>Latency distributions, one curve per run</h2>")
        blocks += [figure_block(f) for f in cdfs]
    for i, s in enumerate(subjects):
        blocks += [
            f"<h2>GPU memory: {esc(s.label)}</h2>",
            gpu_block(s.views, figures, f"gpu-memory-{i}"),
        ]
    blocks.append("<h2>Runs</h2>")
    blocks += [
        f"<details><summary>{esc(v.label)}: {esc(verdict_of(v).text)}</summary>"
        f"{run_header(v, 'h3')}</details>"
        for v in everyone
    ]
    title = f"proctor report: sweep {name}"
    html = render_page(title, blocks, figures, _footer())
    default = "sweep-" + "-vs-".join(s.label for s in subjects)
    return Report("sweep", title, html, list(subjects), figures, default)


@dataclass(frozen=True)
class Judged:
    row: CompareRow
    regression: bool
    verdict: str


def judge(row: CompareRow) -> Judged:
    """Worse beyond the noise band and beyond the default tolerance of results.baselines
    (5% for higher-is-better, 10% for lower-is-better) is a regression. A standard deviation
    (std_*) is the spread of the requests, not their speed: shown, never a regression."""
    if row.assessment != "worse" or row.change is None:
        return Judged(row, False, row.assessment)
    if row.metric.startswith("std_"):
        return Judged(row, False, "worse (a spread, not judged)")
    tol = DEFAULT_TOLERANCE.get(row.direction, 0.0)
    if abs(row.change) > tol:
        return Judged(row, True, "regression")
    return Judged(row, False, "worse (within tolerance)")


def _not_measurements(a: RunView, b: RunView) -> str:
    """A line per side that is not a valid measurement (INVALID, failed, ...): the changes
    below compare numbers that the runs themselves do not vouch for."""
    lines = []
    for side, view in (("A", a), ("B", b)):
        verdict: Verdict = verdict_of(view)
        if not verdict.ok:
            why = f": {verdict.why}" if verdict.why else ""
            lines.append(
                f'<p class="warn">{badge(verdict.text, verdict.css)}{side} '
                f"({esc(view.run_id)}) is {esc(verdict.text)}{esc(why)}. Its numbers "
                "are not a valid measurement; read the changes below with that in "
                "mind.</p>"
            )
    return "".join(lines)


def compare_block(a: RunView, b: RunView, figures: list[Figure], index: int) -> str:
    judged = [judge(r) for r in compare(a.metrics, b.metrics)]
    rows = []
    bars: list[tuple[str, float, float | None, bool]] = []
    for j in judged:
        r = j.row
        change = "n/a" if r.change is None else f"{r.change * 100:+.2f}%"
        noise = "n/a" if r.noise is None else _fmt(r.noise)
        css = "regression" if j.regression else j.verdict.split(" ")[0]
        unit = a.metrics.get(r.metric) or b.metrics.get(r.metric)
        unit_name = unit.unit if unit is not None else ""
        rows.append(
            [
                r.metric,
                (fmt_value(r.a, unit_name), "num"),
                (fmt_value(r.b, unit_name), "num"),
                (change, "num"),
                (noise, "num"),
                r.direction,
                (badge(j.verdict, css), ""),
            ]
        )
        if r.change is not None and r.direction != "none" and r.a:
            band = r.noise / abs(r.a) * 100 if r.noise is not None else None
            bars.append((r.metric, r.change * 100, band, j.regression))
    regressions = sum(j.regression for j in judged)
    warning = _not_measurements(a, b)
    count = (
        badge(f"{regressions} regression(s)", "regression" if regressions else "ok")
        if not warning
        # not a verdict on the software: amber, and says why
        else badge(
            f"{regressions} regression(s) between runs that are not both valid", "within_noise"
        )
    )
    head = (
        f"<h2>{esc(b.label)} against {esc(a.label)}</h2>{warning}<p>{count}"
        "change = (B - A) / A; noise = one combined stderr where known</p>"
    )
    fig = change_figure(bars, f"Change of {b.name} against {a.name}", f"compare-change-{index}")
    out = head
    if fig is not None:
        figures.append(fig)
        out += figure_block(fig)
    return out + table(
        ["metric", "A", "B", "change", "noise band", "better", "assessment"], rows, raw_columns=(6,)
    )


def compare_report(
    subjects: Sequence[Subject], baseline: Baseline | None = None, model: str | None = None
) -> Report:
    if len(subjects) < 2:
        raise UsageError("--compare needs at least two runs or sweeps", hint="give A B [C ...]")
    if all(s.group for s in subjects):
        report = sweep_report(subjects, baseline, model)
        return Report(
            "compare",
            report.title,
            report.html,
            report.subjects,
            report.figures,
            "compare-" + report.default_name,
        )
    if any(len(s.views) != 1 for s in subjects):
        raise UsageError(
            "--compare takes runs, or sweeps only", hint="give run ids, or only sweep (group) names"
        )
    views = [s.views[0] for s in subjects]
    figures: list[Figure] = []
    names = " vs ".join(v.run_id for v in views)
    cards = [
        headline_card(v, f"{chr(65 + i) if i < 26 else i + 1}: {v.label}")
        for i, v in enumerate(views)
    ]  # A, B, C ...
    blocks = [
        f"<h1>Comparison {esc(names)}</h1>",
        *cards,
        '<p class="note">A is the first run; each later run is compared with it</p>',
        runs_table(views),
    ]
    for i, b in enumerate(views[1:]):
        blocks.append(compare_block(views[0], b, figures, i))
    if any(v.kind == "gsm8k" for v in views):
        blocks += ["<h2>Evaluation</h2>", eval_block(views, baseline, model, figures)]
    cdfs = latency_cdfs(views, prefix="compare-latency")
    figures += cdfs
    if cdfs:
        blocks.append("<h2>Latency distributions</h2>")
        blocks += [figure_block(f) for f in cdfs]
    for i, v in enumerate(views):
        blocks += [
            f"<h2>GPU memory: {esc(v.label)}</h2>",
            gpu_block([v], figures, f"gpu-memory-{i}"),
        ]
    blocks.append("<h2>Runs</h2>")
    blocks += [
        f"<details><summary>{esc(v.label)}</summary>{run_header(v, 'h3')}</details>" for v in views
    ]
    title = f"proctor report: compare {names}"
    html = render_page(title, blocks, figures, _footer())
    return Report(
        "compare",
        title,
        html,
        list(subjects),
        figures,
        "compare-" + "-".join(v.run_id for v in views),
    )


def build_report(
    runs_dir: Path,
    refs: Sequence[str],
    *,
    compare_runs: bool = False,
    baseline: Baseline | None = None,
    model: str | None = None,
) -> Report:
    """The HTML report of one run, a sweep (a group), or two runs compared."""
    if not refs:
        raise UsageError(
            "nothing to report on", hint="give a run id, a sweep name, or --compare A B"
        )
    if not compare_runs and len(refs) == 1:
        # A flow with listed workloads: one report for the whole flow.
        from proctor.report.flow import flow_report, is_flow_with_workloads

        with contextlib.suppress(ProctorError):
            record = read_view(resolve_run(runs_dir, refs[0]).path)
            if is_flow_with_workloads(record):
                return flow_report(runs_dir, record, baseline, model)
        from proctor.report.server_sweep import newest_server_sweep, server_sweep_report

        with contextlib.suppress(ProctorError):
            run = resolve_run(runs_dir, refs[0])
            if read_view(run.path).kind == "server-sweep":
                return server_sweep_report(run)
        sweep = newest_server_sweep(runs_dir, refs[0])
        if sweep is not None:
            return server_sweep_report(sweep)
    subjects = [resolve_subject(runs_dir, ref) for ref in refs]
    if compare_runs:
        return compare_report(subjects, baseline, model)
    if len(subjects) > 1:
        raise UsageError(
            "several runs given without --compare", hint="add --compare to put them side by side"
        )
    subject = subjects[0]
    if subject.group is not None:
        return sweep_report(subjects, baseline, model)
    return run_report(subject.views[0], baseline, model)


def write_report(report: Report, path: Path, *, self_contained: bool = False) -> Path:
    """Write the report page atomically at `path`; return the path.

    plotly.js goes to `assets/plotly-VERSION.min.js` beside the page, written once and
    shared by every report of that directory; `self_contained` inlines it (one file)."""
    html = report.html.replace(PLOTLY_SLOT, plotly_script(self_contained), 1)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if not self_contained:
            write_plotly_asset(path.parent)
        # The page's data was masked as it was loaded (load_run); its script must stay intact.
        write_atomic(path, html, mask=False)
    except OSError as error:
        raise UsageError(
            f"cannot write {path}: {error.strerror}", hint="choose a writable path with -o"
        ) from None
    return path

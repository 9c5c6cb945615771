"""Sweeps of the server's own configuration: a grid of server parameters times bench parameters.

Each server point is its own flow (stop, start, ready, one bench per bench point, drain, stop)
whose record carries `sweep: {group, point, params}`. The sweep itself is a run directory (kind
"server-sweep", group GROUP) holding summary.json, summary.csv and summary.txt, rewritten after
every server point; its plots are its report (`proctor report GROUP`).

Resumable: a second invocation with the same group reuses every server point whose flow of that
group ended with exit 0 and runs the others again (the failed ones, and those never reached).

Server axes are engine flags (`max-num-seqs = [64, 128]`: `--max-num-seqs 64`; a boolean
axis `enable-chunked-prefill = [true, false]`: `--enable-chunked-prefill` and
`--no-enable-chunked-prefill`) and `tp` (the server's tensor parallelism, also the GPU count
of tokens/s per GPU).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from proctor.errors import ExitCode, UsageError
from proctor.flow import Flow
from proctor.jobs.documents import GRID_SCHEMA, GRID_VERSION, GridRow, GridSummary, read_bench
from proctor.jobs.flow import FlowJob
from proctor.jobs.grid import BENCH_AXES, ServerGridJob, apply_point
from proctor.jobs.options import validated
from proctor.record.recorder import Recorder
from proctor.record.rundir import RunDir, is_run_id
from proctor.record.schema import FlowRecord, read_view
from proctor.serve import check_startable
from proctor.spec.config import ProjectConfig
from proctor.workloads.summary import csv_table, text_table, write_summary
from proctor.workloads.sweep_engine import Plan, SweepHome, drive

SUMMARY_METRICS = (
    "output_throughput",
    "request_throughput",
    "median_ttft_ms",
    "p99_ttft_ms",
    "median_tpot_ms",
    "p99_tpot_ms",
    "p99_e2el_ms",
    "failed",
)


def grid_job(flow: FlowJob, table: dict[str, Any], group: str) -> ServerGridJob:
    """A `[sweep]` table (`server = { max_num_seqs = [..] }`, `bench = { concurrency = [..] }`)
    over the base flow job: every point checked (exit 64 naming the axis and value) before any
    server starts."""
    if not isinstance(table, dict):
        raise UsageError("[sweep] must be a table with server = {...} and bench = {...}")
    return validated(
        ServerGridJob,
        {"flow": flow, "server": table.get("server"), "bench": table.get("bench"), "group": group},
        what="server sweep",
        hint="docs/workflow.md (server sweeps)",
    )


def parse_axis(text: str) -> tuple[str, list[Any]]:
    """`--server-grid max-num-seqs=64,128` -> ("max-num-seqs", [64, 128])."""
    name, sep, values = text.partition("=")
    if not sep or not name.strip() or not values.strip():
        raise UsageError(
            f"invalid --server-grid {text!r}", hint="write NAME=V1,V2, e.g. max-num-seqs=64,128"
        )
    return name.strip().lstrip("-"), [_scalar(v.strip()) for v in values.split(",") if v.strip()]


def _scalar(text: str) -> Any:
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def point_key(params: dict[str, Any]) -> str:
    return ",".join(f"{k}={_text(v)}" for k, v in sorted(params.items()))


def _text(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


# -- per-point figures --------------------------------------------------------------------------
def per_user(metrics: dict[str, float]) -> float | None:
    """Tokens/s one user sees: 1000 / median TPOT (mean when no median)."""
    tpot = metrics.get("median_tpot_ms") or metrics.get("mean_tpot_ms")
    return 1000.0 / tpot if tpot else None


def per_gpu(metrics: dict[str, float], gpus: int) -> float | None:
    out = metrics.get("output_throughput")
    return out / max(1, gpus) if out is not None else None


def pareto_front(rows: list[dict[str, Any]]) -> list[int]:
    """Indices of the rows no other row beats on both tokens/s per user and per GPU."""
    scored = [
        (i, r["tok_s_per_user"], r["tok_s_per_gpu"])
        for i, r in enumerate(rows)
        if r.get("exit_code") == 0
        and r.get("tok_s_per_user") is not None
        and r.get("tok_s_per_gpu") is not None
    ]
    front = []
    for i, u, g in scored:
        beaten = any((u2 >= u and g2 >= g) and (u2 > u or g2 > g) for _, u2, g2 in scored)
        if not beaten:
            front.append(i)
    return sorted(front, key=lambda i: rows[i]["tok_s_per_user"])


# -- the sweep ----------------------------------------------------------------------------------
@dataclass
class ServerSweepResult:
    dir: RunDir
    rows: list[dict[str, Any]]
    exit_code: int
    reused: list[str]
    ran: list[str]


def run_server_sweep(
    grid: ServerGridJob,
    config: ProjectConfig,
    *,
    say: Callable[[str], None] = print,
) -> ServerSweepResult:
    """Run every server point of `grid` as its own flow under its group; reuse the points an
    earlier invocation of the same group finished with exit 0."""
    group = grid.group
    # Every point serves the same model with the same engine: refused before any directory.
    check_startable(grid.flow.server.request(1.0), config)
    rows: list[dict[str, Any]] = []
    codes: list[int] = []
    reused: list[str] = []
    ran: list[str] = []
    home = SweepHome(
        grid.flow.runs_dir,
        config,
        kind="server-sweep",
        name=group,
        fields={
            "group": group,
            "grid": {"server": grid.server, "bench": grid.bench},
            "points": [],
        },
    )
    home.summarize = lambda: summarize_grid(home.recorder, rows, group)
    runs_root = home.runs_root
    say(f"proctor: server sweep {group} -> {home.run.path}")
    earlier = finished_points(runs_root, group)
    points = grid.server_points()

    axes = tuple(k for k in BENCH_AXES if k in grid.bench)  # the bench options the grid sets

    def run_point(n: int) -> int:
        params = points[n - 1]
        key = point_key(params)
        flow_id = earlier.get(key)
        if flow_id is not None:
            say(f"[server-sweep] point {n}/{len(points)} {key}: done before (flow {flow_id})")
            reused.append(key)
            code = 0
        else:
            say(f"[server-sweep] point {n}/{len(points)} {key}: starting")
            flow_id, code = _run_point(grid, params, config, say)
            ran.append(key)
            say(f"[server-sweep] point {n}/{len(points)} {key}: exit {code}")
        codes.append(code)
        rows.extend(point_rows(runs_root, flow_id, params, grid.flow.server.tp, axes))
        home.summarize()
        return code

    with home:
        drive(_until_interrupted(len(points), say), run_point)
        failing = [c for c in codes if c != 0]
        stopped = int(ExitCode.INTERRUPTED) in codes
        code = int(ExitCode.INTERRUPTED) if stopped else (failing[0] if failing else 0)
        home.finish(code, stopped=stopped, reused=reused, ran=ran)
    return ServerSweepResult(home.run, rows, code, reused, ran)


def _until_interrupted(count: int, say: Callable[[str], None]) -> Plan[int, int, None]:
    """Server points 1..count in order; after one whose flow tore down on Ctrl-C, no more."""
    for n in range(1, count + 1):
        code = yield n
        if code == int(ExitCode.INTERRUPTED):
            say("[server-sweep] interrupted: later points not run")
            return


def _run_point(
    grid: ServerGridJob, params: dict[str, Any], config: ProjectConfig, say: Callable[[str], None]
) -> tuple[str, int]:
    flow = Flow(grid.point(params), config, say=say)
    flow.record["sweep"] = {"group": grid.group, "point": point_key(params), "params": params}
    flow.save()
    return flow.dir.run_id, flow.run()


def finished_points(runs_root: Path, group: str) -> dict[str, str]:
    """Server point key -> the newest flow of `group` that finished it with exit 0."""
    done: dict[str, str] = {}
    if not runs_root.is_dir():
        return done
    for path in sorted(runs_root.iterdir()):
        if not is_run_id(path.name):
            continue
        record = read_view(path)
        sweep = record.fact("sweep")  # the point this flow ran (server_sweep writes it)
        if (
            isinstance(record, FlowRecord)
            and isinstance(sweep, dict)
            and sweep.get("group") == group
            and record.exit_code == 0
        ):
            done[str(sweep.get("point"))] = path.name
    return done


def point_rows(
    runs_root: Path,
    flow_id: str,
    params: dict[str, Any],
    tp: int | None,
    axes: tuple[str, ...] = BENCH_AXES,
) -> list[dict[str, Any]]:
    """One row per bench of the flow: the point's parameters, the bench's, its metrics."""
    flow = read_view(runs_root / flow_id)
    gpus = int(params.get("tp") or tp or 1)
    rows = []
    listed = _bench_tables(flow, axes) if isinstance(flow, FlowRecord) else []
    results = flow.workload_runs if isinstance(flow, FlowRecord) else []
    if not results:  # the server never came up: one row saying so
        return [
            {
                "server": params,
                "bench": {},
                "flow_run": flow_id,
                "bench_run": None,
                "exit_code": flow.exit_code if isinstance(flow, FlowRecord) else None,
                "metrics": {},
                "tok_s_per_user": None,
                "tok_s_per_gpu": None,
            }
        ]
    for result in results:
        index = result.index
        bench = listed[index] if index < len(listed) else {}
        run_id = result.run_id
        doc = read_bench(runs_root / run_id / "metrics.json") if run_id else None
        metrics = doc.metrics.numbers() if doc else {}
        rows.append(
            {
                "server": params,
                "bench": {k: bench[k] for k in BENCH_AXES if k in bench},
                "flow_run": flow_id,
                "bench_run": run_id,
                "exit_code": result.exit_code,
                "metrics": {k: metrics[k] for k in SUMMARY_METRICS if k in metrics},
                "tok_s_per_user": per_user(metrics),
                "tok_s_per_gpu": per_gpu(metrics, gpus),
            }
        )
    return rows


def _bench_tables(flow: FlowRecord, axes: tuple[str, ...]) -> list[dict[str, Any]]:
    """Each listed workload's bench table, as far as a row shows it: from the flow's typed job
    (its values of the grid's bench `axes`), from a job recorded before the typed workloads
    (its table), or from the options of a flow recorded before the job."""
    if flow.job:
        tables = []
        for w in flow.job.get("workloads") or []:
            job = w.get("job")
            if isinstance(job, dict):
                bench = job.get("kind") == "bench"
                tables.append({k: job[k] for k in axes if k in job} if bench else {})
            else:
                tables.append(dict(w.get("options") or {}) if w.get("kind") == "bench" else {})
        return tables
    return [dict(e.get("bench") or {}) for e in flow.options.get("workloads") or []]


# -- summary ------------------------------------------------------------------------------------
COLUMNS = (
    ("output tok/s", "output_throughput", "{:.1f}"),
    ("p99 TTFT ms", "p99_ttft_ms", "{:.1f}"),
    ("median TPOT ms", "median_tpot_ms", "{:.2f}"),
    ("p99 TPOT ms", "p99_tpot_ms", "{:.2f}"),
    ("failed", "failed", "{:.0f}"),
)


def _cells(row: dict[str, Any], front: set[int], i: int) -> list[str]:
    m = row["metrics"]
    cells = [point_key(row["server"]), point_key(row["bench"]) or "-"]
    cells += [fmt.format(m[key]) if key in m else "-" for _, key, fmt in COLUMNS]
    for value in (row["tok_s_per_user"], row["tok_s_per_gpu"]):
        cells.append("-" if value is None else f"{value:.1f}")
    cells += [str(row["exit_code"]), "*" if i in front else ""]
    return cells


def summary_text(rows: list[dict[str, Any]]) -> str:
    header = ["server", "bench", *[c[0] for c in COLUMNS]]
    header += ["tok/s/user", "tok/s/GPU", "exit", "pareto"]
    front = set(pareto_front(rows))
    return text_table(header, [_cells(r, front, i) for i, r in enumerate(rows)], left=2)


def summary_csv(rows: list[dict[str, Any]]) -> str:
    front = set(pareto_front(rows))
    header = ["server", "bench", "flow_run", "bench_run", "exit_code", *SUMMARY_METRICS]
    header += ["tok_s_per_user", "tok_s_per_gpu", "pareto"]
    body = [
        [
            *(point_key(r["server"]), point_key(r["bench"]), r["flow_run"], r["bench_run"]),
            *(r["exit_code"], *[r["metrics"].get(k, "") for k in SUMMARY_METRICS]),
            *(r["tok_s_per_user"], r["tok_s_per_gpu"], int(i in front)),
        ]
        for i, r in enumerate(rows)
    ]
    return csv_table(header, body)


def summarize_grid(recorder: Recorder, rows: list[dict[str, Any]], group: str) -> None:
    """summary.json/.csv/.txt of the rows so far (the one summary writer, workloads/summary.py,
    from typed rows); the rows go in the sweep's record as its points, written through its
    recorder (merged into the record on disk). The plots (throughput against latency per server
    point, the Pareto front) are the sweep's report (`proctor report GROUP`, plotly)."""
    sweep = recorder.run
    summary = GridSummary.model_validate(
        {"schema": GRID_SCHEMA, "schema_version": GRID_VERSION, "group": group}
        | {"sweep": sweep.run_id, "rows": [GridRow.model_validate(r) for r in rows]}
        | {"pareto": pareto_front(rows)}
    )
    tables = {"summary.csv": summary_csv(rows), "summary.txt": summary_text(rows)}
    write_summary(sweep, summary, tables)
    recorder.update(points=rows)


__all__ = [
    "BENCH_AXES",
    "ServerGridJob",
    "ServerSweepResult",
    "apply_point",
    "finished_points",
    "grid_job",
    "pareto_front",
    "parse_axis",
    "point_key",
    "run_server_sweep",
    "summarize_grid",
    "summary_text",
]

"""`proctor runs ...`: find, watch, wait for, stop, verify and index runs from any shell."""

from __future__ import annotations

import contextlib
import sys
import time
from pathlib import Path
from typing import Any, get_args

import typer

from proctor.cli.helptext import ref_help
from proctor.cli.output import console, err_console, print_json, styled
from proctor.errors import TimeLimitReached, UsageError, WorkloadFailed
from proctor.record.finish import iso_at
from proctor.record.manifest import verify_run_manifest
from proctor.record.rundir import RunDir
from proctor.record.schema import FlowRecord, LaunchedRecord, Outcome, read_view, view_record
from proctor.record.status import effective_outcome, run_state
from proctor.spec.config import load_config
from proctor.spec.durations import parse_duration
from proctor.spec.plan import resolve_runs_dir, resolve_store_path
from proctor.store.db import (
    StoreUnreadable,
    instant,
    open_up_to_date,
    rebuild,
)
from proctor.supervise.launch import follow_log, record_of
from proctor.supervise.orphans import stop_dead_wrapper_run
from proctor.targets.service import SupervisedRun, exit_for_state, summary_line

app = typer.Typer(
    help="List, show, follow, wait for, stop, verify and reindex runs.", no_args_is_help=True
)

REF_HELP = ref_help()
RunsDirOpt = typer.Option(None, "--runs-dir", help="Runs directory (env PROCTOR_RUNS_DIR).")
JsonOpt = typer.Option(False, "--json", help="Machine-readable output.")


def _runs_dir(flag: str | None) -> Path:
    return Path(resolve_runs_dir(flag, load_config()).value)


def _store_path(runs_dir: Path) -> Path:
    return Path(resolve_store_path(load_config(), runs_dir).value)


def _find(ref: str, runs_dir_flag: str | None) -> RunDir:
    """A run of any kind; 'last' and names from the store's index where it can say (no walk
    of every run)."""
    from proctor.supervise.refs import resolve_run

    directory = _runs_dir(runs_dir_flag)
    return resolve_run(directory, ref, store_path=_store_path(directory))


def _far(run: RunDir) -> bool:
    """The run lives on a far target (its kind, from its record, through the registry):
    logs/attach/wait/stop reconnect to it there."""
    from proctor.targets.base import FAR
    from proctor.targets.registry import kind_of_run

    return FAR in kind_of_run(run.path).capabilities


def _view(run: RunDir) -> dict[str, Any]:
    from proctor.store.db import read_record_checked, record_problem

    record = record_of(run)
    state = run_state(run)
    data, problem = read_record_checked(run.path)
    problem = problem or (record_problem(data) if data is not None else None)
    # A record that cannot be read says nothing of how the run went: unknown, as runs list
    # says, even where exit_code holds 0.
    outcome = "unknown" if problem else effective_outcome(view_record(record, run.run_id), state)
    return {
        **record,
        "dir": str(run.path),
        "state": state.state,
        "outcome": outcome,
        "exit": state.exit.model_dump() if state.exit else None,
        "problem": problem,
    }


OUTCOMES: tuple[str, ...] = get_args(Outcome)


@app.command("list")
def list_runs(
    name: str = typer.Option(None, "--name", help="Only runs whose name contains this."),
    outcome: str = typer.Option(
        None, "--outcome", help="ok, failed, timeout, stopped, running, unknown."
    ),
    commit: str = typer.Option(None, "--commit", help="Only runs of this source commit (prefix)."),
    since: str = typer.Option(
        None, "--since", help="ISO date/time, or a duration ago such as 2h or 7d."
    ),
    limit: int = typer.Option(50, "--limit", help="At most this many (newest first); 0 for all."),
    kind: str = typer.Option(
        None,
        "--kind",
        help="Only runs of these kinds, comma-separated: bench, eval, offline, flow, sweep,"
        " server-sweep, server, command, slurm, remote.",
    ),
    runs_dir: str = RunsDirOpt,
    as_json: bool = JsonOpt,
) -> None:
    """List runs, newest first, with the outcome the evidence gives.

    Never 'ok' without an exit status."""
    directory = _runs_dir(runs_dir)
    since_iso = _since(since) if since else None
    kinds = _kinds(kind) if kind else None
    if outcome and outcome not in OUTCOMES:
        raise UsageError(f"unknown --outcome {outcome!r}", hint=f"one of: {', '.join(OUTCOMES)}")
    if limit < 0:
        raise UsageError(f"invalid --limit {limit}", hint="give a count, or 0 for all")
    # Never creates a store; a locked or unreadable one is listed around, with a warning.
    store, warning = open_up_to_date(_store_path(directory), directory)
    if warning:
        err_console.print(f"proctor: warning: {warning}", highlight=False)
    with store:
        # Read as consumed, newest first from the index: the default 50 read 50 rows.
        rows = store.iter_runs(name=name, commit=commit, since=since_iso, kinds=kinds)
        out: list[dict[str, Any]] = []
        for row in rows:
            # The state, outcome and status are the run directory's (its exit_code file and
            # its owner), never the store's copy of the record: that is only an index.
            run = RunDir(Path(row["dir"]))
            state = run_state(run)
            if row["problem"]:  # its record cannot be read: unknown, whatever exit_code says
                row["outcome"] = "unknown"
            else:
                row["outcome"] = effective_outcome(read_view(run.path), state)
            row["exit_code"] = state.exit.code if state.exit else None
            row["exit_signal"] = state.exit.signal if state.exit else None
            if outcome and row["outcome"] != outcome:
                continue
            out.append(row)
            if limit and len(out) >= limit:
                break
    for row in out:
        if row["problem"]:
            err_console.print(
                f"proctor: warning: run {row['dir']} listed as unknown: {row['problem']}",
                markup=False,
                highlight=False,
            )
    if as_json:
        print_json(out)
        return
    _print_table(out, console.width)


#: Every kind of run a record can name (record/schema.py MODELS, and a server sweep's).
KINDS: tuple[str, ...] = (
    "bench",
    "eval",
    "offline",
    "workload",
    "flow",
    "sweep",
    "server-sweep",
    "server",
    "command",
    "slurm",
    "slurm-node",
    "remote",
)


def _kinds(text: str) -> list[str]:
    kinds = [k.strip() for k in text.split(",") if k.strip()]
    unknown = [k for k in kinds if k not in KINDS]
    if unknown or not kinds:
        raise UsageError(
            f"unknown --kind {', '.join(unknown) or repr(text)}",
            hint=f"one or more of: {', '.join(KINDS)}",
        )
    return kinds


def _cells(row: dict[str, Any]) -> dict[str, str]:
    from proctor.spec.durations import format_duration

    exit_text = "" if row["exit_code"] is None else str(row["exit_code"])
    if row["exit_signal"]:
        exit_text += f" {row['exit_signal']}"
    duration = row["duration_s"]
    commit = (row["source_commit"] or "")[:8] + ("+dirty" if row["source_dirty"] else "")
    return {
        "run id": row["id"],
        "kind": row["kind"] or "",
        "name": row["name"] or "",
        "outcome": row["outcome"],
        "exit": exit_text,
        "duration": "" if duration is None else format_duration(float(duration)),
        "commit": commit if row["source_commit"] else "",
        "gpu": row["gpu"] or "",
    }


#: The columns in the order shown, and the order they go when the terminal is too narrow
#: (first to go first). A header is never cut: a column is shown whole or not at all; only
#: the name shrinks (to NAME_MIN, with an ellipsis).
COLUMNS = ("run id", "kind", "name", "outcome", "exit", "duration", "commit", "gpu")
DROP_ORDER = ("gpu", "exit", "kind", "duration", "commit")
NAME_MIN, NAME_MAX, GAP = 10, 32, 2


def fit_columns(cells: list[dict[str, str]], width: int) -> dict[str, int]:
    """Each column shown and its width: the natural widths (header or widest cell), the name
    shrunk first, then columns dropped in DROP_ORDER, until the table fits `width`."""
    natural = {
        col: max([len(col), *(len(c[col]) for c in cells)])
        for col in COLUMNS
        if col in ("run id", "name", "outcome") or any(c[col] for c in cells)
    }
    natural["name"] = min(natural["name"], NAME_MAX)

    def total(cols: dict[str, int]) -> int:
        return sum(cols.values()) + GAP * (len(cols) - 1)

    shown = dict(natural)
    for col in (None, *DROP_ORDER):
        if col is not None:
            shown.pop(col, None)
        over = total(shown) - width
        if over <= 0:
            return shown
        if shown["name"] - over >= NAME_MIN:
            shown["name"] -= over
            return shown
        shown["name"] = max(NAME_MIN, len("name"))
        if total(shown) <= width:
            return shown
    return shown  # wider than the terminal still: it wraps, whole


def _print_table(rows: list[dict[str, Any]], width: int) -> None:
    from rich.table import Table

    cells = [_cells(row) for row in rows]
    widths = fit_columns(cells, width)
    table = Table(box=None, pad_edge=False, header_style="bold", padding=(0, GAP, 0, 0))
    for col, size in widths.items():
        table.add_column(
            col,
            no_wrap=True,
            min_width=size,
            max_width=size,
            overflow="ellipsis" if col == "name" else "fold",
        )
    for cell in cells:
        table.add_row(*(cell[col] for col in widths))
    console.print(table)


def _since(text: str) -> str:
    """--since as an ISO instant with its offset: a duration ago, or a date or date-time."""
    if text[:1].isdigit() and not text[:4].isdigit():
        seconds = parse_duration(text, option="--since")
        return iso_at(time.time() - seconds)
    try:
        return instant(text).isoformat()
    except ValueError:
        raise UsageError(
            f"invalid --since {text!r}",
            hint="give a duration ago (2h, 7d) or an ISO date/time "
            "(2026-12-03, 2026-12-03T14:00, 2026-12-03T14:00+01:00)",
        ) from None


@app.command("show")
def show(
    ref: str = typer.Argument(..., help=REF_HELP),
    runs_dir: str = RunsDirOpt,
    as_json: bool = JsonOpt,
) -> None:
    """The run record, its state as the evidence says, and its results.

    A bench's or an eval's headline (verdict, tok/s, latencies, score); a flow's steps and its
    workloads' results."""
    from proctor.record.headline import headline_of

    run = _find(ref, runs_dir)
    view = _view(run)
    view["headline"] = headline_of(run.path)
    if as_json:
        print_json(view)
        return
    record = read_view(run.path)
    launched = record if isinstance(record, LaunchedRecord) else None
    gpu = launched.gpu if launched else {}
    commit = record.source_commit or (record.source or {}).get("reason")
    fields: list[tuple[str, Any]] = [
        ("run_id", view.get("run_id")),
        ("name", view.get("name")),
        ("kind", view.get("kind")),
        ("outcome", view.get("outcome")),
        ("state", view.get("state")),
        ("exit", _exit_text(view.get("exit"))),
        ("argv", _argv_text(view.get("argv"))),
        ("cwd", view.get("cwd")),
        ("created_at", view.get("created_at")),
        ("started_at", view.get("started_at")),
        ("ended_at", view.get("ended_at")),
        ("duration", _duration_text(view.get("duration_s"))),
        ("dir", view.get("dir")),
        ("log", view.get("log")),
        ("problem", view.get("problem")),
        ("source", f"{commit}{' (dirty)' if record.source_dirty else ''}" if commit else None),
        ("gpu", (gpu.get("gpus") or gpu.get("reason")) if gpu else None),
        ("gpu peaks", launched.gpu_peaks if launched and launched.gpu_peaks else None),
    ]
    if launched and launched.leftovers:
        from proctor.supervise.leftovers import notice

        fields.append(("leftovers", notice(launched.leftovers)))
    # What the record does not hold is left out, never shown as None.
    for key, value in fields:
        if value not in (None, "", [], {}):
            console.print(styled(f"{key:>11}", "bold", f" {value}"))
    _show_health(view)
    if view["headline"]:
        _print_headline(view["headline"])
    if isinstance(record, FlowRecord):
        _print_flow(record)


def _exit_text(exit_: Any) -> str | None:
    if not isinstance(exit_, dict) or exit_.get("code") is None:
        return None
    text = str(exit_["code"])
    if exit_.get("signal"):
        text += f" ({exit_['signal']})"
    if exit_.get("decided_by") == "proctor" and exit_.get("reason"):
        text += f", decided by proctor: {exit_['reason']}"
    return text


def _argv_text(argv: Any) -> str | None:
    return str(argv) if isinstance(argv, list) and argv else None


def _duration_text(seconds: Any) -> str | None:
    from proctor.spec.durations import format_duration

    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        return None
    return format_duration(float(seconds))


def _print_headline(headline: dict[str, Any]) -> None:
    """A bench's verdict and its reasons, then each figure on its own line."""
    from proctor.record.headline import figure_text

    verdict = headline.get("verdict")
    if verdict:
        style = "bold green" if verdict in ("VALID", "ok") else "bold red"
        console.print(styled(f"{'verdict':>11}", "bold", " ") + styled(verdict, style))
        for why in headline.get("why") or []:
            console.print(f"{'':>11}   - {why}")
    for label, value, unit in headline.get("figures") or []:
        console.print(styled(f"{label:>11}", "bold", f" {figure_text(value, unit)}"))


def _print_flow(record: FlowRecord) -> None:
    """A flow's steps (when each ran, its exit, what it said), then its workloads' results."""
    from proctor.record.headline import result_line
    from proctor.store.db import instant

    console.print(styled(f"{'steps':>11}", "bold"))
    for step in record.steps:
        took = ""
        if step.ended_at:
            with contextlib.suppress(ValueError):
                seconds = (instant(step.ended_at) - instant(step.started_at)).total_seconds()
                took = _duration_text(seconds) or ""
        index = getattr(step, "index", None)
        name = f"{step.step}{'' if index is None else f' {int(index) + 1}'}"
        code = "running" if step.exit_code is None else f"exit {step.exit_code}"
        message = getattr(step, "message", None) or ""
        console.print(f"{'':>11} {name:<12} {code:<8} {took:>7}  {message}")
    if record.workload_runs:
        console.print(styled(f"{'workloads':>11}", "bold"))
        for row in record.workload_runs:
            line = result_line(str(row.name), row.exit_code, row.headline)
            console.print(f"{'':>11} {row.run_id or '(not started)'}  {line}")


def _show_health(record: dict[str, Any]) -> None:
    """The GPU preflight and what changed during the run (docs/gpu-health.md)."""
    from proctor.monitors.gpu_health import change_line, one_line

    before = record.get("gpu_health")
    if not isinstance(before, dict):
        return
    allowed = " (run anyway: --allow-unhealthy-gpu)" if before.get("allowed") else ""
    console.print(
        styled(
            f"{'gpu health':>11}",
            "bold",
            f" {one_line(before).removeprefix('gpu health: ')}{allowed}",
        )
    )
    change = record.get("gpu_health_change")
    if before.get("devices"):
        text = change_line(change if isinstance(change, dict) else None)
        console.print(styled(f"{'gpu after':>11}", "bold", f" {text}"))


@app.command("logs")
def logs(
    ref: str = typer.Argument(..., help=REF_HELP),
    follow: bool = typer.Option(
        False, "--follow", "-f", help="Keep printing as the log grows, until the run ends."
    ),
    runs_dir: str = RunsDirOpt,
) -> None:
    """Print a run's combined log."""
    run = _find(ref, runs_dir)
    if _far(run):
        from proctor.targets.remote.orchestrate import remote_logs

        remote_logs(run.path, sys.stdout.buffer, follow)
        return
    follow_log(run, sys.stdout.buffer, from_start=True, until_done=follow)


@app.command("attach")
def attach(ref: str = typer.Argument(..., help=REF_HELP), runs_dir: str = RunsDirOpt) -> None:
    """Follow a run's log until it ends; exit with its status.

    As `proctor run` would have."""
    run = _find(ref, runs_dir)
    if _far(run):
        from proctor.cli.remote import attach as attach_remote

        if code := attach_remote(run.path, follow=True, as_json=False):
            raise typer.Exit(code)
        return
    supervised = SupervisedRun(run)
    state = supervised.follow_to_end(sys.stdout.buffer)
    err_console.print(f"proctor: {supervised.summary(state)}", highlight=False)
    code = supervised.exit_code(state)
    if code:
        raise typer.Exit(code)


@app.command("wait")
def wait(
    ref: str = typer.Argument(..., help=REF_HELP),
    timeout: str = typer.Option(None, "--timeout", help="Give up after this long (exit 4)."),
    runs_dir: str = RunsDirOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Wait for a run to end; exit with its status.

    6 if it is unknown, 4 if it timed out."""
    run = _find(ref, runs_dir)
    if _far(run):
        from proctor.cli.remote import attach as attach_remote

        if code := attach_remote(run.path, follow=False, as_json=as_json):
            raise typer.Exit(code)
        return
    limit = parse_duration(timeout, option="--timeout") if timeout else None
    state = SupervisedRun(run).wait(limit)
    if as_json:
        print_json(_view(run))
    if state.state in ("running", "starting"):
        raise TimeLimitReached(f"run {run.run_id} still running after {timeout}")
    if not as_json:
        err_console.print(f"proctor: {summary_line(run, state)}", highlight=False)
    code = exit_for_state(run, state)
    if code:
        raise typer.Exit(code)


@app.command("stop")
def stop(
    ref: str = typer.Argument(..., help=REF_HELP),
    runs_dir: str = RunsDirOpt,
    wait_for: str = typer.Option("60s", "--wait", help="How long to wait for it to end."),
    as_json: bool = JsonOpt,
) -> None:
    """Stop a run (SIGTERM, its grace period, SIGKILL).

    To its whole process tree. Idempotent."""
    run = _find(ref, runs_dir)
    if _far(run):
        from proctor.targets.remote.orchestrate import remote_stop

        sent = remote_stop(run.path)
        if as_json:
            print_json({"run_id": run.run_id, "stop_sent": sent, "remote": True})
        else:
            err_console.print(
                f"proctor: stop {'sent to' if sent else 'not needed for'} remote "
                f"run {run.run_id}; `proctor runs wait {run.run_id}` fetches it"
            )
        return
    supervised = SupervisedRun(run)
    sent = supervised.stop()
    orphans = None
    if sent:
        state = supervised.wait(parse_duration(wait_for, option="--wait"))
    else:
        # No live wrapper: whatever its command left running is stopped from the record.
        orphans = stop_dead_wrapper_run(run)
        state = run_state(run)
    view = {
        "run_id": run.run_id,
        "stop_sent": sent,
        "state": state.state,
        "outcome": effective_outcome(read_view(run.path), state),
        "orphans": orphans.to_dict() if orphans else None,
    }
    if as_json:
        print_json(view)
    elif sent:
        err_console.print(f"proctor: {summary_line(run, state)}", highlight=False)
    elif orphans is not None and orphans.found:
        err_console.print(
            f"proctor: run {run.run_id}: {orphans.reason} "
            f"(pids {', '.join(map(str, orphans.found))}); "
            f"result {view['outcome']}",
            markup=False,
            highlight=False,
        )
    else:
        err_console.print(
            f"proctor: run {run.run_id} is not running ({view['outcome']}); "
            f"no process of it is alive",
            markup=False,
            highlight=False,
        )
    if state.state in ("running", "starting"):
        raise WorkloadFailed(f"run {run.run_id} is still running after {wait_for}")
    if orphans is not None and orphans.survivors:
        raise WorkloadFailed(
            f"run {run.run_id}: processes {orphans.survivors} survived SIGKILL",
            hint="they may be in uninterruptible sleep (state D); see `ps -o pid,stat`",
        )


@app.command("verify")
def verify(
    ref: str = typer.Argument(..., help=REF_HELP),
    runs_dir: str = RunsDirOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Check a run's files against its manifest.sha256.

    Exit 2 on a mismatch."""
    run = _find(ref, runs_dir)
    check = verify_run_manifest(run)
    view = {
        "run_id": run.run_id,
        "verified": check.verified,
        "manifest": check.present,
        "ok": len(check.ok),
        "changed": check.changed,
        "missing": check.missing,
        "extra": check.extra,
        "outside": check.outside,
    }
    if as_json:
        print_json(view)
    elif check.verified:
        console.print(f"run {run.run_id}: {len(check.ok)} artifacts verified")
    else:
        console.print(f"run {run.run_id}: NOT verified: {view}")
    if not check.present:
        raise UsageError(f"run {run.run_id} has no manifest.sha256 (still running, or it died)")
    if not check.verified:
        from proctor.errors import FaultDetected

        raise FaultDetected(f"run {run.run_id}: artifacts do not match manifest.sha256")


@app.command("reindex")
def reindex_command(runs_dir: str = RunsDirOpt, as_json: bool = JsonOpt) -> None:
    """Rebuild the SQLite store from the run directories.

    They are the source of truth."""
    directory = _runs_dir(runs_dir)
    path = _store_path(directory)
    skipped: list[tuple[Path, str]] = []
    unknown: list[tuple[Path, str]] = []
    try:
        count, moved = rebuild(path, directory, skipped, unknown)
    except StoreUnreadable as error:
        raise UsageError(str(error), hint=error.hint) from None
    if as_json:
        print_json(
            {
                "indexed": count,
                "store": str(path),
                "moved_aside": str(moved) if moved else None,
                "unknown": [{"dir": str(d), "reason": r} for d, r in unknown],
                "skipped": [{"dir": str(d), "reason": r} for d, r in skipped],
            }
        )
        return
    if moved:
        err_console.print(f"proctor: the store was corrupt: moved it aside to {moved}")
    for run_dir, reason in unknown:
        err_console.print(
            f"proctor: warning: {run_dir}: {reason}; indexed as unknown",
            markup=False,
            highlight=False,
        )
    for run_dir, reason in skipped:
        err_console.print(f"proctor: skipped {run_dir}: {reason}", markup=False, highlight=False)
    console.print(
        f"indexed {count} runs into {path}"
        + (f", {len(unknown)} of them unknown (record unreadable)" if unknown else "")
        + (f", skipped {len(skipped)}" if skipped else "")
    )


def _mount_compare() -> None:
    from proctor.cli.runs_compare import register_compare

    register_compare(app)


_mount_compare()

"""`proctor runs ...`: find, watch, wait for, stop, verify and index runs from any shell."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any, get_args

import typer

from proctor.cli.output import console, err_console, print_json, styled
from proctor.errors import TimeLimitReached, UsageError, WorkloadFailed
from proctor.record.finish import iso_at
from proctor.record.manifest import verify_run_manifest
from proctor.record.rundir import RunDir
from proctor.record.schema import LaunchedRecord, Outcome, read_view, view_record
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
from proctor.supervise.launch import follow_log, record_of, resolve_run
from proctor.supervise.orphans import stop_dead_wrapper_run
from proctor.targets.service import SupervisedRun, exit_for_state, summary_line

app = typer.Typer(
    help="List, show, follow, wait for, stop, verify and reindex runs.", no_args_is_help=True
)

RunsDirOpt = typer.Option(None, "--runs-dir", help="Runs directory (env PROCTOR_RUNS_DIR).")
JsonOpt = typer.Option(False, "--json", help="Machine-readable output.")


def _runs_dir(flag: str | None) -> Path:
    return Path(resolve_runs_dir(flag, load_config()).value)


def _store_path(runs_dir: Path) -> Path:
    return Path(resolve_store_path(load_config(), runs_dir).value)


def _find(ref: str, runs_dir_flag: str | None) -> RunDir:
    directory = _runs_dir(runs_dir_flag)
    if ref == "last":  # from the store's index when it can say: no walk of every run
        from proctor.store.sync import newest_run_dir

        if newest := newest_run_dir(_store_path(directory), directory):
            return RunDir(newest)
    return resolve_run(directory, ref)


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
    runs_dir: str = RunsDirOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Runs, newest first, with the outcome as the evidence says (never 'ok' without a status)."""
    directory = _runs_dir(runs_dir)
    since_iso = _since(since) if since else None
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
        rows = store.iter_runs(name=name, commit=commit, since=since_iso)
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
    from rich.table import Table

    table = Table(box=None, pad_edge=False, header_style="bold")
    table.add_column("run id", no_wrap=True, min_width=22)
    table.add_column("name", no_wrap=True, overflow="ellipsis", min_width=10, max_width=26)
    with_gpu = any(row["gpu"] for row in out)
    widths = {"outcome": 7, "exit": 4, "duration": 8, "commit": 8, "gpu": 8}
    for col in ("outcome", "exit", "duration", "commit", *(("gpu",) if with_gpu else ())):
        table.add_column(col, no_wrap=True, min_width=widths[col], overflow="ellipsis")
    for row in out:
        exit_text = "" if row["exit_code"] is None else str(row["exit_code"])
        if row["exit_signal"]:
            exit_text += f" {row['exit_signal']}"
        duration = "" if row["duration_s"] is None else f"{row['duration_s']:.1f}s"
        commit_text = (row["source_commit"] or "")[:8] + ("+dirty" if row["source_dirty"] else "")
        cells = [row["id"], row["name"], row["outcome"], exit_text, duration, commit_text]
        table.add_row(*cells, *((row["gpu"] or "",) if with_gpu else ()))
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
    ref: str = typer.Argument(..., help="Run id, unique prefix, directory, or 'last'."),
    runs_dir: str = RunsDirOpt,
    as_json: bool = JsonOpt,
) -> None:
    """The run record, with the state as the evidence says."""
    run = _find(ref, runs_dir)
    view = _view(run)
    if as_json:
        print_json(view)
        return
    keys = (
        "run_id",
        "name",
        "kind",
        "outcome",
        "state",
        "exit",
        "argv",
        "cwd",
        "created_at",
        "started_at",
        "ended_at",
        "duration_s",
        "dir",
        "log",
    )
    for k in keys:
        console.print(styled(f"{k:>11}", "bold", f" {view.get(k)}"))
    if view.get("problem"):
        console.print(styled(f"{'problem':>11}", "bold", f" {view['problem']}"))
    record = read_view(run.path)
    commit = record.source_commit or (record.source or {}).get("reason")
    dirty = " (dirty)" if record.source_dirty else ""
    console.print(styled(f"{'source':>11}", "bold", f" {commit}{dirty}"))
    launched = record if isinstance(record, LaunchedRecord) else None
    gpu = launched.gpu if launched else {}
    console.print(styled(f"{'gpu':>11}", "bold", f" {gpu.get('gpus') or gpu.get('reason')}"))
    if launched and launched.gpu_peaks:
        console.print(styled(f"{'gpu peaks':>11}", "bold", f" {launched.gpu_peaks}"))
    _show_health(view)
    if launched and launched.leftovers:
        from proctor.supervise.leftovers import notice

        console.print(styled(f"{'leftovers':>11}", "bold", f" {notice(launched.leftovers)}"))


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
    ref: str = typer.Argument(...),
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
def attach(ref: str = typer.Argument(...), runs_dir: str = RunsDirOpt) -> None:
    """Follow a run's log until it ends, then exit with its status (like `proctor run`)."""
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
    ref: str = typer.Argument(...),
    timeout: str = typer.Option(None, "--timeout", help="Give up after this long (exit 4)."),
    runs_dir: str = RunsDirOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Wait for a run to end and exit with its status (6 if unknown, 4 if it timed out)."""
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
    ref: str = typer.Argument(...),
    runs_dir: str = RunsDirOpt,
    wait_for: str = typer.Option("60s", "--wait", help="How long to wait for it to end."),
    as_json: bool = JsonOpt,
) -> None:
    """Stop a run: SIGTERM to its whole tree, its grace period, then SIGKILL. Idempotent."""
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
    ref: str = typer.Argument(...), runs_dir: str = RunsDirOpt, as_json: bool = JsonOpt
) -> None:
    """Check every artifact against the run's manifest.sha256 (exit 2 on a mismatch)."""
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
    """Rebuild the SQLite store from the run directories (they are the source of truth)."""
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

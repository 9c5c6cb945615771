"""A remote run end to end: prepare, sync, setup, start, follow, fetch+verify, release.

The local `logs/<run-id>/` holds `.remote.json` (how to reconnect: target, host, far paths,
source identity; no secret) from the moment the far run exists, then the fetched artifacts,
verified against the far manifest.sha256 before any release, then `.completion.json`.
Dot-files are outside the run manifest, so `proctor runs verify` checks exactly what was fetched.

A controller that dies or loses the connection leaves the run going; `resume_remote(local_dir)`
(used by `proctor runs attach|wait|logs|stop`) reconnects from `.remote.json`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

from proctor.errors import (
    FaultDetected,
    ProctorError,
    ResultUnknown,
    TargetUnavailable,
    TimeLimitReached,
    UsageError,
)
from proctor.jobs.documents import read_bench
from proctor.record.finish import now_iso
from proctor.record.recorder import Recorder
from proctor.record.rundir import RunDir, write_atomic
from proctor.record.schema import read_view
from proctor.results.cost import COST_FILE, cost_of, format_cost
from proctor.source.identity import SourceIdentity
from proctor.targets.base import (
    BUDGET,
    SETUP,
    WAIT,
    Fetched,
    JobSpec,
    Prepared,
    Released,
    RunStatus,
    Target,
    capable,
)
from proctor.targets.service import SupervisedRun

REMOTE_FILE = ".remote.json"
COMPLETION_FILE = ".completion.json"
FAR_PYTHON = "{far-python}"  # job.argv[0] placeholder: the python prepare() found there


@dataclass
class Completion:
    """The completion report: is the result known, are the logs local and verified, is the
    machine in its agreed state, which source ran, and which targets were not met."""

    run_id: str | None
    local_dir: str | None
    target: dict[str, Any]
    source: dict[str, Any]
    result_known: bool = False
    exit_code: int | None = None
    exit_signal: str | None = None
    outcome: str | None = None
    logs_local: bool = False
    logs_verified: bool = False
    fetched: dict[str, Any] | None = None
    release: dict[str, Any] | None = None
    release_verified: bool | None = None
    detached: bool = False
    unmet: list[str] = field(default_factory=list)
    error: str | None = None
    error_type: str | None = None
    finished_at: str | None = None
    far: dict[str, Any] | None = None  # the far side as found: workspace, python, env.sh, setup
    reconnects: int = 0  # connections re-established after a drop
    indexed: bool = False  # fetched runs are in the local store
    limit: str | None = None  # the controller stopped the job: its time/cost budget was spent
    stopped_by: str | None = None  # stopped, not by this proctor: why (Slurm's reason)
    cost: dict[str, Any] | None = None  # a bench's cost on a priced machine (results/cost.py)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def text(self) -> str:
        exit_text = (
            "unknown"
            if not self.result_known
            else f"exit {self.exit_code}" + (f" ({self.exit_signal})" if self.exit_signal else "")
        )
        lines = [
            f"run {self.run_id} on {self.target.get('name')}: {self.outcome or 'unknown'}, "
            f"{exit_text}",
            f"  result known:   {'yes' if self.result_known else 'NO'}",
            f"  logs local:     {self.local_dir if self.logs_local else 'NO'}"
            + (" (verified against the far manifest)" if self.logs_verified else " (NOT verified)"),
            f"  machine state:  {_release_text(self.release, self.release_verified)}",
            f"  source:         {self.source.get('source_id')} ({self.source.get('summary', '')})",
        ]
        if self.far:
            lines.append(
                f"  far side:       python {self.far.get('python')}, workspace "
                f"{self.far.get('workspace')}, env.sh {self.far.get('env_sh') or 'none'}"
                f", setup {self.far.get('setup')}"
            )
        if self.reconnects:
            lines.append(f"  reconnected:    {self.reconnects} time(s) after a drop")
        if self.limit:
            lines.append(f"  stopped:        {self.limit}")
        if self.stopped_by:
            lines.append(f"  stopped by:     {self.stopped_by}")
        if self.cost:
            lines.append(f"  cost:           {format_cost(self.cost)}")
        if self.unmet:
            lines.append("  not met:        " + "; ".join(self.unmet))
        if self.error:
            lines.append(f"  error:          {self.error}")
        return "\n".join(lines)

    def exit_status(self) -> int:
        """The exit code for this completion; raises the ProctorError that decides it, if any.

        Order: unknown result (6) > unverified logs (2) > cleanup failure (69) > time limit (4);
        otherwise the command's own status passes through, as for a local `proctor run`."""
        if self.detached:
            return 0
        if self.error_type and not self.result_known:
            raise _rebuild(self.error_type, self.error or "remote run failed")
        if not self.result_known:
            raise ResultUnknown(
                f"run {self.run_id}: result unknown (no exit status established)",
                hint=f"see {self.local_dir}",
            )
        if not self.logs_verified:
            raise FaultDetected(
                f"run {self.run_id}: fetched artifacts do not match the far manifest: "
                f"{'; '.join(self.unmet)}",
                hint="fetch again: proctor runs attach ID",
            )
        if self.release_verified is False:
            raise TargetUnavailable(
                f"run {self.run_id}: cleanup failed, the machine may still be billing: "
                f"{(self.release or {}).get('detail')}",
                hint="check with `proctor pod status ID` and stop it",
            )
        if self.limit:
            raise TimeLimitReached(
                f"run {self.run_id} stopped by the controller: {self.limit}",
                hint="raise the budget (max_time / max_cost)",
            )
        if self.outcome == "timeout":
            raise TimeLimitReached(f"run {self.run_id} reached its time limit and was stopped")
        return int(self.exit_code or 0)


def _rebuild(type_name: str, message: str) -> ProctorError:
    import proctor.errors as errors

    cls = getattr(errors, type_name, None)
    if isinstance(cls, type) and issubclass(cls, ProctorError) and cls is not errors.NotAuthorised:
        return cls(message)
    return TargetUnavailable(message)


def _release_text(release: dict[str, Any] | None, verified: bool | None) -> str:
    if release is None:
        return "not released yet"
    state = "verified" if verified else "NOT verified"
    return f"{release.get('action')} ({state}) {release.get('detail') or ''}".strip()


@dataclass
class RemoteOptions:
    existing_checkout: str | None = None  # run in a checkout the user points at (inspected)
    setup_script: str | None = None  # relative to the checkout; once per workspace
    detach: bool = False
    release: bool = True  # release the machine after retrieval (pods: stop unless keep)
    on_started: Callable[[str, Path], None] | None = None  # run id, local dir
    store_path: Path | None = None  # local store to index fetched runs in (default runs_dir's)
    # Called once the far workspace is ready, before the job starts (ships the files it reads).
    before_start: Callable[[Target, Prepared, JobSpec], None] | None = None


def source_view(identity: SourceIdentity, synced: Any = None) -> dict[str, Any]:
    view: dict[str, Any] = {
        "source_id": identity.source_id,
        "summary": identity.summary(),
        "commit": identity.commit,
        "dirty": identity.dirty,
        "branch": identity.branch,
        "remote_url": identity.remote_url,
    }
    if synced is not None:
        view["checkout"] = synced.to_record()
    return view


def run_setup(target: Target, script: str | None, checkout: str) -> str:
    """The project setup script on a target that runs one: 'ran', 'already-done' or 'none'."""
    setup = capable(target, SETUP)
    if not script or setup is None:
        return "none"
    return str(setup.run_setup(script, checkout))


def run_remote(
    target: Target,
    identity: SourceIdentity,
    job: JobSpec,
    runs_dir: Path,
    out: IO[bytes],
    options: RemoteOptions | None = None,
) -> Completion:
    """Run `job` on `target` with the exact source `identity`; see the module docstring."""
    opts = options or RemoteOptions()
    info = target.describe()
    completion = Completion(None, None, info.to_record(), source_view(identity))
    try:
        prepared = target.prepare()
        synced = target.sync_source(identity, existing=opts.existing_checkout)
        completion.source = source_view(identity, synced)
        setup = run_setup(target, opts.setup_script, synced.checkout)
        completion.far = {
            "workspace": prepared.workspace,
            "python": prepared.python,
            "env_sh": prepared.env_sh,
            "setup": setup,
            "checkout": synced.checkout,
            "venv": (prepared.found.get("venv") or {}).get("venv"),
        }
        if job.argv and job.argv[0] == FAR_PYTHON:
            job.argv[0] = prepared.python
        if opts.before_start is not None:
            opts.before_start(target, prepared, job)
        started = target.start(job)
    except ProctorError as error:
        release_into(target, completion, opts)
        completion.error, completion.error_type = error.one_line(), type(error).__name__
        raise
    local = RunDir(runs_dir / started.run_id)
    local.path.mkdir(parents=True, exist_ok=True)
    remote = {
        "schema_version": 1,
        "run_id": started.run_id,
        "target": info.to_record(),
        "prepared": {**prepared.to_record(), "setup": setup},
        "remote_dir": started.remote_dir,
        "log": started.log_name,
        "attached": started.attached,
        "source": completion.source,
        "job": job.public(),
        "release": {"on_finish": opts.release},
        "created_at": now_iso(),
    }
    text = json.dumps(remote, indent=2, default=str, allow_nan=False)
    write_atomic(local.path / REMOTE_FILE, text + "\n")
    if not local.record_path.exists():
        Recorder(local, {}).start(
            {
                "kind": "remote",
                "outcome": "running",
                "target": info.to_record(),
                "remote_dir": started.remote_dir,
                "source": completion.source,
            }
        )
    completion.run_id, completion.local_dir = started.run_id, str(local.path)
    if opts.on_started is not None:
        opts.on_started(started.run_id, local.path)
    if opts.detach:
        completion.detached = True
        _write_completion(local.path, completion)
        return completion
    return finish_remote(
        target,
        local.path,
        out,
        follow=True,
        release=opts.release,
        completion=completion,
        store_path=opts.store_path,
    )


def finish_remote(
    target: Target,
    local_dir: Path,
    out: IO[bytes] | None,
    *,
    follow: bool = True,
    release: bool = True,
    completion: Completion | None = None,
    store_path: Path | None = None,
) -> Completion:
    """Follow (optionally), wait, fetch and verify, then release; the completion report.
    What was fetched is indexed in the local store (`store_path`, default the runs dir's)."""
    remote = read_remote(local_dir)
    run_id = str(remote["run_id"])
    if completion is None:
        completion = Completion(run_id, str(local_dir), remote["target"], remote.get("source", {}))
    status: RunStatus | None = None
    # The same run service as a local run: follow, then the final status through the target.
    supervised = SupervisedRun(RunDir(local_dir), target)
    try:
        if follow and out is not None:
            status = supervised.follow(out)
        status = supervised.final_status(status)
        budgeted = capable(target, BUDGET)
        completion.limit = budgeted.limit_reached if budgeted is not None else None
        if completion.limit:
            completion.unmet.append(f"budget: {completion.limit}")
        completion.result_known = status.state == "finished" and status.exit_code is not None
        completion.exit_code, completion.exit_signal = status.exit_code, status.exit_signal
        completion.outcome = status.outcome if completion.result_known else "unknown"
        fetched = target.fetch(run_id, local_dir)
        apply_fetch(completion, fetched)
    except ProctorError as error:
        completion.error, completion.error_type = error.one_line(), type(error).__name__
        completion.unmet.append(f"retrieval incomplete: {error.message}")
        # A budget stop proctor made before the follow failed is still its reason.
        budgeted = capable(target, BUDGET)
        if budgeted is not None and budgeted.limit_reached and not completion.limit:
            completion.limit = budgeted.limit_reached
            completion.unmet.append(f"budget: {completion.limit}")
    waits = capable(target, WAIT)
    completion.reconnects = waits.reconnects if waits is not None else 0
    if completion.logs_local:
        completion.cost = write_costs(target, local_dir)
        completion.indexed = index_local(local_dir, store_path)
    if release:
        release_into(target, completion, None)
    completion.finished_at = now_iso()
    _write_completion(local_dir, completion)
    return completion


def write_costs(target: Target, local_dir: Path) -> dict[str, Any] | None:
    """On a priced target: `.cost.json` beside each fetched bench (the run and its steps), the
    fetched files left as they are; the run's own cost (None when it is not a bench)."""
    budgeted = capable(target, BUDGET)
    if budgeted is None:
        return None
    price, source = budgeted.price_per_hr()
    steps = local_dir / "steps"
    dirs = [
        local_dir,
        *(sorted(p for p in steps.iterdir() if p.is_dir()) if steps.is_dir() else []),
    ]
    own: dict[str, Any] | None = None
    for run_dir in dirs:
        doc = read_bench(run_dir / "metrics.json")  # only a bench is priced
        if doc is None:
            continue
        wall = read_view(run_dir).duration_s
        cost = cost_of(
            doc, price, float(wall) if isinstance(wall, (int, float)) else None, source=source
        )
        write_atomic(run_dir / COST_FILE, json.dumps(cost, indent=2, allow_nan=False) + "\n")
        if run_dir == local_dir:
            own = cost
    return own


def index_local(run_dir: Path, store_path: Path | None = None) -> bool:
    """Index a fetched run (and the step runs fetched inside it) in the local store."""
    import sqlite3

    from proctor.spec.config import STORE_NAME
    from proctor.store.db import INDEX_WAIT_S, Store, StoreUnreadable
    from proctor.store.sync import clear_pending, mark_pending, register_pending

    try:
        # Bounded: a locked store leaves the run pending for the next indexing (store/sync.py).
        mark_pending(run_dir)
        with Store(store_path or run_dir.parent / STORE_NAME, timeout=INDEX_WAIT_S) as store:
            done = store.index_run_dir(run_dir)
            steps = run_dir / "steps"
            if steps.is_dir():
                for child in sorted(steps.iterdir()):
                    if child.is_dir():
                        store.index_run_dir(child)
            clear_pending(run_dir)
            return done
    except (OSError, ProctorError, ValueError, sqlite3.Error, StoreUnreadable) as error:
        # The artifacts are local and verified; a store problem must not hide that.
        import sys

        register_pending(run_dir)
        sys.stderr.write(f"proctor: could not index {run_dir} in the store: {error}\n")
        return False


def apply_fetch(completion: Completion, fetched: Fetched) -> None:
    completion.fetched = fetched.to_record()
    completion.logs_local = bool(fetched.files)
    completion.logs_verified = fetched.verified
    if not fetched.manifest_present:
        completion.unmet.append("no manifest.sha256 on the far side: artifacts not verifiable")
    for label, names in (
        ("changed", fetched.changed),
        ("missing", fetched.missing),
        ("unexpected", fetched.extra),
    ):
        if names:
            completion.unmet.append(f"{label} against the far manifest: {', '.join(names)}")
    if not completion.result_known:
        completion.unmet.append("no exit status: result unknown")


def release_into(target: Target, completion: Completion, opts: RemoteOptions | None) -> None:
    if opts is not None and not opts.release:
        return
    try:
        released: Released = target.release()
    except ProctorError as error:
        completion.release = {"action": "failed", "detail": error.one_line()}
        completion.release_verified = False
        completion.unmet.append(f"cleanup: {error.message}")
        return
    completion.release = released.to_record()
    completion.release_verified = released.verified
    if not released.verified:
        completion.unmet.append(f"cleanup failed: {released.detail}")


def _write_completion(local_dir: Path, completion: Completion) -> None:
    text = json.dumps(completion.to_dict(), indent=2, default=str, allow_nan=False)
    write_atomic(local_dir / COMPLETION_FILE, text + "\n")


def read_remote(local_dir: Path) -> dict[str, Any]:
    try:
        data = json.loads((local_dir / REMOTE_FILE).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        raise UsageError(f"{local_dir} is not a remote run (no readable {REMOTE_FILE})") from None
    if not isinstance(data, dict):
        raise UsageError(f"{local_dir / REMOTE_FILE} is not a JSON object")
    return data


def is_remote_run(local_dir: Path) -> bool:
    return (local_dir / REMOTE_FILE).is_file()


def target_for_record(remote: dict[str, Any]) -> Target:
    """Rebuild the target a remote run was started on, from its `.remote.json` (registry)."""
    from proctor.targets.registry import target_from_record

    return target_from_record(remote)


def resume_remote(
    local_dir: Path, out: IO[bytes] | None, *, follow: bool = True, target: Target | None = None
) -> Completion:
    """Reconnect to a remote run from its local directory: follow, wait, fetch, verify, release."""
    remote = read_remote(local_dir)
    target = target or target_for_record(remote)
    try:
        release = bool((remote.get("release") or {}).get("on_finish", True))
        return finish_remote(target, local_dir, out, follow=follow, release=release)
    finally:
        target.close()


@contextmanager
def _far_run(local_dir: Path) -> Iterator[tuple[Target, str]]:
    """The target of a remote run (found from its local record) and the far-side run id."""
    remote = read_remote(local_dir)
    target = target_for_record(remote)
    try:
        yield target, str(remote["run_id"])
    finally:
        target.close()


def remote_status(local_dir: Path) -> RunStatus:
    with _far_run(local_dir) as (target, run_id):
        return target.status(run_id)


def remote_logs(local_dir: Path, out: IO[bytes], follow: bool) -> RunStatus:
    with _far_run(local_dir) as (target, run_id):
        return target.follow(run_id, out, until_done=follow)


def remote_stop(local_dir: Path) -> bool:
    with _far_run(local_dir) as (target, run_id):
        return target.stop(run_id)


__all__ = [
    "COMPLETION_FILE",
    "FAR_PYTHON",
    "REMOTE_FILE",
    "Completion",
    "RemoteOptions",
    "finish_remote",
    "index_local",
    "is_remote_run",
    "read_remote",
    "release_into",
    "remote_logs",
    "remote_status",
    "remote_stop",
    "resume_remote",
    "run_remote",
    "target_for_record",
    "write_costs",
]

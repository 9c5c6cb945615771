"""The local target: the Target protocol over proctor.supervise.launch on this machine.

Also home of `plan_for_job`, which the remote agent uses too, so that a run started on a far
host is planned, started and recorded by exactly the code a local run uses.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import IO, Any

from proctor.errors import UsageError
from proctor.record.manifest import read_manifest, sha256_file
from proctor.record.rundir import MANIFEST, RunDir, is_run_id
from proctor.record.schema import read_view
from proctor.record.status import effective_outcome, run_state
from proctor.source.archive import inspect_checkout
from proctor.source.identity import SourceIdentity
from proctor.spec.config import ProjectConfig, load_config
from proctor.spec.plan import RunFlags, RunPlan, resolve_run_plan
from proctor.supervise.launch import (
    RunSpec,
    Started,
    follow_log,
    request_stop,
    start_run,
)
from proctor.supervise.signals import deferred_stops
from proctor.targets import base


def _secs(value: float | None) -> str | None:
    return None if value is None else f"{value:g}s"


def plan_for_job(
    job: base.JobSpec, runs_dir: Path, checkout: Path, config: ProjectConfig | None = None
) -> RunPlan:
    """The RunPlan for `job`, with cwd resolved against `checkout`."""
    cwd = Path(job.cwd) if job.cwd and Path(job.cwd).is_absolute() else checkout / (job.cwd or "")
    flags = RunFlags(
        argv=list(job.argv),
        name=job.name,
        runs_dir=str(runs_dir),
        timeout=_secs(job.timeout_s),
        grace=_secs(job.grace_s),
        gpu_sample=job.gpu_sample_s,
        env=[f"{k}={v}" for k, v in job.env.items()],
        key=job.key,
        detach=True,
        cwd=str(cwd),
        allow_unhealthy_gpu=job.allow_unhealthy_gpu or None,
    )
    plan = resolve_run_plan(flags, config or ProjectConfig(), environ={})
    plan.secret_names = sorted({*plan.secret_names, *job.secret_names})
    return plan


def status_of(run: RunDir) -> base.RunStatus:
    state = run_state(run)
    return base.RunStatus(
        state=state.state,
        exit_code=state.exit.code if state.exit else None,
        exit_signal=state.exit.signal if state.exit else None,
        wrapper_alive=state.wrapper_alive,
        exit_reason=state.exit.reason if state.exit else None,
        outcome=effective_outcome(read_view(run.path), state),
    )


def verify_copy(manifest_dir: Path, copy_dir: Path) -> base.Fetched:
    """Check every file of `copy_dir` against `manifest_dir/manifest.sha256`."""
    manifest = manifest_dir / MANIFEST
    files = sorted(
        p.relative_to(copy_dir).as_posix()
        for p in copy_dir.rglob("*")
        if p.is_file() and not p.name.startswith(".") and p.name != MANIFEST
    )
    if not manifest.is_file():
        return base.Fetched(str(copy_dir), files, manifest_present=False)
    expected = read_manifest(manifest)
    missing = [n for n in expected if not (copy_dir / n).is_file()]
    changed = [n for n in expected if n not in missing and sha256_file(copy_dir / n) != expected[n]]
    extra = [n for n in files if n not in expected]
    return base.Fetched(str(copy_dir), files, True, changed, missing, extra)


class LocalTarget:
    """Runs on this machine; the workspace is the project checkout itself."""

    kind = "local"
    capabilities = frozenset({base.PLAN})

    def __init__(
        self, runs_dir: Path, checkout: Path | None = None, config: ProjectConfig | None = None
    ) -> None:
        self.runs_dir = Path(runs_dir)
        self.checkout = (checkout or Path.cwd()).resolve()
        self.config = config if config is not None else load_config(start=self.checkout)

    def describe(self) -> base.TargetInfo:
        from proctor.record.hostinfo import host_info

        return base.TargetInfo(kind="local", name="local", host=str(host_info()["hostname"]))

    def prepare(self) -> base.Prepared:
        import sys

        return base.Prepared(
            workspace=str(self.checkout),
            python=sys.executable,
            found={"runs_dir": str(self.runs_dir)},
        )

    def sync_source(
        self, identity: SourceIdentity, *, existing: str | None = None
    ) -> base.SyncedSource:
        path = Path(existing) if existing else self.checkout
        report = inspect_checkout(path)
        return base.SyncedSource(
            source_id=identity.source_id,
            checkout=str(path),
            action="local" if existing is None else "existing",
            verified=True,
            summary=report.summary(),
            dirty=report.dirty,
            untracked=list(report.untracked),
            modified=list(report.modified),
        )

    def _run(self, run_id: str) -> RunDir:
        if not is_run_id(run_id) or not (self.runs_dir / run_id).is_dir():
            raise UsageError(f"no run {run_id!r} in {self.runs_dir}", hint="see proctor runs list")
        return RunDir(self.runs_dir / run_id)

    def start(self, job: base.JobSpec) -> base.StartedRun:
        plan = plan_for_job(job, self.runs_dir, self.checkout, self.config)
        spec = RunSpec(group=job.group, target=self.describe().to_record(), extra=dict(job.extra))
        started = start_run(plan, spec)
        run = started.run
        return base.StartedRun(run.run_id, str(run.path), run.log_path().name, started.attached)

    def start_plan(self, plan: RunPlan) -> Started:
        """`proctor run` on this machine: the run from its resolved plan. Stop signals are held
        until the run exists (delivered on return), so a Ctrl-C never orphans a wrapper."""
        with deferred_stops():
            return start_run(plan)

    def run_facts(self, run: RunDir) -> dict[str, Any]:
        return {}

    def status(self, run_id: str) -> base.RunStatus:
        return status_of(self._run(run_id))

    def follow(
        self, run_id: str, out: IO[bytes], *, offset: int = 0, until_done: bool = True
    ) -> base.RunStatus:
        run = self._run(run_id)
        if offset:
            # follow_log starts at 0 or the end; copy the tail past `offset` ourselves first.
            with run.log_path().open("rb") as handle:
                handle.seek(offset)
                shutil.copyfileobj(handle, out)
            follow_log(run, out, from_start=False, until_done=until_done)
        else:
            follow_log(run, out, from_start=True, until_done=until_done)
        return status_of(run)

    def stop(self, run_id: str) -> bool:
        return request_stop(self._run(run_id))

    def fetch(self, run_id: str, dest: Path) -> base.Fetched:
        run = self._run(run_id)
        if dest.resolve() != run.path.resolve():
            shutil.copytree(run.path, dest, dirs_exist_ok=True)
        return verify_copy(run.path, dest)

    def release(self) -> base.Released:
        return base.Released(
            action="none", verified=True, detail="local machine: nothing to release"
        )

    def close(self) -> None:
        return None


def describe_record(info: base.TargetInfo) -> dict[str, Any]:
    return info.to_record()


__all__ = ["LocalTarget", "plan_for_job", "status_of", "verify_copy"]

"""The Slurm target: sync the exact source, submit, and hand the job to a detached tracker.

    target = SlurmTarget(options)                 # from resolve_slurm_options(...)
    started = target.start(plan)                  # -> launch.Started (group run directory)
    SlurmTarget.stop(run)                         # scancel through the tracker (or directly)

The local run directory is a *group*: `record.json` (job id, node list, Slurm accounting,
per-node outcomes), a combined log with each line prefixed by its node, `job.sbatch`,
the batch output, and `nodes/<node>/`, each a full run directory written on that node by the
supervising wrapper and verified against its own manifest after fetching.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from proctor.errors import ProctorError, ResultUnknown, TargetUnavailable, UsageError
from proctor.record.rundir import RunDir, write_atomic
from proctor.record.status import is_alive, read_wrapper_ref
from proctor.spec.plan import RunPlan
from proctor.supervise.launch import RunSpec, Started, key_lock, live_keyed_run, prepare_run
from proctor.supervise.wrapper import now_iso
from proctor.targets.slurm.login import LocalLogin, LoginHost
from proctor.targets.slurm.options import SlurmOptions, SlurmTargetSpec
from proctor.targets.slurm.scheduler import Slurm
from proctor.targets.slurm.script import RemoteLayout, render_script

META = "slurm.json"
TRACKER_START_TIMEOUT_S = 15.0


def login_for(spec: SlurmTargetSpec) -> LoginHost:
    if spec.local:
        return LocalLogin()
    raise TargetUnavailable(
        f"{spec.display()}: submitting over SSH is not available in this build",
        hint="run proctor on the login node with --target slurm://local",
    )


def _event(name: str, detail: str | None = None) -> dict[str, Any]:
    return {"time": now_iso(), "event": name, "detail": detail}


def update_record(
    run: RunDir, add_events: list[dict[str, Any]] | None = None, **fields: Any
) -> None:
    record = run.read_json("record.json") or {}
    record.update(fields)
    if add_events:
        record.setdefault("events", []).extend(add_events)
    run.write_json("record.json", record)


class SlurmTarget:
    def __init__(self, options: SlurmOptions, login: LoginHost | None = None) -> None:
        self.options = options
        self.login = login or login_for(options.target)
        self.slurm = Slurm(self.login)

    # -- start ----------------------------------------------------------------------------
    def start(self, plan: RunPlan) -> Started:
        """Submit the run, or attach to the live run holding the same key."""
        key = plan.key.value
        if not key:
            return self._start(plan)
        with key_lock(Path(plan.runs_dir.value), str(key)) as key_file:
            existing = live_keyed_run(key_file)
            if existing is not None:
                return Started(existing, True, plan.redactor())
            started = self._start(plan)
            write_atomic(
                key_file,
                json.dumps(
                    {"key": key, "run_id": started.run.run_id, "dir": str(started.run.path)}
                ),
            )
            return started

    def _start(self, plan: RunPlan) -> Started:
        target_info = {
            "kind": "slurm",
            "login": self.options.target.display(),
            "host": self.options.target.host or "local",
        }
        run, redactor = prepare_run(plan, RunSpec(kind="slurm", target=target_info))
        layout = RemoteLayout(self.login.expand(self.options.workspace), run.run_id)
        update_record(
            run,
            gpu={"present": None, "reason": "sampled on each node: see nodes/<node>/"},
            slurm={"requested": self.options.as_dict(), "remote_run_dir": layout.run_dir},
        )
        try:
            workdir, source_sync = self.sync_source(plan, layout)
            update_record(
                run, source_sync=source_sync, add_events=[_event("source", source_sync["summary"])]
            )
            script = self.write_job_files(run, plan, layout, workdir)
            env = {"PROCTOR_WRAPPER_ARGV": json.dumps(plan.argv), **plan.env_values}
            job_id = self.slurm.submit(layout.script, env=env)
        except ProctorError as error:
            update_record(
                run,
                outcome="failed",
                error=redactor.text(error.one_line()),
                add_events=[_event("submit_failed", redactor.text(error.message))],
            )
            raise
        meta = {
            "job_id": job_id,
            "target": self.options.target.display(),
            "remote_run_dir": layout.run_dir,
            "workspace": layout.workspace,
            "workdir": workdir,
            "log": (run.read_json("plan.json") or {}).get("log"),
            "nodes_requested": self.options.nodes,
            "store_path": plan.store_path.value,
        }
        run.write_json(META, meta)
        (run.path / "job.sbatch").write_text(script, encoding="utf-8")
        update_record(
            run,
            target={**target_info, "job_id": job_id},
            add_events=[_event("submitted", f"sbatch job {job_id}")],
        )
        start_tracker(run)
        return Started(run, False, redactor)

    def sync_source(self, plan: RunPlan, layout: RemoteLayout) -> tuple[str, dict[str, Any]]:
        """Ship the exact source into the shared workspace; returns the job's working dir."""
        from proctor.source import (
            checkout_path,
            ensure_matches,
            inspect_checkout,
            make_source_archive,
            source_identity,
            unpack_and_verify,
        )

        cwd = Path(str(plan.cwd.value))
        ident = source_identity(cwd)
        if not ident.is_git or ident.repo_root is None or ident.source_id is None:
            if not self.options.target.local:
                raise UsageError(
                    "a Slurm run over SSH needs a git checkout to ship",
                    hint="run from inside a git repository",
                )
            return str(cwd), {"kind": "in-place", "summary": f"not a git checkout: runs in {cwd}"}
        checkout = str(checkout_path(layout.workspace, ident.source_id))
        rel = os.path.relpath(cwd, ident.repo_root)
        workdir = checkout if rel == "." else f"{checkout}/{rel}"
        if self.login.exists(checkout):
            report = ensure_matches(inspect_checkout(checkout, ident))
            return workdir, {
                "kind": "existing",
                "checkout": checkout,
                "source_id": ident.source_id,
                "summary": f"verified existing checkout {checkout}",
                "verify": report.summary(),
            }
        with tempfile.TemporaryDirectory(prefix="proctor-src-") as tmp:
            info = make_source_archive(ident, tmp)
            report = unpack_and_verify(info.path, checkout)
        return workdir, {
            "kind": info.kind,
            "checkout": checkout,
            "source_id": info.source_id,
            "archive_sha256": info.sha256,
            "files": info.file_count,
            "summary": f"shipped {info.source_id} ({info.file_count} files) to {checkout}",
            "verify": report.summary(),
        }

    def write_job_files(
        self, run: RunDir, plan: RunPlan, layout: RemoteLayout, workdir: str
    ) -> str:
        group_plan = run.read_json("plan.json") or {}
        record = run.read_json("record.json") or {}
        node_plan = {**group_plan, "cwd": workdir, "store_path": None, "key": None}
        node_record: dict[str, Any] = {
            k: record[k]
            for k in (
                "schema",
                "schema_version",
                "name",
                "argv",
                "log",
                "proctor_version",
                "source",
                "env_overrides",
                "options",
                "created_at",
                "argv_display",
            )
            if k in record
        }
        node_record.update(
            kind="slurm-node",
            group=run.run_id,
            cwd=workdir,
            target={"kind": "slurm-node", "login": self.options.target.display()},
        )
        self.login.write_text(f"{layout.run_dir}/node-plan.json", json.dumps(node_plan, indent=2))
        self.login.write_text(
            f"{layout.run_dir}/node-record.json", json.dumps(node_record, indent=2)
        )
        job_name = f"proctor-{plan.name.value}"[:64]
        script = render_script(self.options, layout, job_name, workdir)
        self.login.write_text(layout.script, script, mode=0o755)
        return script

    # -- stop -----------------------------------------------------------------------------
    @staticmethod
    def stop(run: RunDir) -> bool:
        """Stop the job: the tracker scancels it and records the outcome. If the tracker is
        gone, scancel directly (the next tracker or `proctor slurm track` records it)."""
        ref = read_wrapper_ref(run)
        if is_alive(ref):
            assert ref is not None
            try:
                os.kill(ref.pid, 15)
            except ProcessLookupError:
                return False
            return True
        meta = run.read_json(META)
        if not meta or run.exit_code_path.exists():
            return False
        from proctor.targets.slurm.options import parse_target

        Slurm(login_for(parse_target(str(meta["target"])))).cancel(int(meta["job_id"]))
        return True


def start_tracker(run: RunDir) -> None:
    """Start the detached tracker for a group run and wait until it holds the run."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "proctor.targets.slurm.tracker", str(run.path)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=open(run.path / ".tracker.err", "ab"),  # noqa: SIM115 - handed to the child
        start_new_session=True,
        close_fds=True,
    )
    deadline = time.monotonic() + TRACKER_START_TIMEOUT_S
    while time.monotonic() < deadline:
        if read_wrapper_ref(run) is not None:
            import threading

            threading.Thread(target=proc.wait, daemon=True).start()
            return
        if proc.poll() is not None:
            break
        time.sleep(0.01)
    err = (run.path / ".tracker.err").read_text(errors="replace")[-400:]
    raise ResultUnknown(f"the Slurm job tracker did not start: {err.strip() or 'no output'}")

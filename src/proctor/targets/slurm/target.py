"""The Slurm target: sync the exact source, submit, and hand the job to a detached tracker.

    target = SlurmTarget(options)                 # from resolve_slurm_options(...)
    started = target.start_plan(plan)             # -> launch.Started (group run directory)
    started = target.start(job)                   # the Target protocol: JobSpec -> StartedRun
    SlurmTarget.stop(run)                         # scancel through the tracker (or directly)

The local run directory is a *group*: `record.json` (job id, node list, Slurm accounting,
per-node outcomes), a combined log with each line prefixed by its node, `job.sbatch`,
the batch output, and `nodes/<node>/`, each a full run directory written on that node by the
supervising wrapper and verified against its own manifest after fetching.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from proctor.errors import ProctorError, TargetUnavailable, UsageError
from proctor.record import owner
from proctor.record.recorder import Recorder, event
from proctor.record.rundir import RunDir, write_atomic
from proctor.record.schema import read_view
from proctor.record.status import is_alive, read_wrapper_ref
from proctor.source.identity import SourceIdentity
from proctor.spec.config import ProjectConfig
from proctor.spec.plan import RunFlags, RunPlan
from proctor.spec.server import ServerRequest
from proctor.supervise.launch import (
    RunSpec,
    Started,
    key_lock,
    live_keyed_run,
    prepare_run,
    start_detached,
)
from proctor.targets import base
from proctor.targets.local import status_of
from proctor.targets.slurm.login import LocalLogin, LoginHost
from proctor.targets.slurm.options import SlurmOptions, SlurmTargetSpec
from proctor.targets.slurm.scheduler import Slurm
from proctor.targets.slurm.script import RemoteLayout, render_script

META = "slurm.json"


@dataclass(frozen=True)
class MultiNodeArgv:
    """A launch whose head (node 0) and workers run different argv; `{node_rank}`,
    `{head_address}` and `{head_node}` are filled in on each node."""

    head: list[str]
    worker: list[str]
    env_names: frozenset[str] = frozenset()


@dataclass(frozen=True)
class GroupLaunch:
    """What kind of group run to submit: a plain command on every node (default), or a
    server (kind "server", its `server` record section in `extra`) launched per role."""

    kind: str = "slurm"
    group: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    multinode: MultiNodeArgv | None = None


TRACKER_START_TIMEOUT_S = 15.0
#: The facts of the group's record each node's record starts from (node-record.json).
NODE_RECORD_FIELDS = (
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


def login_for(
    spec: SlurmTargetSpec,
    ssh: Mapping[str, Any] | None = None,
    workspace: str | None = None,
    python: str | None = None,
) -> LoginHost:
    """Local subprocesses on the login node, or one SSH connection to it."""
    if spec.local:
        return LocalLogin()
    from proctor.targets.slurm.sshlogin import SshLogin, ssh_options

    record = dict(ssh or {"host": spec.host, "user": spec.user, "port": spec.port})
    return SshLogin(ssh_options(record, workspace, python))


def login_from_meta(meta: Mapping[str, Any]) -> LoginHost:
    """The login host a submitted run was sent through (slurm.json holds no secret)."""
    from proctor.targets.slurm.options import parse_target

    return login_for(
        parse_target(str(meta["target"])),
        meta.get("login") or None,
        meta.get("workspace"),
        meta.get("python"),
    )


def _event(name: str, detail: str | None = None) -> dict[str, Any]:
    return event(name, detail)


def update_record(
    run: RunDir, add_events: list[dict[str, Any]] | None = None, **fields: Any
) -> None:
    """Merge `fields` into the group's record on disk, through the recorder. A caller that
    builds a field from what the record holds reads it typed first (read_view, section):
    docs/architecture.md, "Writing a record"."""
    Recorder(run, {}).update(add_events=add_events, **fields)


class SlurmTarget:
    """A Slurm cluster as a `proctor.targets.base.Target`; run ids name local group runs."""

    kind = "slurm"
    capabilities = frozenset({base.PLAN, base.SERVE, base.INSPECT, base.FILES})

    def __init__(
        self,
        options: SlurmOptions,
        login: LoginHost | None = None,
        runs_dir: Path | None = None,
    ) -> None:
        self.options = options
        self.login = login or login_for(
            options.target, options.ssh, options.workspace, options.python
        )
        self.slurm = Slurm(self.login)
        self.runs_dir = runs_dir

    # -- the Target protocol (proctor.targets.base) ---------------------------------------
    def describe(self) -> base.TargetInfo:
        return base.TargetInfo(
            kind="slurm",
            name=self.options.target.display(),
            host=self.options.target.host,
            details=self.options.as_dict(),
        )

    def prepare(self) -> base.Prepared:
        workspace = self.login.expand(self.options.workspace)
        ping = self.login.run(["scontrol", "ping"])
        if ping.returncode != 0 or "UP" not in ping.stdout:
            raise TargetUnavailable(
                f"slurmctld does not answer: {ping.first_error_line()}",
                hint="check SLURM_CONF and the controller",
            )
        return base.Prepared(
            workspace=workspace,
            python=self.options.python,
            found={"scontrol_ping": ping.stdout.strip()},
        )

    def start(self, job: base.JobSpec) -> base.StartedRun:
        """The protocol's start: `job` as a group run (start_plan takes a resolved RunPlan)."""
        started = self.start_plan(self._plan_for(job))
        meta = started.run.read_json(META) or {}
        return base.StartedRun(
            run_id=started.run.run_id,
            remote_dir=str(meta.get("remote_run_dir")),
            log_name=started.run.log_path().name,
            attached=started.attached,
        )

    def run_facts(self, run: RunDir) -> dict[str, Any]:
        """The Slurm job id of a started group run (for `proctor run`'s report)."""
        return {"job_id": (run.read_json(META) or {}).get("job_id")}

    def start_server(
        self,
        request: ServerRequest,
        config: ProjectConfig,
        flags: RunFlags,
        launch: base.ServerLaunch,
    ) -> base.ServedRun:
        """SERVE: the server on an allocation (node 0 serves HTTP, the others join per the
        profile's multi-node launch); returns once the head node is known (NotReady, 5, and
        the job cancelled when it pends past `launch.wait_s`)."""
        from proctor.targets.service import guard_start
        from proctor.targets.slurm.serve import start_slurm_server, wait_for_head

        # Ctrl-C/SIGTERM from the submission on cancel the job (no server starts later).
        interrupts = guard_start()
        try:
            started, applied = start_slurm_server(
                request,
                self.options,
                config,
                flags=flags,
                parallel=launch.parallel,
                rpc_port=launch.rpc_port,
            )
            run = started.run
            interrupts.attach(run)
            job = (run.read_json(META) or {}).get("job_id")
            head = wait_for_head(run, launch.wait_s, interrupted=lambda: interrupts.hit)
        finally:
            interrupts.__exit__()
        url = f"http://{head.get('address')}:{request.port}"
        return base.ServedRun(started, applied, {"job_id": job, "head": head, "url": url})

    def inspect_run(
        self, run_dir: Path, timeout_s: float, patterns: tuple[str, ...], pids: tuple[int, ...] = ()
    ) -> list[dict[str, Any]]:
        """INSPECT: stacks of a live group run's processes on every node (slurm/inspect.py)."""
        from proctor.targets.slurm.inspect import inspect_group

        return inspect_group(RunDir(run_dir), timeout_s, patterns, pids)

    def put_file(self, local: Path, remote: str) -> None:
        """FILES: a file onto the workspace the nodes share, through the login host."""
        self.login.put_file(local, remote)

    def read_bytes(self, path: str, offset: int = 0, limit: int = 1 << 20) -> bytes:
        """FILES: bytes of a file there, read back through the login host."""
        return self.login.read_bytes(path, offset, limit)

    def _plan_for(self, job: base.JobSpec) -> RunPlan:
        from proctor.spec.plan import resolve_run_plan

        flags = RunFlags(
            argv=list(job.argv),
            name=job.name,
            key=job.key,
            cwd=job.cwd,
            runs_dir=str(self.runs_dir) if self.runs_dir else None,
            timeout=f"{job.timeout_s}s" if job.timeout_s else None,
            grace=f"{job.grace_s}s" if job.grace_s is not None else None,
            gpu_sample=job.gpu_sample_s,
            env=[f"{k}={v}" for k, v in job.env.items()],
        )
        config = ProjectConfig.model_validate({"run": {"secret_names": job.secret_names}})
        return resolve_run_plan(flags, config)

    def _run(self, run_id: str) -> RunDir:
        from proctor.supervise.launch import resolve_run

        if self.runs_dir is None:
            raise UsageError("this SlurmTarget has no runs_dir", hint="pass runs_dir=")
        return resolve_run(self.runs_dir, run_id)

    def status(self, run_id: str) -> base.RunStatus:
        # The tracker keeps the group's run directory here, as a local run's wrapper does.
        return status_of(self._run(run_id))

    def follow(
        self, run_id: str, out: IO[bytes], *, offset: int = 0, until_done: bool = True
    ) -> base.RunStatus:
        from proctor.supervise.launch import follow_log

        follow_log(self._run(run_id), out, from_start=offset == 0, until_done=until_done)
        return self.status(run_id)

    def stop(self, run_id: str) -> bool:
        return self.stop_run(self._run(run_id))

    def fetch(self, run_id: str, dest: Path) -> base.Fetched:
        """The tracker already fetched and verified every node; copy the group and re-verify."""
        import shutil

        from proctor.record.manifest import verify_run_manifest

        run = self._run(run_id)
        if Path(dest).resolve() != run.path.resolve():
            shutil.copytree(run.path, dest, dirs_exist_ok=True)
        check = verify_run_manifest(RunDir(Path(dest)))
        return base.Fetched(
            local_dir=str(dest),
            files=check.ok,
            manifest_present=check.present,
            changed=check.changed,
            missing=check.missing,
            extra=check.extra,
        )

    def release(self) -> base.Released:
        return base.Released(
            action="none", verified=True, detail="Slurm frees the allocation when the job ends"
        )

    def close(self) -> None:
        """Drop the SSH connection to the login host, if any (never stops a job)."""
        close = getattr(self.login, "close", None)
        if close is not None:
            close()

    # -- start ----------------------------------------------------------------------------
    def start_plan(self, plan: RunPlan, launch: GroupLaunch | None = None) -> Started:
        """Submit the run, or attach to the live run holding the same key."""
        key = plan.key.value
        if not key:
            return self._start(plan, launch or GroupLaunch())
        with key_lock(Path(plan.runs_dir.value), str(key)) as key_file:
            existing = live_keyed_run(key_file)
            if existing is not None:
                return Started(existing, True, plan.redactor())
            started = self._start(plan, launch or GroupLaunch())
            # The key may be a secret (masked); the directory must stay exact for the next attach.
            entry = {
                "key": started.redactor.text(str(key)),
                "run_id": started.run.run_id,
                "dir": str(started.run.path),
            }
            write_atomic(key_file, json.dumps(entry), mask=False)
            return started

    def _start(self, plan: RunPlan, launch: GroupLaunch) -> Started:
        target_info = {
            "kind": "slurm",
            "login": self.options.target.display(),
            "host": self.options.target.host or "local",
        }
        run, redactor = prepare_run(
            plan,
            RunSpec(kind=launch.kind, group=launch.group, target=target_info, extra=launch.extra),
        )
        try:
            workspace = self.login.expand(self.options.workspace)
            layout = RemoteLayout(workspace, run.run_id)
            update_record(
                run,
                gpu={"present": None, "reason": "sampled on each node: see nodes/<node>/"},
                slurm={"requested": self.options.as_dict(), "remote_run_dir": layout.run_dir},
            )
            workdir, source_sync = self.ship_source(plan, layout)
            update_record(
                run, source_sync=source_sync, add_events=[_event("source", source_sync["summary"])]
            )
            multinode = None
            env = {"PROCTOR_WRAPPER_ARGV": json.dumps(plan.argv), **plan.env_values}
            if launch.multinode is not None:
                multinode = {
                    "head": redactor.argv(launch.multinode.head),
                    "worker": redactor.argv(launch.multinode.worker),
                    "env_names": sorted(launch.multinode.env_names),
                }
                env["PROCTOR_MULTINODE_ARGV"] = json.dumps(
                    {"head": launch.multinode.head, "worker": launch.multinode.worker}
                )
            script = self.write_job_files(run, plan, layout, workdir, multinode)
            # Not sbatch's environment: slurmctld saves that on disk (StateSaveLocation). The
            # batch script removes this file when the job ends; the tracker again after.
            # submit() adds the secrets exported on the login host (slurm/jobenv.py).
            self.login.write_text(layout.job_env, json.dumps(env), mode=0o600)
            job_id = self.slurm.submit(layout.script, layout.job_env, plan.secret_names)
        except ProctorError as error:
            update_record(
                run,
                outcome="failed",
                error=redactor.text(error.one_line()),
                add_events=[_event("submit_failed", redactor.text(error.message))],
            )
            # Ended, with the code the user got: not a run of unknown status that still waits.
            Recorder(run, {}).write_exit(int(error.exit_code))
            owner.let_go(run.path)
            raise
        meta = {
            "job_id": job_id,
            "target": self.options.target.display(),
            "login": self.options.ssh,
            "python": self.options.python,
            "remote_run_dir": layout.run_dir,
            "workspace": layout.workspace,
            "workdir": workdir,
            "log": (run.read_json("plan.json") or {}).get("log"),
            "nodes_requested": self.options.nodes,
            "store_path": plan.store_path.value,
            "multinode": multinode is not None,
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

    def ship_source(self, plan: RunPlan, layout: RemoteLayout) -> tuple[str, dict[str, Any]]:
        """Ship the exact source into the shared workspace; returns the job's working dir."""
        from proctor.source import source_identity

        cwd = Path(str(plan.cwd.value))
        ident = source_identity(cwd)
        if not ident.is_git or ident.repo_root is None or ident.source_id is None:
            if not self.local:
                raise UsageError(
                    "a Slurm run over SSH needs a git checkout to ship",
                    hint="run from inside a git repository",
                )
            return str(cwd), {"kind": "in-place", "summary": f"not a git checkout: runs in {cwd}"}
        synced = self.sync_source(ident)
        rel = os.path.relpath(cwd, ident.repo_root)
        workdir = synced.checkout if rel == "." else f"{synced.checkout}/{rel}"
        return workdir, {**synced.to_record(), "kind": synced.action}

    def sync_source(
        self, identity: SourceIdentity, *, existing: str | None = None
    ) -> base.SyncedSource:
        """The exact source at <workspace>/proctor/src/<source-id>/ on the shared filesystem:
        shipped when absent, else inspected and verified (never reset)."""
        from proctor.source import (
            checkout_path,
            ensure_matches,
            inspect_checkout,
            make_source_archive,
            unpack_and_verify,
        )

        if existing is not None or not identity.source_id:
            path = existing or str(identity.path)
            report = inspect_checkout(path, identity if existing is None else None)
            return base.SyncedSource(
                source_id=identity.source_id,
                checkout=path,
                action="existing",
                verified=report.matches,
                summary=report.summary(),
                dirty=report.dirty,
                untracked=report.untracked,
                modified=report.modified,
            )
        if not self.local:
            self.prepare_login()
            return self.login.ssh.sync_source(identity)  # type: ignore[attr-defined, no-any-return]
        workspace = self.login.expand(self.options.workspace)
        checkout = str(checkout_path(workspace, identity.source_id))
        if self.login.exists(checkout):
            report = ensure_matches(inspect_checkout(checkout, identity))
            return base.SyncedSource(
                source_id=identity.source_id,
                checkout=checkout,
                action="reused",
                verified=True,
                summary=report.summary(),
                dirty=identity.dirty,
            )
        with tempfile.TemporaryDirectory(prefix="proctor-src-") as tmp:
            info = make_source_archive(identity, tmp)
            report = unpack_and_verify(info.path, checkout)
        return base.SyncedSource(
            source_id=info.source_id,
            checkout=checkout,
            action="shipped",
            verified=True,
            summary=f"{info.kind}: {report.summary()}",
            dirty=identity.dirty,
            archive_sha256=info.sha256,
        )

    @property
    def local(self) -> bool:
        return self.options.target.local

    def prepare_login(self) -> base.Prepared | None:
        """Over SSH: the far workspace and python found, proctor's package shipped (cached)."""
        if self.local:
            return None
        return self.login.prepare()  # type: ignore[attr-defined, no-any-return]

    def write_job_files(
        self,
        run: RunDir,
        plan: RunPlan,
        layout: RemoteLayout,
        workdir: str,
        multinode: dict[str, Any] | None = None,
    ) -> str:
        group_plan = run.read_json("plan.json") or {}
        # The group's record as the model of its kind; what it states (exclude_unset), by the
        # names on disk (by_alias), values as read (python mode: no JSON re-encoding).
        record = read_view(run.path).model_dump(by_alias=True, exclude_unset=True)
        node_plan = {**group_plan, "cwd": workdir, "store_path": None, "key": None}
        if multinode is not None:
            node_plan["multinode"] = multinode
        node_record: dict[str, Any] = {k: record[k] for k in NODE_RECORD_FIELDS if k in record}
        node_record.update(
            kind="slurm-node",
            group=run.run_id,
            cwd=workdir,
            target={"kind": "slurm-node", "login": self.options.target.display()},
        )
        self.login.write_text(
            f"{layout.run_dir}/node-plan.json", json.dumps(node_plan, indent=2, allow_nan=False)
        )
        self.login.write_text(
            f"{layout.run_dir}/node-record.json", json.dumps(node_record, indent=2, allow_nan=False)
        )
        job_name = f"proctor-{plan.name.value}"[:64]
        prepared = self.prepare_login()
        script = render_script(
            self.options,
            layout,
            job_name,
            workdir,
            python=prepared.python if prepared else None,
            pythonpath=prepared.proctor_path if prepared else None,
            multinode=multinode,
        )
        self.login.write_text(layout.script, script, mode=0o755)
        return script

    # -- stop -----------------------------------------------------------------------------
    @staticmethod
    def stop_run(run: RunDir) -> bool:
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
        Slurm(login_from_meta(meta)).cancel(int(meta["job_id"]))
        return True


def start_tracker(run: RunDir) -> None:
    """Start the detached tracker for a group run and wait until it holds the run."""
    start_detached(
        "proctor.targets.slurm.tracker",
        run,
        what="Slurm job tracker",
        err_name=".tracker.err",
        timeout_s=TRACKER_START_TIMEOUT_S,
    )

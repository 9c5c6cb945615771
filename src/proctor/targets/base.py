"""The target protocol: where a run executes (local, ssh, runpod, slurm) behind one shape.

A controller drives every target through the same steps:

    describe()                -> TargetInfo       what and where (recorded, no secrets)
    prepare()                 -> Prepared         workspace, python, env.sh, setup: paths FOUND
    sync_source(identity)     -> SyncedSource     exact source at <ws>/proctor/src/<source-id>/
    start(job)                -> StartedRun       detached; a live run with job.key is attached to
    status(run_id)            -> RunStatus        running | finished | unknown | starting
    follow(run_id, out, ...)  -> RunStatus        copy the log to `out` (resumes after drops)
    stop(run_id)              -> bool             kill ladder on the far side; idempotent
    fetch(run_id, dest)       -> Fetched          copy artifacts, verify against the far manifest
    release()                 -> Released         give the machine back, final state verified
    close()                                       drop connections (never stops a run)

The protocol is synchronous: an implementation that talks asyncio (asyncssh) runs its own loop.
Every method raises only proctor.errors types (TargetUnavailable for a host that cannot be
reached, SourceMismatch for a wrong checkout, ...). No field of any result holds a credential.

Optional capabilities are declared, never probed: every target has `capabilities`, a frozenset
of the names below, and a target that declares one also implements its small protocol
(`capable(target, SETUP)` returns it typed, or None):

    AGENT     agent(cmd, request) -> dict: proctor's far-side agent (targets/remote/agent.py);
              the server workflow runs through it (serve start, flow, bench, ... with --target)
    SETUP     run_setup(script, checkout) -> str: the project setup script, once per workspace
    WAIT      wait(run_id, timeout) -> RunStatus: waits through connection drops
    BUDGET    limit_reached: str | None: the controller stopped the job (time/cost budget);
              price_per_hr() -> (USD/hr | None, where from): what the run's machines cost
    FAR       runs live far away: the controller fetches them into a local run directory
              (`.remote.json`, then verified artifacts); without it the run directory is local
    PLAN      start_plan(plan) -> supervise.launch.Started: a local run directory from a RunPlan
              (local, slurm: `proctor run` follows it as it follows a local run); without
              AGENT, the commands that act on runs (serve ready|stop, drain, inspect) act on
              these local run directories, and self-contained ones (flow, bench, eval, sweep)
              run as one job whose directory holds their runs (targets/remote/commands.py)
    SERVE     start_server(request, config, flags, launch) -> ServedRun: the target starts an
              inference server itself, as a local run of kind "server" (slurm: node 0 serves,
              the others join per the engine's multi-node launch); `serve start --target`
    INSPECT   inspect_run(run_dir, timeout_s, patterns, pids) -> rows, also the kind's registry
              entry (a run's kind inspects it without options): `proctor inspect` of a run whose
              processes are not on this machine takes the stacks where they are (slurm: on
              every node through srun --overlap, targets/slurm/inspect.py)
    FILES     put_file(local, remote) and read_bytes(path, offset, limit): files onto the
              filesystem the target's runs see, and back (slurm: through the login host, onto
              the workspace the nodes share); a command's --dataset file travels this way
              where there is no AGENT (targets/remote/shipfiles.py)

Stability: other targets (slurm) code against this module. Changes are listed here.
    v1 (initial): the dataclasses and Target below.
    v2: `capabilities` and the capability protocols; SlurmTarget.start follows the protocol.
    v3: BudgetCapable.price_per_hr (cost per million output tokens, results/cost.py).
    v4: SERVE (ServeCapable, ServerLaunch, ServedRun): `serve start --target slurm://...`.
    v5: INSPECT (a kind's `inspect_run`): `proctor inspect` of a Slurm server on its nodes.
    v6: FILES (FilesCapable): dataset files shipped to a Slurm target's workspace.
    v7: RunStatus.exit_reason: "timeout"/"stopped" when proctor decided the run's status.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import (
    IO,
    TYPE_CHECKING,
    Any,
    Final,
    Literal,
    Protocol,
    cast,
    overload,
    runtime_checkable,
)

from proctor.source.identity import SourceIdentity

if TYPE_CHECKING:
    from proctor.record.rundir import RunDir
    from proctor.spec.config import ProjectConfig
    from proctor.spec.plan import RunFlags, RunPlan
    from proctor.spec.server import ServerRequest
    from proctor.supervise.launch import Started

RunStateName = Literal["running", "finished", "unknown", "starting"]
ReleaseAction = Literal["none", "kept", "stopped", "terminated"]


@dataclass(frozen=True)
class TargetInfo:
    """What a target is, for the record. `name` is what the user typed (ssh://user@host:22)."""

    kind: str
    name: str
    host: str | None = None
    details: dict[str, Any] = field(default_factory=dict)

    def to_record(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Prepared:
    """The far side as found: paths that exist, not paths assumed."""

    workspace: str
    python: str
    proctor_path: str | None = None  # PYTHONPATH entry for proctor's own code, if shipped
    env_sh: str | None = None  # sourced in every shell; None when absent
    setup: str = "none"  # none | ran | already-done | failed
    found: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def to_record(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class SyncedSource:
    """Where the exact source now is on the far side, and how it got there."""

    source_id: str | None
    checkout: str
    action: Literal["shipped", "reused", "local", "existing"]
    verified: bool
    summary: str
    dirty: bool = False
    untracked: list[str] = field(default_factory=list)
    modified: list[str] = field(default_factory=list)
    archive_sha256: str | None = None

    def to_record(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class JobSpec:
    """The command to run on a target. `env` values reach the far process only through its
    environment (never a file); names in `secret_names` (and secret-looking names) are masked."""

    argv: list[str]
    name: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    secret_names: list[str] = field(default_factory=list)
    timeout_s: float | None = None
    grace_s: float | None = None
    gpu_sample_s: float | None = None
    key: str | None = None
    cwd: str | None = None  # relative to the synced checkout, or absolute on the far side
    group: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # merged into the far record
    # Run even when the far side's GPU preflight fails (docs/gpu-health.md).
    allow_unhealthy_gpu: bool = False

    def public(self) -> dict[str, Any]:
        """The job without secret values (for local records)."""
        from proctor.redact import Redactor

        redactor = Redactor.from_environment(self.env, self.secret_names, {})
        data = asdict(self)
        data["env"] = redactor.env(self.env)
        data["argv"] = redactor.argv(self.argv)
        return data


@dataclass(frozen=True)
class StartedRun:
    run_id: str
    remote_dir: str
    log_name: str
    attached: bool  # True: a live run with the same key was found and is being followed


@dataclass(frozen=True)
class RunStatus:
    state: RunStateName
    exit_code: int | None = None
    exit_signal: str | None = None
    wrapper_alive: bool = False
    exit_reason: str | None = None  # "timeout" / "stopped": proctor decided the status (v7)
    outcome: str | None = None  # the far record's outcome (ok, failed, timeout, stopped, ...)

    @property
    def done(self) -> bool:
        return self.state in ("finished", "unknown") and not self.wrapper_alive


@dataclass(frozen=True)
class Fetched:
    """Artifacts copied to `local_dir`, checked against the far side's manifest.sha256."""

    local_dir: str
    files: list[str]
    manifest_present: bool
    changed: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    extra: list[str] = field(default_factory=list)

    @property
    def verified(self) -> bool:
        return self.manifest_present and not (self.changed or self.missing or self.extra)

    def to_record(self) -> dict[str, Any]:
        return {**asdict(self), "verified": self.verified}


@dataclass(frozen=True)
class Released:
    """What release did, and whether the final state was verified (by the API, for pods)."""

    action: ReleaseAction
    verified: bool
    detail: str = ""
    states: list[dict[str, Any]] = field(default_factory=list)

    def to_record(self) -> dict[str, Any]:
        return asdict(self)


AGENT: Final = "agent"
SETUP: Final = "setup"
WAIT: Final = "wait"
BUDGET: Final = "budget"
FAR: Final = "far"
PLAN: Final = "plan"
SERVE: Final = "serve"
INSPECT: Final = "inspect"
FILES: Final = "files"


@dataclass(frozen=True)
class ServerLaunch:
    """How a target that starts servers itself (SERVE) lays one out: the engine profile's
    multi-node launch by name (default its first), the head's rendezvous port (default the
    profile's), and how long the allocation may pend before it is given up (NotReady, 5)."""

    parallel: str | None = None
    rpc_port: int | None = None
    wait_s: float = 600.0


@dataclass(frozen=True)
class ServedRun:
    """A server a target started: the local run (kind "server"), the applied profile facts,
    and what the target adds to the report (a Slurm job id, the head node, its URL)."""

    started: Started
    applied: dict[str, Any]
    facts: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class Target(Protocol):
    """Where a run executes; every target implements these steps (see the module docstring)."""

    kind: str
    capabilities: frozenset[str]

    def describe(self) -> TargetInfo: ...

    def prepare(self) -> Prepared: ...

    def sync_source(self, identity: SourceIdentity, *, existing: str | None = None) -> SyncedSource:
        """Ship `identity` into <ws>/proctor/src/<source-id>/ (never resetting what is there),
        or with `existing`, inspect that checkout and report its dirty/untracked state.
        Raises SourceMismatch when what is there is not the source asked for."""
        ...

    def start(self, job: JobSpec) -> StartedRun: ...

    def status(self, run_id: str) -> RunStatus: ...

    def follow(
        self,
        run_id: str,
        out: IO[bytes],
        *,
        offset: int = 0,
        until_done: bool = True,
    ) -> RunStatus: ...

    def stop(self, run_id: str) -> bool: ...

    def fetch(self, run_id: str, dest: Path) -> Fetched: ...

    def release(self) -> Released: ...

    def close(self) -> None: ...


class AgentCapable(Target, Protocol):
    def agent(
        self, command: str, request: dict[str, Any], timeout: float | None = 300.0
    ) -> dict[str, Any]: ...


class SetupCapable(Target, Protocol):
    def run_setup(self, script: str, checkout: str) -> str: ...


class WaitCapable(Target, Protocol):
    """Survives connection drops: waits through them, and counts the reconnections."""

    @property
    def reconnects(self) -> int: ...

    def wait(self, run_id: str, timeout: float | None = None) -> RunStatus: ...


class BudgetCapable(Target, Protocol):
    limit_reached: str | None

    def price_per_hr(self) -> tuple[float | None, str]:
        """USD per hour of the run's machines (None: unknown, never 0) and where it came from."""
        ...


class PlanCapable(Target, Protocol):
    def start_plan(self, plan: RunPlan) -> Started: ...

    def run_facts(self, run: RunDir) -> dict[str, Any]:
        """What the target adds to `proctor run`'s report of a started run (a Slurm job id)."""
        ...


class ServeCapable(Target, Protocol):
    def start_server(
        self, request: ServerRequest, config: ProjectConfig, flags: RunFlags, launch: ServerLaunch
    ) -> ServedRun: ...


class InspectCapable(Target, Protocol):
    def inspect_run(
        self, run_dir: Path, timeout_s: float, patterns: tuple[str, ...], pids: tuple[int, ...] = ()
    ) -> list[dict[str, Any]]: ...


class FilesCapable(Target, Protocol):
    def put_file(self, local: Path, remote: str) -> None: ...

    def read_bytes(self, path: str, offset: int = 0, limit: int = 1 << 20) -> bytes: ...


_CAPS: dict[str, type] = {
    AGENT: AgentCapable,
    SETUP: SetupCapable,
    WAIT: WaitCapable,
    BUDGET: BudgetCapable,
    PLAN: PlanCapable,
    SERVE: ServeCapable,
    INSPECT: InspectCapable,
    FILES: FilesCapable,
}


@overload
def capable(target: Target, name: Literal["agent"]) -> AgentCapable | None: ...
@overload
def capable(target: Target, name: Literal["setup"]) -> SetupCapable | None: ...
@overload
def capable(target: Target, name: Literal["wait"]) -> WaitCapable | None: ...
@overload
def capable(target: Target, name: Literal["budget"]) -> BudgetCapable | None: ...
@overload
def capable(target: Target, name: Literal["plan"]) -> PlanCapable | None: ...
@overload
def capable(target: Target, name: Literal["serve"]) -> ServeCapable | None: ...
@overload
def capable(target: Target, name: Literal["inspect"]) -> InspectCapable | None: ...
@overload
def capable(target: Target, name: Literal["files"]) -> FilesCapable | None: ...
def capable(target: Target, name: str) -> Any:
    """`target` as the protocol of capability `name` when it declares it, else None."""
    if name not in _CAPS:
        raise ValueError(f"unknown capability {name!r}")
    return cast(Any, target) if name in target.capabilities else None


__all__ = [
    "AGENT",
    "BUDGET",
    "FAR",
    "FILES",
    "INSPECT",
    "PLAN",
    "SERVE",
    "SETUP",
    "WAIT",
    "AgentCapable",
    "BudgetCapable",
    "Fetched",
    "FilesCapable",
    "InspectCapable",
    "JobSpec",
    "PlanCapable",
    "Prepared",
    "Released",
    "RunStatus",
    "ServeCapable",
    "ServedRun",
    "ServerLaunch",
    "SetupCapable",
    "StartedRun",
    "SyncedSource",
    "Target",
    "TargetInfo",
    "WaitCapable",
    "capable",
]

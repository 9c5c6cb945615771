"""The built-in target kinds: local, ssh, runpod, slurm — one registry entry each.

Options come from the URL, then the flags given, then proctor.toml (`[remote]` for SSH
settings, `[runpod]`, `[slurm]`). Implementations are imported only when a target is built,
so parsing a URL costs no asyncssh or httpx import.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field

from proctor.errors import UsageError
from proctor.spec.config import ProjectConfig
from proctor.spec.merge import Settings
from proctor.targets.base import (
    AGENT,
    BUDGET,
    FAR,
    FILES,
    INSPECT,
    PLAN,
    SERVE,
    SETUP,
    WAIT,
    Target,
)
from proctor.targets.registry import (
    Acquired,
    TargetContext,
    TargetKind,
    TargetOptions,
    register_target,
)

if TYPE_CHECKING:
    from proctor.targets.ssh import SshOptions, SshTarget

SSH_FLAGS = frozenset(
    {
        "identity_file",
        "known_hosts",
        "insecure_accept_host_key",
        "jump",
        "workspace",
        "remote_python",
    }
)


# -- local --------------------------------------------------------------------------------------
class LocalOptions(TargetOptions):
    kind: Literal["local"] = "local"
    url: str = "local"


def _local_build(options: LocalOptions, ctx: TargetContext) -> Target:
    from proctor.spec.plan import resolve_runs_dir
    from proctor.targets.local import LocalTarget

    runs_dir = ctx.runs_dir or Path(resolve_runs_dir(None, ctx.config).value)
    return LocalTarget(runs_dir, config=ctx.config)


register_target(
    TargetKind(
        kind="local",
        schemes=("local",),
        options=LocalOptions,
        capabilities=frozenset({PLAN}),
        syntax="local",
        parse=lambda url, config, flags: LocalOptions(url=url),
        build=_local_build,
    )
)


# -- ssh ----------------------------------------------------------------------------------------
class SshBase(BaseModel):
    """How to reach an SSH host (keys named by path, never inlined): flags over [remote]."""

    model_config = {"extra": "forbid"}

    host: str = ""
    user: str = "root"
    port: int = 22
    identity_file: str | None = None
    known_hosts: str | None = None
    insecure_accept_host_key: bool = False
    jump: str | None = None
    workspace: str | None = None
    remote_python: str | None = None
    env_sh: str | None = None
    venv_base: str | None = None
    connect_budget_s: float | None = None
    reconnect_s: float | None = None

    def ssh_options(self) -> SshOptions:
        from proctor.targets.ssh import SshOptions

        data = self.model_dump(include=set(SshBase.model_fields), exclude_none=True)
        return SshOptions(**data)


class SshTargetOptions(TargetOptions, SshBase):
    kind: Literal["ssh"] = "ssh"


def ssh_base(config: ProjectConfig, flags: dict[str, Any]) -> dict[str, Any]:
    """SSH settings: a flag given wins over `[remote]` in proctor.toml."""
    remote = config.table("remote")
    settings = Settings(flags=flags, table=remote, environ={})

    def pick(flag: str, key: str) -> Any:
        return settings.value(flag, key=key)

    base: dict[str, Any] = {
        "identity_file": pick("identity_file", "identity_file"),
        "known_hosts": pick("known_hosts", "known_hosts"),
        "insecure_accept_host_key": bool(
            flags.get("insecure_accept_host_key") or remote.get("insecure_accept_host_key")
        ),
        "jump": pick("jump", "jump"),
        "workspace": pick("workspace", "workspace"),
        "remote_python": pick("remote_python", "python"),
        "env_sh": remote.get("env_sh"),
        "venv_base": remote.get("venv_base"),
    }
    for key in ("connect_budget_s", "reconnect_s"):
        if remote.get(key) is not None:
            base[key] = float(remote[key])
    return base


def _ssh_parse(url: str, config: ProjectConfig, flags: dict[str, Any]) -> SshTargetOptions:
    from proctor.targets.ssh import parse_ssh_url

    where = parse_ssh_url(url)
    return SshTargetOptions(
        url=url, host=where.host, user=where.user, port=where.port, **ssh_base(config, flags)
    )


def _ssh_build(options: SshTargetOptions, ctx: TargetContext) -> Target:
    from proctor.targets.ssh import SshTarget

    return SshTarget(options.ssh_options())


def agent_target_from_record(remote: dict[str, Any], make: Any = None) -> SshTarget:
    """An agent target (ssh, or `make(opts, extra)`) rebuilt from a far run's `.remote.json`,
    with what its prepare() found then."""
    from proctor.targets.base import Prepared
    from proctor.targets.ssh import SshOptions, SshTarget

    info = remote["target"]
    details = dict(info.get("details") or {})
    opts = SshOptions.from_record({**details, "host": info["host"]})
    extra = {k: v for k, v in details.items() if k not in SshOptions.__dataclass_fields__}
    target = make(opts, extra) if make is not None else SshTarget(opts, info_extra=extra)
    prepared = Prepared(
        **{k: v for k, v in remote["prepared"].items() if k in Prepared.__dataclass_fields__}
    )
    target.with_prepared(prepared)
    return target


register_target(
    TargetKind(
        kind="ssh",
        schemes=("ssh",),
        options=SshTargetOptions,
        capabilities=frozenset({AGENT, SETUP, WAIT, FAR}),
        syntax="ssh://user@host[:port]",
        overrides=SSH_FLAGS,
        parse=_ssh_parse,
        build=_ssh_build,
        from_record=agent_target_from_record,
    )
)


# -- runpod -------------------------------------------------------------------------------------
RUNPOD_FLAGS = frozenset(
    {
        "reuse_pods",
        "pods",
        "gpu_type",
        "gpu_count",
        "image",
        "max_time",
        "max_cost",
        "keep",
        "terminate",
        "allow_terminate",
        "allow_create_volume",
        "allow_other_volume",
        "allow_gpu_substitution",
        "allow_more_capacity",
        "api_url",
    }
)


class RunpodTargetOptions(TargetOptions):
    """`runpod[:ID[,ID]][?keep&max-cost=N...]` + flags; [runpod] fills the rest at acquire."""

    kind: Literal["runpod"] = "runpod"
    reuse_pods: list[str] = Field(default_factory=list)
    pods: int | None = None
    gpu_type: str | None = None
    gpu_count: int | None = None
    image: str | None = None
    max_time: str | None = None
    max_cost: float | None = None
    keep: bool = False
    terminate: bool = False
    allow_terminate: bool = False
    allow_create_volume: bool = False
    allow_other_volume: bool = False
    allow_gpu_substitution: bool = False
    allow_more_capacity: bool = False
    api_url: str | None = None
    ssh: SshBase = Field(default_factory=SshBase)


def _runpod_parse(url: str, config: ProjectConfig, flags: dict[str, Any]) -> RunpodTargetOptions:
    from proctor.targets.runpod.session import parse_runpod_target

    choice = parse_runpod_target(url)
    own = {k: v for k, v in flags.items() if k in RUNPOD_FLAGS}
    own["reuse_pods"] = [*own.get("reuse_pods", []), *choice.reuse]
    for name in ("keep", "terminate", "allow_terminate"):
        own[name] = bool(own.get(name) or getattr(choice, name))
    own.setdefault("max_time", choice.max_time)
    own.setdefault("max_cost", choice.max_cost)
    if own["keep"] and own["terminate"]:
        raise UsageError("keep and terminate contradict each other", hint="pick one")
    return RunpodTargetOptions(url=url, ssh=SshBase(**ssh_base(config, flags)), **own)


def _runpod_acquire(options: RunpodTargetOptions, ctx: TargetContext, identity: Any) -> Acquired:
    from proctor.targets.runpod.session import acquire_pods

    return acquire_pods(options, ctx, identity)


def _runpod_from_record(remote: dict[str, Any]) -> Target:
    from proctor.targets.runpod.target import RunpodTarget

    return RunpodTarget.from_record(agent_target_from_record(remote), remote)


register_target(
    TargetKind(
        kind="runpod",
        schemes=("runpod",),
        options=RunpodTargetOptions,
        capabilities=frozenset({AGENT, SETUP, WAIT, FAR, BUDGET}),
        syntax="runpod[:POD_ID][?keep&max-cost=N]",
        overrides=SSH_FLAGS | RUNPOD_FLAGS,
        parse=_runpod_parse,
        acquire=_runpod_acquire,
        from_record=_runpod_from_record,
    )
)


# -- slurm --------------------------------------------------------------------------------------
SLURM_FLAGS = frozenset({"nodes", "gpus_per_node", "partition", "time_limit"})


class SlurmTargetOptions(TargetOptions):
    """`slurm://[user@]login-host` (or `slurm` alone: [slurm] target) + flags; [slurm] fills
    the rest when the target is built (its --time may come from the run's --timeout)."""

    kind: Literal["slurm"] = "slurm"
    nodes: int | None = None
    gpus_per_node: int | None = None
    partition: str | None = None
    time_limit: str | None = None
    workspace: str | None = None
    remote_python: str | None = None
    identity_file: str | None = None
    known_hosts: str | None = None
    insecure_accept_host_key: bool = False
    jump: str | None = None

    def flags(self) -> Any:
        from proctor.targets.slurm.options import SlurmFlags

        return SlurmFlags(
            None if self.url == "slurm" else self.url,
            self.nodes,
            self.gpus_per_node,
            self.partition,
            self.time_limit,
            self.workspace,
            self.remote_python,
            self.identity_file,
            self.known_hosts,
            self.insecure_accept_host_key,
            self.jump,
        )


def _slurm_parse(url: str, config: ProjectConfig, flags: dict[str, Any]) -> SlurmTargetOptions:
    if url != "slurm":
        from proctor.targets.slurm.options import parse_target as parse_slurm_url

        parse_slurm_url(url)  # a bad URL is a usage error now, not at build time
    return SlurmTargetOptions(url=url, **flags)


def _slurm_build(options: SlurmTargetOptions, ctx: TargetContext) -> Target:
    from proctor.targets.slurm.options import resolve_slurm_options
    from proctor.targets.slurm.target import SlurmTarget

    flags = options.flags()
    if ctx.one_machine:  # flow, bench, ... on one node, whatever [slurm] nodes says
        flags.nodes = 1
    resolved = resolve_slurm_options(flags, ctx.config, timeout_s=ctx.timeout_s)
    return SlurmTarget(resolved, runs_dir=ctx.runs_dir)


def _slurm_inspect(
    run_dir: Path, timeout_s: float, patterns: tuple[str, ...], pids: tuple[int, ...]
) -> list[dict[str, Any]]:
    from proctor.record.rundir import RunDir
    from proctor.targets.slurm.inspect import inspect_group

    return inspect_group(RunDir(run_dir), timeout_s, patterns, pids)


register_target(
    TargetKind(
        kind="slurm",
        schemes=("slurm",),
        options=SlurmTargetOptions,
        capabilities=frozenset({PLAN, SERVE, INSPECT, FILES}),
        syntax="slurm://[user@]login-host",
        overrides=SLURM_FLAGS | SSH_FLAGS,
        parse=_slurm_parse,
        build=_slurm_build,
        inspect_run=_slurm_inspect,
    )
)


def time_left(acquired: Acquired, *, from_start: bool = False) -> float | None:
    """Seconds until the acquisition's budget ends (at least 1; counted from the budget's
    start with `from_start`), or None without a budget."""
    if acquired.deadline is None:
        return None
    since = acquired.started_at if from_start and acquired.started_at else time.time()
    return max(1.0, acquired.deadline - since)


__all__ = [
    "LocalOptions",
    "RunpodTargetOptions",
    "SlurmTargetOptions",
    "SshBase",
    "SshTargetOptions",
    "agent_target_from_record",
    "ssh_base",
    "time_left",
]

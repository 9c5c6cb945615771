"""What a Slurm run asks for: `slurm://[user@]login-host` plus nodes, GPUs, partition, time.

Flags over the `[slurm]` table of proctor.toml over defaults, each value with its origin:

    [slurm]
    target = "slurm://login.example.org"   # or slurm://local on the login node itself
    nodes = 2
    gpus_per_node = 8
    partition = "gpu"
    time = "2h"                  # proctor duration or Slurm's [D-]HH:MM:SS / minutes
    workspace = "~/proctor-workspace"   # on the shared filesystem
    python = "python3"           # interpreter with proctor installed, on the compute nodes
    sbatch_args = ["--account=proj"]
    # Over SSH (slurm://user@login-host[:port]); key files are named by path, never inlined:
    identity_file = "~/.ssh/id_ed25519"
    known_hosts = "~/.ssh/known_hosts"
    jump = "ssh://user@bastion"
    env_sh = "~/proctor-workspace/env.sh"   # sourced before every Slurm command on the login host
"""

from __future__ import annotations

import dataclasses
import math
import sys
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from proctor.errors import ConfigError, UsageError, invalid
from proctor.spec.config import ProjectConfig
from proctor.spec.durations import parse_duration
from proctor.spec.merge import Settings, config_origin
from proctor.spec.values import Value
from proctor.targets.slurm.scheduler import elapsed_seconds

LOCAL_HOSTS = frozenset({"", "local", "localhost"})
DEFAULT_WORKSPACE = "~/proctor-workspace"


@dataclass(frozen=True)
class SlurmTargetSpec:
    """`slurm://[user@]host[:port]`; host local/localhost/empty means this machine."""

    host: str | None
    user: str | None = None
    port: int | None = None

    @property
    def local(self) -> bool:
        return self.host is None

    def display(self) -> str:
        if self.host is None:
            return "slurm://local"
        user = f"{self.user}@" if self.user else ""
        port = f":{self.port}" if self.port else ""
        return f"slurm://{user}{self.host}{port}"


def parse_target(text: str) -> SlurmTargetSpec:
    parts = urlsplit(text)
    if parts.scheme != "slurm":
        raise UsageError(f"not a Slurm target: {text!r}", hint="write slurm://[user@]login-host")
    if parts.password:
        raise UsageError(
            "a Slurm target must not carry a password", hint="use SSH keys or an agent"
        )
    if parts.path not in ("", "/"):
        raise UsageError(f"unexpected path in Slurm target {text!r}", hint="set [slurm] workspace")
    host = (parts.hostname or "").lower()
    try:
        port = parts.port
    except ValueError:
        raise UsageError(f"invalid port in Slurm target {text!r}") from None
    if host in LOCAL_HOSTS:
        return SlurmTargetSpec(host=None)
    return SlurmTargetSpec(host=host, user=parts.username, port=port)


class SlurmConfig(BaseModel):
    """The `[slurm]` table of proctor.toml."""

    model_config = ConfigDict(extra="forbid")

    target: str | None = None
    nodes: int | None = Field(default=None, ge=1)
    gpus_per_node: int | None = Field(default=None, ge=0)
    partition: str | None = None
    time: str | None = None
    workspace: str | None = None
    python: str | None = None
    sbatch_args: list[str] = Field(default_factory=list)
    identity_file: str | None = None
    known_hosts: str | None = None
    jump: str | None = None
    env_sh: str | None = None


@dataclass
class SlurmFlags:
    target: str | None = None
    nodes: int | None = None
    gpus_per_node: int | None = None
    partition: str | None = None
    time: str | None = None
    workspace: str | None = None
    python: str | None = None
    identity_file: str | None = None
    known_hosts: str | None = None
    insecure_accept_host_key: bool = False
    jump: str | None = None
    env_sh: str | None = None


@dataclass
class SlurmOptions:
    target: SlurmTargetSpec
    nodes: int
    gpus_per_node: int
    partition: str | None
    time_minutes: int | None
    workspace: str
    python: str
    sbatch_args: list[str] = field(default_factory=list)
    origins: dict[str, Value] = field(default_factory=dict)
    #: How to reach an SSH login host (paths to key files, never a key); {} when local.
    ssh: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {k: v.as_dict() for k, v in self.origins.items()}


def slurm_minutes(text: str, option: str = "--time") -> int:
    """Slurm's --time in whole minutes (its smallest unit), rounded up, at least 1."""
    seconds = elapsed_seconds(text) if ":" in text else None
    if seconds is None:
        seconds = int(text) * 60 if text.isdigit() else int(parse_duration(text, option=option))
    if seconds <= 0:
        raise UsageError(f"{option} must be positive", hint="e.g. --time 30m")
    return max(1, math.ceil(seconds / 60))


def load_slurm_config(config: ProjectConfig) -> SlurmConfig:
    try:
        return SlurmConfig.model_validate(config.table("slurm"))
    except ValidationError as error:
        raise invalid(
            error,
            what=str(config.source_path),
            at="slurm",
            hint="fix the [slurm] table",
            cls=ConfigError,
        ) from None


def resolve_slurm_options(
    flags: SlurmFlags, config: ProjectConfig, timeout_s: float | None = None
) -> SlurmOptions:
    table = load_slurm_config(config)
    pick = Settings(
        flags=dataclasses.asdict(flags),
        table=table.model_dump(),
        table_origin=config_origin(config.source_path),
        environ={},
    ).pick

    target = pick("target", None)
    if target.value is None:
        raise UsageError(
            "no Slurm target given", hint="pass --target slurm://login-host or set [slurm] target"
        )
    spec = parse_target(str(target.value))
    time_v = pick("time", None)
    if time_v.value is None and timeout_s:
        time_v = Value(f"{math.ceil(timeout_s)}s", "from --timeout")
    minutes = slurm_minutes(str(time_v.value)) if time_v.value is not None else None
    python_default = sys.executable if spec.local else "python3"
    origins = {
        "target": Value(spec.display(), target.origin),
        "nodes": pick("nodes", 1),
        "gpus_per_node": pick("gpus_per_node", 0),
        "partition": pick("partition", None),
        "time_minutes": Value(minutes, time_v.origin),
        "workspace": pick("workspace", DEFAULT_WORKSPACE),
        "python": pick("python", python_default),
    }
    nodes = int(origins["nodes"].value)
    gpus = int(origins["gpus_per_node"].value)
    if nodes < 1:
        raise UsageError("--nodes must be at least 1")
    if gpus < 0:
        raise UsageError("--gpus-per-node must be 0 or more")
    ssh: dict[str, Any] = {}
    if not spec.local:
        ssh = {
            "host": spec.host,
            "user": spec.user or "root",
            "port": spec.port or 22,
            "identity_file": pick("identity_file", None).value,
            "known_hosts": pick("known_hosts", None).value,
            "insecure_accept_host_key": bool(flags.insecure_accept_host_key),
            "jump": pick("jump", None).value,
            "env_sh": pick("env_sh", None).value,
        }
    return SlurmOptions(
        target=spec,
        nodes=nodes,
        gpus_per_node=gpus,
        partition=origins["partition"].value,
        time_minutes=minutes,
        workspace=str(origins["workspace"].value),
        python=str(origins["python"].value),
        sbatch_args=list(table.sbatch_args),
        origins=origins,
        ssh=ssh,
    )

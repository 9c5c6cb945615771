"""OfflineJob: an engine's offline inference (no server), every setting declared once.

Each field's description is its flag's help (`proctor offline --help`), its `Opt` the flag
(jobs/options.py): the offline command, a flow file's `offline` table and the library take
exactly these settings. What the engine profile makes of them (the command, the patterns its
figures and faults are read with, the disk guard) is `resolved`, filled in by
workloads/offline.py before the run, or where the job runs when nobody did.
"""

from __future__ import annotations

import math
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from proctor.jobs.options import NoOpt, Opt


class OfflinePlan(BaseModel):
    """The job as its engine profile resolved it: what runs and how its output is read."""

    model_config = ConfigDict(extra="forbid")

    engine: str  # the profile's name, for the record
    command: list[str] = Field(min_length=1)
    min_free_disk_gib: float = Field(ge=0.0, allow_inf_nan=False)
    patterns: dict[str, str]  # figure name -> regex with a group around the number
    faults: list[str] = Field(default_factory=list)  # the engine's runtime fault patterns
    entry: Literal["profile", "command"] = "profile"


class OfflineJob(BaseModel):
    """The engine, the model, and the engine's offline entry point (or any command)."""

    model_config = ConfigDict(extra="forbid")

    kind: Annotated[Literal["offline"], NoOpt("the job's kind")] = "offline"
    engine: Annotated[str, Opt("--engine", short="-e")] = Field(
        description="Engine profile: atom, vllm, sglang, transformers or one of yours."
    )
    model: Annotated[str | None, Opt("--model", short="-m")] = Field(
        default=None, description="Model path (required unless --cmd)."
    )
    tp: Annotated[int | None, Opt("--tp")] = Field(
        default=None, ge=1, description="Tensor parallelism."
    )
    cmd: Annotated[bool, Opt("--cmd")] = Field(
        default=False,
        description="The words after -- are the whole command, not extra arguments.",
    )
    args: Annotated[
        list[str], NoOpt("the words after -- (the command's argument; a flow's `args`)")
    ] = Field(default_factory=list)
    python: Annotated[str | None, Opt("--python")] = Field(
        default=None, description="Interpreter that has the engine installed."
    )
    min_free_disk_gib: Annotated[float | None, Opt("--min-free-disk", metavar="GIB")] = Field(
        default=None,
        description="GiB that must be free on the model's and the cache's disks (0 disables; "
        "default: the engine profile's).",
    )
    config: Annotated[str | None, NoOpt("the command's --config (which proctor.toml)")] = None
    resolved: Annotated[
        OfflinePlan | None, NoOpt("the engine profile's reading of the rest (workloads/offline)")
    ] = None

    @field_validator("min_free_disk_gib")
    @classmethod
    def _gib(cls, v: float | None) -> float | None:
        if v is not None and (not math.isfinite(v) or v < 0):  # nan would turn the guard off
            raise ValueError(
                f"--min-free-disk {v:g}: must be a number of GiB >= 0 (0 disables the guard)"
            )
        return v

    @model_validator(mode="after")
    def _command_or_model(self) -> OfflineJob:
        if self.cmd and not self.args:
            raise ValueError(
                "--cmd needs the command after -- (e.g. proctor offline --engine vllm --cmd "
                "-- python run.py)"
            )
        if not self.cmd and not self.model:
            raise ValueError("--model is required (the model path), unless --cmd -- CMD")
        return self

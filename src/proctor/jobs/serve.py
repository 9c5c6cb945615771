"""ServeJob: the inference server to start, declared once: `serve start`, `flow` (and its flow
file's [flow] table) and a server grid's flows take exactly these settings."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from proctor.jobs.options import NoOpt, Opt
from proctor.spec.server import ServerRequest

Addon = tuple[str, dict[str, str | int]]


def parse_addons(values: list[str] | None) -> list[Addon]:
    """`mtp:num_speculative_tokens=3` -> ("mtp", {"num_speculative_tokens": 3})."""
    out: list[Addon] = []
    for text in values or []:
        name, _, rest = text.partition(":")
        params: dict[str, str | int] = {}
        for item in filter(None, rest.split(",")):
            key, sep, value = item.partition("=")
            if not sep:
                raise ValueError(f"add-on {text!r}: write NAME or NAME:key=value,...")
            params[key] = int(value) if value.isdigit() else value
        out.append((name, params))
    return out


class ServeJob(BaseModel):
    """An engine serving a model: the profiles pick the command line (docs/profiles.md)."""

    model_config = ConfigDict(extra="forbid")

    kind: Annotated[Literal["serve"], NoOpt("the job's kind")] = "serve"
    engine: Annotated[str, Opt("--engine", short="-e", optional_flag=True)] = Field(
        description="Engine profile: atom, vllm, sglang, transformers, or one from proctor.toml."
    )
    model: Annotated[str, Opt("--model", short="-m", optional_flag=True)] = Field(
        description="Model: a local path (must exist) or a hub name such as org/model."
    )
    tp: Annotated[int | None, Opt("--tp")] = Field(
        default=None, ge=1, description="Tensor parallelism N (default: the model profile's)."
    )
    port: Annotated[int, Opt("--port", short="-p")] = Field(
        default=8000, ge=1, le=65535, description="PORT the server listens on."
    )
    host: Annotated[str, Opt("--host")] = Field(
        default="127.0.0.1", description="HOST (address) the server listens on."
    )
    model_profile: Annotated[str | None, Opt("--model-profile")] = Field(
        default=None,
        description="Model profile NAME (default: matched from the path, else the engine's "
        "default).",
    )
    addon: Annotated[list[str], Opt("--addon", multiple=True, cli_default=[])] = Field(
        default_factory=list,
        description="Add-on profile, e.g. mtp:num_speculative_tokens=3 (repeatable).",
    )
    mtp: Annotated[int | None, Opt("--mtp")] = Field(
        default=None, ge=1, description="N: shortcut for --addon mtp:num_speculative_tokens=N."
    )
    python: Annotated[str | None, Opt("--python")] = Field(
        default=None,
        description="PATH of the engine environment's interpreter (default: python3 on PATH).",
    )
    served_model_name: Annotated[str | None, Opt("--served-model-name")] = Field(
        default=None, description="NAME the server answers to in requests (default: the model)."
    )
    env: Annotated[list[str], Opt("--env", multiple=True, cli_default=[])] = Field(
        default_factory=list, description="NAME=VALUE for the server (beats profiles)."
    )
    extra: Annotated[list[str], NoOpt("the engine's own arguments, after --")] = Field(
        default_factory=list
    )

    @field_validator("addon")
    @classmethod
    def _addons(cls, v: list[str]) -> list[str]:
        parse_addons(v)  # the error names the add-on and the form
        return v

    def request(self, min_free_disk_gib: float = 1.0) -> ServerRequest:
        """What the server workflow plans and starts (spec/server.py)."""
        addons = parse_addons(self.addon)
        if self.mtp is not None:
            addons.append(("mtp", {"num_speculative_tokens": self.mtp}))
        return ServerRequest(
            engine=self.engine,
            model=self.model,
            port=self.port,
            host=self.host,
            tp=self.tp,
            model_profile=self.model_profile,
            addons=addons,
            extra=list(self.extra),
            python=self.python,
            served_model_name=self.served_model_name,
            min_free_disk_gib=min_free_disk_gib,
        )

"""CommandJob: any command run as a supervised run (`proctor run -- CMD`), its settings declared
once.

Each field's `Opt` is its `proctor run` (and `proctor plan`) flag, its description the flag's
help (jobs/options.py): the typer command's options are generated from these fields
(cli/jobopts.py), and the console script's lean path reads the same flags from the same fields
(cli/entry.py `parse_run`). How the run goes here (--runs-dir, --detach, --json, --dry-run,
--config, --target and the target's own options) is no field: that is run control, as a
`Submission`'s fields are for the other jobs.

The flags a user set are laid over the [run] table of proctor.toml: here with each value's
origin (`run_flags` -> spec/plan.py `resolve_run_plan`), for a far target as a whole job
(`with_defaults`, then targets/remote/commands.py `job_spec`: the JobSpec that travels).
A flow's `cmd` workload is a CommandJob too (jobs/flow.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from proctor.jobs.options import NoOpt, Opt, validated
from proctor.spec.config import RunDefaults
from proctor.spec.durations import parse_duration
from proctor.spec.envnames import NAME_RULE, env_name_problem, env_value_problem
from proctor.spec.plan import RunFlags

TIMEOUT_HELP = (
    "Time limit, e.g. 90s, 15m, 2h: then SIGTERM to the whole tree, --grace, SIGKILL; exit 4."
)
ALLOW_UNHEALTHY_GPU_HELP = (
    "Run even when the GPU preflight fails (another process holds GPU memory, uncorrected ECC"
    " errors, pending page retirement or row remapping, a hardware Xid since boot, clocks held"
    " down for heat, a failed CUDA check); without it such a run is refused with exit 69."
    " docs/gpu-health.md."
)


def _duration(flag: str) -> Opt:
    """A duration's flag: text such as 90s or 15m, kept as the user wrote it (the plan shows
    its origin and parses it; a bad one is exit 64 naming the flag)."""

    def parse(text: Any) -> str:
        parse_duration(str(text), option=flag)  # the UsageError names the flag and the forms
        return str(text)

    return Opt(flag, cli_type=str, parse=parse)


class CommandJob(BaseModel):
    """A command and how it runs: its name, environment, time limit and kill grace, GPU
    sampling, attach key, working directory and GPU preflight."""

    # Built on first validation, not at import: `proctor run` reads only the fields' flags.
    model_config = ConfigDict(extra="forbid", defer_build=True)

    kind: Annotated[Literal["command"], NoOpt("the job's kind")] = "command"
    argv: Annotated[list[str], NoOpt("the command and its arguments, after --")] = Field(
        default_factory=list
    )
    name: Annotated[str | None, Opt("--name", short="-n")] = Field(
        default=None, description="Run name (log file name); default: derived from CMD."
    )
    timeout: Annotated[str | None, _duration("--timeout")] = Field(
        default=None, description=TIMEOUT_HELP
    )
    grace: Annotated[str | None, _duration("--grace")] = Field(
        default=None,
        description="Seconds between SIGTERM and SIGKILL when stopping (default 10s).",
    )
    gpu_sample: Annotated[float | None, Opt("--gpu-sample")] = Field(
        default=None,
        ge=0.0,
        allow_inf_nan=False,
        description="GPU sampling interval in seconds (default 3; 0 disables).",
    )
    env: Annotated[list[str], Opt("--env", short="-e", multiple=True, cli_default=[])] = Field(
        default_factory=list,
        description="NAME=VALUE for the command; secret-named values are masked in every record.",
    )
    key: Annotated[str | None, Opt("--key")] = Field(
        default=None,
        description="While a run with this key is alive, attach to it instead of starting a copy.",
    )
    cwd: Annotated[str | None, Opt("--cwd")] = Field(
        default=None, description="Working directory for the command."
    )
    allow_unhealthy_gpu: Annotated[bool, Opt("--allow-unhealthy-gpu")] = Field(
        default=False, description=ALLOW_UNHEALTHY_GPU_HELP
    )
    secret_names: Annotated[list[str], NoOpt("[run] secret_names in proctor.toml")] = Field(
        default_factory=list
    )

    @field_validator("timeout", "grace")
    @classmethod
    def _is_duration(cls, v: str | None, info: ValidationInfo) -> str | None:
        if v is not None:
            parse_duration(v, option=f"--{info.field_name}")
        return v

    @field_validator("env")
    @classmethod
    def _env(cls, v: list[str]) -> list[str]:
        for item in v:
            name, sep, value = item.partition("=")
            if not sep or env_name_problem(name):
                raise ValueError(f"invalid --env {name!r}: write NAME=VALUE, the name {NAME_RULE}")
            problem = env_value_problem(name, value)
            if problem:
                raise ValueError(f"invalid --env {name!r}: {problem}")
        return v

    @property
    def timeout_s(self) -> float | None:
        return parse_duration(self.timeout, option="--timeout") if self.timeout else None

    @property
    def grace_s(self) -> float | None:
        return parse_duration(self.grace, option="--grace") if self.grace else None

    def env_table(self) -> dict[str, str]:
        """The environment as NAME -> VALUE (a later NAME=... wins)."""
        return dict(item.partition("=")[::2] for item in self.env)

    def with_defaults(self, run: RunDefaults) -> CommandJob:
        """This job (the flags a user set) laid over proctor.toml's [run] table: what a far
        target runs, where no plan with origins is made."""
        env = [f"{k}={v}" for k, v in dict(run.env).items()] + list(self.env)
        values = {
            **self.model_dump(),
            "timeout": self.timeout or run.timeout,
            "grace": self.grace or run.grace,
            "gpu_sample": self.gpu_sample if self.gpu_sample is not None else run.gpu_sample,
            "env": env,
            "allow_unhealthy_gpu": bool(self.allow_unhealthy_gpu or run.allow_unhealthy_gpu),
            "secret_names": [*run.secret_names, *self.secret_names],
        }
        return CommandJob.model_validate(values)


def command_fields(given: Mapping[str, Any]) -> dict[str, Any]:
    """The CommandJob fields among `given` (a command's values by name), None and [] dropped."""
    names = CommandJob.model_fields
    return {k: v for k, v in given.items() if k in names and v is not None and v != []}


def from_flags(flags: RunFlags) -> CommandJob:
    """The CommandJob of a run's flags (what its user set), validated: a bad value is exit 64
    naming it."""
    values = {
        "argv": list(flags.argv),
        "name": flags.name,
        "timeout": flags.timeout,
        "grace": flags.grace,
        "gpu_sample": flags.gpu_sample,
        "env": list(flags.env),
        "key": flags.key,
        "cwd": flags.cwd,
        "allow_unhealthy_gpu": bool(flags.allow_unhealthy_gpu),
    }
    return validated(CommandJob, values, what="invalid option", hint="see proctor run --help")


def run_flags(job: CommandJob, *, runs_dir: str | None = None, detach: bool = False) -> RunFlags:
    """The flags of a local run of `job` (its unset fields are None: the [run] table and the
    defaults fill them, each with its origin, in `resolve_run_plan`)."""
    return RunFlags(
        argv=list(job.argv),
        name=job.name,
        runs_dir=runs_dir,
        timeout=job.timeout,
        grace=job.grace,
        gpu_sample=job.gpu_sample,
        env=list(job.env),
        key=job.key,
        detach=detach,
        cwd=job.cwd,
        allow_unhealthy_gpu=job.allow_unhealthy_gpu or None,
    )


__all__ = ["CommandJob", "command_fields", "from_flags", "run_flags"]

"""FlowJob: a server, the workloads run against it, and the flow's own settings (its ready gate,
drain, inspection and teardown), each declared once.

The `flow` command's options are generated from these fields (cli/jobopts.py), a flow file's
[flow] table validates straight into the job (`flow_job`: the server's keys into its
`ServeJob`, the rest into the flow's fields; an unknown key is exit 64 naming what is allowed),
only the flags a user set are laid over the file, and the flow's record holds the job as JSON
(`job`), which `flow --resume` reads back.

A listed workload (a flow file's `[[flow.workload]]` entry, or `--workload-cmd`) is a
`FlowWorkload` holding its typed job, discriminated by kind: a BenchJob, SweepJob, EvalJob or
OfflineJob from its table, or a CommandJob from a `cmd` line. The table validates into the job
when the flow file is read (a typo is exit 64 before any server starts), the job is pointed at
the flow's server (`fills`: its URL, an eval's served model where the table names none), stored
so in the flow's record, and run as it is (`FlowJob.workload_job`). A record written before the
typed workloads (each its table under `options`) is read back through the same validation.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator

from proctor.errors import UsageError
from proctor.jobs.argv import job_argv
from proctor.jobs.bench import BenchJob
from proctor.jobs.command import CommandJob
from proctor.jobs.eval import EVAL_TASKS, EvalJob
from proctor.jobs.offline import OfflineJob
from proctor.jobs.options import (
    NoOpt,
    Opt,
    fields_from_table,
    lookup,
    option_of,
    validated,
)
from proctor.jobs.options import options as flagged
from proctor.jobs.serve import ServeJob
from proctor.jobs.sweep import SweepJob
from proctor.spec.durations import parse_duration

KINDS = ("bench", "sweep", "eval", "offline", "cmd")
COMMON = ("name", "env")
WorkloadKind = Literal["bench", "sweep", "eval", "offline", "cmd"]
#: Stand-in server facts a workload's table is checked against before its server exists.
STAND_IN = ("http://127.0.0.1:8000", "model")


# -- listed workloads ---------------------------------------------------------------------------
#: A listed workload's job, by its kind: the typed job it runs (a `cmd` line is a CommandJob).
WorkloadJob = BenchJob | SweepJob | EvalJob | OfflineJob | CommandJob
#: The fields of a workload's job that the flow's server gives: its URL, and an eval's served
#: model where the table names none.
ServerFill = Literal["base_url", "model"]


class FlowWorkload(BaseModel):
    """One listed workload: its typed job (discriminated by `kind`), the name and env of its
    run, and which of the job's fields the flow's server fills (`fills`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    job: Annotated[WorkloadJob, Field(discriminator="kind")]
    name: str | None = None
    env: list[str] = Field(default_factory=list)
    fills: list[ServerFill] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _older_record(cls, data: Any) -> Any:
        # A flow recorded before the typed workloads (kind, its table under `options`, a cmd's
        # `command`): read as the flow-file entry it came from; its flow points it at its server.
        if isinstance(data, dict) and "job" not in data and "kind" in data:
            kind = data["kind"]
            body = data.get("command") if kind == "cmd" else data.get("options") or {}
            entry = {kind: body, **{k: data[k] for k in COMMON if data.get(k)}}
            return _entry_values(entry, "workload")
        return data

    @field_validator("env")
    @classmethod
    def _env(cls, v: list[str]) -> list[str]:
        if not all("=" in e for e in v):
            raise ValueError("env must be a list of NAME=VALUE strings")
        return v

    @property
    def kind(self) -> str:
        """The flow file's word for it: bench, sweep, eval, offline or cmd."""
        return "cmd" if isinstance(self.job, CommandJob) else self.job.kind

    @property
    def label(self) -> str:
        if self.name:
            return self.name
        if isinstance(self.job, EvalJob):
            return self.job.task
        return self.kind

    @property
    def run_kind(self) -> str:
        """The kind of its run's record: bench, eval and offline runs are read as such."""
        return {"bench": "bench", "eval": "eval", "offline": "offline"}.get(self.kind, "workload")

    def against(self, base_url: str, model: str, *, runs_dir: str | None = None) -> WorkloadJob:
        """The job run against the server at `base_url` serving `model` (the fields `fills`
        names; a sweep's bench's URL), a sweep's points in `runs_dir`."""
        updates: dict[str, Any] = {}
        if "base_url" in self.fills:
            updates["base_url"] = base_url
        if "model" in self.fills:
            updates["model"] = model
        job = self.job
        if isinstance(job, SweepJob):
            bench = job.bench.updated(**updates) if updates else job.bench
            place = {"runs_dir": runs_dir} if runs_dir is not None else {}
            return job.model_copy(update={"bench": bench, **place})
        if not updates:
            return job
        return type(job).model_validate({**job.model_dump(), **updates})

    def pointed(self, base_url: str, model: str) -> FlowWorkload:
        """This workload with its job pointed at the server at `base_url` serving `model`."""
        job = self.against(base_url, model)
        return self if job is self.job else self.model_copy(update={"job": job})


def command_for(workload: FlowWorkload, base_url: str, model: str, *, runs_dir: str) -> list[str]:
    """The argv of the workload's run against the server at `base_url` serving `model`."""
    job = workload.against(base_url, model, runs_dir=runs_dir)
    return list(job.argv) if isinstance(job, CommandJob) else job_argv(job)


def parse_workload(entry: object, where: str = "workload") -> FlowWorkload:
    """One flow-file entry (a table naming one kind) as a FlowWorkload, its table validated
    into its typed job (against stand-in server facts: the flow points it at its server);
    UsageError if malformed, naming the key or the field."""
    if isinstance(entry, FlowWorkload):
        return entry
    if not isinstance(entry, dict):
        raise UsageError(f"{where}: a table is needed, e.g. {{ bench = {{ concurrency = 8 }} }}")
    if "job" in entry or "kind" in entry:  # the job's own form (a flow record's)
        return validated(FlowWorkload, entry, what=where, hint="docs/workflow.md")
    return FlowWorkload.model_validate(_entry_values(entry, where))


def _entry_values(entry: dict[str, Any], where: str) -> dict[str, Any]:
    """A flow file's entry as FlowWorkload's fields (its typed job made here)."""
    kinds = [k for k in entry if k in KINDS]
    unknown = sorted(set(entry) - set(KINDS) - set(COMMON))
    if unknown or len(kinds) != 1:
        raise UsageError(
            f"{where}: name exactly one of {', '.join(KINDS)}"
            + (f" (unknown keys: {', '.join(unknown)})" if unknown else ""),
            hint="docs/workflow.md#flow-files-with-workloads",
        )
    kind = kinds[0]
    body = entry[kind]
    name = entry.get("name")
    env = _env_list(entry.get("env") or [], where)
    base_url, model = STAND_IN
    if kind == "cmd":
        command = shlex.split(body) if isinstance(body, str) else body
        if (
            not isinstance(command, list)
            or not command
            or not all(isinstance(c, str) for c in command)
        ):
            raise UsageError(f"{where}: cmd must be a command line or a list of words")
        return {"job": CommandJob(argv=list(command)), "name": name, "env": env}
    if kind == "eval" and isinstance(body, str):
        body = {"task": body}
    if not isinstance(body, dict):
        raise UsageError(f"{where}: {kind} takes a table of its options, e.g. {kind} = {{ ... }}")
    job: WorkloadJob
    fills: list[str] = ["base_url"]
    if kind == "bench":
        job = bench_job(body, base_url, model, where="bench workload")
    elif kind == "sweep":
        job = sweep_job(body, base_url, model, runs_dir=None)
    elif kind == "eval":
        job = eval_job(body, base_url, model)
        names = lookup(EvalJob)
        if not any(names.get(str(k)) == "model" for k in body):
            fills.append("model")  # its served model, unless the table names one
    else:
        # `proctor offline`'s --name and --env, given in its table: the run's, as on any entry.
        # Its own engine, run while the flow's server is up (or as the flow's only job);
        # resolved against its engine profile where it runs (jobs/run.py).
        body = dict(body)
        own_name = body.pop("name", None)
        name = name or own_name
        env = [*env, *_env_list(body.pop("env", []), where)]
        job, fills = offline_job(body), []
    return {"job": job, "name": name, "env": env, "fills": fills}


def parse_workloads(entries: object) -> list[FlowWorkload]:
    if entries is None:
        return []
    if isinstance(entries, dict):
        entries = [entries]
    if not isinstance(entries, list):
        raise UsageError("workload must be a list of tables ([[flow.workload]] entries)")
    return [parse_workload(e, f"workload {i + 1}") for i, e in enumerate(entries)]


def _env_list(env: object, where: str) -> list[str]:
    if not isinstance(env, list) or not all(isinstance(e, str) and "=" in e for e in env):
        raise UsageError(f"{where}: env must be a list of NAME=VALUE strings")
    return list(env)


def bench_job(options: Mapping[str, Any], base_url: str, model: str, *, where: str) -> BenchJob:
    """A flow file's bench table (field or flag names) as the bench job against the flow's
    server (its URL; the model the server lists unless the table names one), with progress
    lines every 5 s in the run's log."""
    values: dict[str, Any] = {"log_every_s": 5.0}
    values.update(fields_from_table(BenchJob, options, where=where))
    values.update(base_url=base_url, progress=False)
    return validated(BenchJob, values, what=where, hint="its options are proctor bench's")


def sweep_job(
    options: Mapping[str, Any], base_url: str, model: str, *, runs_dir: str | None
) -> SweepJob:
    """A flow file's sweep table: the sweep's own options (concurrency, request_rate, name,
    slo, ...) and every bench option, for the bench of each point."""
    own = {k for k in lookup(SweepJob) if k != "bench"}
    sweep = fields_from_table(
        SweepJob, {k: v for k, v in options.items() if k in own}, where="sweep"
    )
    bench = bench_job(
        {k: v for k, v in options.items() if k not in own}, base_url, model, where="sweep workload"
    )
    values = {**sweep, "bench": bench, "runs_dir": runs_dir}
    return validated(
        SweepJob, values, what="sweep workload", hint="its options are proctor sweep's"
    )


def eval_job(options: Mapping[str, Any], base_url: str, model: str) -> EvalJob:
    """A flow file's eval table (`task`, then field or flag names) as the eval job against the
    flow's server (its URL; its served model unless the table names one)."""
    table = dict(options)
    task = str(table.pop("task", "gsm8k"))
    if task not in EVAL_TASKS:
        raise UsageError(f"eval task {task!r} is not known", hint='eval = { task = "gsm8k" }')
    values: dict[str, Any] = {"model": model}
    values.update(fields_from_table(EvalJob, table, where="eval workload"))
    values.update(base_url=base_url, task=task)
    return validated(
        EvalJob, values, what="eval workload", hint="its options are proctor eval gsm8k's"
    )


def offline_job(options: Mapping[str, Any]) -> OfflineJob:
    """A flow file's offline table (field or flag names; engine arguments, or with
    `cmd = true` the whole command, in `args`; `config`, a proctor.toml) as the offline job."""
    table = dict(options)
    args = table.pop("args", [])
    if not isinstance(args, list):
        raise UsageError("offline workload: args must be a list of engine arguments")
    config = table.pop("config", None)
    values = fields_from_table(OfflineJob, table, where="offline workload")
    values.update(args=[str(a) for a in args], config=None if config is None else str(config))
    return validated(
        OfflineJob, values, what="offline workload", hint="its options are proctor offline's"
    )


# -- the flow job -------------------------------------------------------------------------------
def _seconds(value: Any) -> Any:
    """A duration field's value: seconds, or text such as 90, 15s, 15m, 1h30m."""
    if isinstance(value, str):
        try:
            return parse_duration(value)
        except UsageError as e:
            raise ValueError(f"{e.message}; write seconds (90) or 500ms, 30s, 15m, 1h30m") from None
    return value


Seconds = Annotated[float, BeforeValidator(_seconds), Field(ge=0.0, allow_inf_nan=False)]


def _duration(flag: str, default: str) -> Opt:
    """A duration's flag: text such as 15m on the command line and in a flow file."""

    def parse(text: Any) -> float:
        return parse_duration(str(text), option=flag) if isinstance(text, str) else float(text)

    return Opt(flag, cli_type=str, parse=parse, cli_default=default)


class FlowJob(BaseModel):
    """The server to start, the workloads to run against it in order, and how the flow waits
    for it (ready gate), watches each workload (drain), inspects a hang and tears down."""

    model_config = ConfigDict(extra="forbid")

    kind: Annotated[Literal["flow"], NoOpt("the job's kind")] = "flow"
    server: Annotated[ServeJob, NoOpt("the server options, every one of them (ServeJob)")]
    workloads: Annotated[
        list[FlowWorkload], NoOpt("--workload-cmd, or a flow file's [[flow.workload]] list")
    ] = Field(default_factory=list)
    runs_dir: Annotated[str | None, NoOpt("the command's --runs-dir")] = None
    ready_timeout: Annotated[Seconds, _duration("--ready-timeout", "15m")] = Field(
        default=900.0, description="Ready gate limit."
    )
    ready_poll: Annotated[Seconds, _duration("--ready-poll", "15s")] = Field(
        default=15.0,
        description="While not ready, a status line this often if nothing changes.",
    )
    max_: Annotated[Seconds, _duration("--max", "30m")] = Field(
        default=1800.0, description="Drain limit."
    )
    poll: Annotated[Seconds, _duration("--poll", "10s")] = Field(
        default=10.0, description="Drain poll."
    )
    stuck_polls: Annotated[int, Opt("--stuck-polls")] = Field(
        default=6, ge=1, description="N polls without progress, work in flight: hang."
    )
    error_streak: Annotated[int, Opt("--error-streak")] = Field(
        default=5, ge=1, description="Error answers in a row that are a fault."
    )
    startup_max: Annotated[Seconds, _duration("--startup-max", "15m")] = Field(
        default=900.0, description="No workload seen within this duration: exit 4."
    )
    client_pattern: Annotated[str | None, Opt("--client-pattern", metavar="REGEX")] = Field(
        default=None,
        description="REGEX: also count foreign client processes whose command line matches.",
    )
    no_inspect: Annotated[bool, Opt("--no-inspect")] = Field(
        default=False, description="Do not take stacks on a hang."
    )
    inspect_timeout: Annotated[Seconds, NoOpt("90 s per tool and process, `inspect`'s default")] = (
        90.0
    )
    gpu_processes: Annotated[bool, Opt("--gpu-processes")] = Field(
        default=False,
        description="At teardown, also SIGKILL GPU processes left on the server's GPUs.",
    )
    vram_timeout: Annotated[Seconds, _duration("--vram-timeout", "60s")] = Field(
        default=60.0,
        description="How long teardown waits for GPU memory to return to its baseline.",
    )
    gpu_sample: Annotated[float | None, Opt("--gpu-sample")] = Field(
        default=None,
        ge=0.0,
        description="SECONDS between GPU samples into gpu.csv (default 3; 0: none).",
    )
    workload_env: Annotated[list[str], Opt("--workload-env", multiple=True, cli_default=[])] = (
        Field(default_factory=list, description="NAME=VALUE for the workload.")
    )
    continue_on_failure: Annotated[bool, Opt("--continue-on-failure")] = Field(
        default=False,
        description="Run later workloads after one fails (the server still up); exit code "
        "stays the first failure's.",
    )

    @field_validator("client_pattern")
    @classmethod
    def _regex(cls, v: str | None) -> str | None:
        if v is not None:
            try:
                re.compile(v)
            except re.error as e:
                raise ValueError(f"--client-pattern is not a regular expression: {e}") from None
        return v

    @field_validator("workload_env")
    @classmethod
    def _env(cls, v: list[str]) -> list[str]:
        bad = [e for e in v if "=" not in e]
        if bad:
            raise ValueError(f"write NAME=VALUE, not {bad[0]!r}")
        return v

    @model_validator(mode="after")
    def _pointed(self) -> FlowJob:
        # Each workload's job as it runs: against this flow's server (what its record shows).
        self.workloads = [w.pointed(self.base_url, self.served_model) for w in self.workloads]
        return self

    @property
    def base_url(self) -> str:
        return f"http://{self.server.host}:{self.server.port}"

    @property
    def served_model(self) -> str:
        return self.server.served_model_name or self.server.model

    def workload_job(self, index: int, *, runs_dir: str) -> WorkloadJob:
        """Workload `index` as the typed job it runs against this flow's server."""
        return self.workloads[index].against(self.base_url, self.served_model, runs_dir=runs_dir)


# -- from a flow file and the command line -------------------------------------------------------
#: A flow file's keys that are no field of the job: its workloads and its grid.
WORKLOAD_KEYS = ("workload", "workload_cmd")
GRID_KEYS = ("sweep", "group")


def flow_job(
    flags: Mapping[str, Any],
    table: Mapping[str, Any],
    source: object = None,
    *,
    need_workload: bool = True,
) -> FlowJob:
    """The flow job a flow file's [flow] table describes, with `flags` (only what the user set
    on the command line: field names, and the server's under `server`, `workload_cmd`,
    `extra`, `runs_dir`) laid over it. The table's keys are the flow's or the server's field
    or flag names (`_` or `-`); an unknown key is a UsageError naming what is allowed."""
    where = f"flow file {source}" if source else "flow"
    file_server: dict[str, Any] = {}
    file_flow: dict[str, Any] = {}
    special: dict[str, Any] = {}
    serve_names = {k: f for k, f in lookup(ServeJob).items() if f not in ("kind", "extra")}
    flow_names = lookup(FlowJob)
    for key, value in table.items():
        norm = key.replace("-", "_")
        if norm in (*WORKLOAD_KEYS, *GRID_KEYS, "extra", "runs_dir"):
            special[norm] = value
        elif key in serve_names:
            file_server[key] = value
        elif key in flow_names and isinstance(
            option_of(FlowJob.model_fields[flow_names[key]]), Opt
        ):
            file_flow[key] = value
        else:
            allowed = sorted(
                {o.name for _, o in flagged(ServeJob).values()}
                | {o.name for _, o in flagged(FlowJob).values()}
                | {"workload", "workload-cmd", "extra", "runs-dir", "sweep", "group"}
            )
            raise UsageError(
                f"{where}: unknown option {key!r}", hint="allowed: " + ", ".join(allowed)
            )
    server_values = fields_from_table(ServeJob, file_server, where=where)
    server_values.update(flags.get("server") or {})
    extra = flags.get("extra") or special.get("extra") or []
    if not server_values.get("engine") or not server_values.get("model"):
        raise UsageError("flow needs --engine and --model (or a flow file with them)")
    server = validated(
        ServeJob,
        {**server_values, "extra": list(extra)},
        what="invalid server option",
        hint="see proctor flow --help (docs/workflow.md)",
    )
    values = fields_from_table(FlowJob, file_flow, where=where)
    values.update({k: v for k, v in flags.items() if k in flagged(FlowJob)})
    command = flags.get("workload_cmd")
    file_command = special.get("workload_cmd")
    listed = parse_workloads(special.get("workload"))
    if command or not listed:
        # --workload-cmd on the command line wins over the file's list.
        command = command or file_command
        listed = []
        if command:
            listed = [parse_workload({"cmd": command}, "--workload-cmd")]
        elif need_workload:
            raise UsageError(
                "flow needs a workload",
                hint='pass --workload-cmd "CMD ARGS", or list [[flow.workload]] in a flow file',
            )
    elif file_command:
        raise UsageError(f"{where}: give workload_cmd or [[flow.workload]], not both")
    runs_dir = flags.get("runs_dir") or special.get("runs_dir")
    return validated(
        FlowJob,
        {**values, "server": server, "workloads": listed, "runs_dir": runs_dir},
        what=f"{where}: invalid option",
        hint="see proctor flow --help (docs/workflow.md)",
    )


__all__ = [
    "KINDS",
    "FlowJob",
    "FlowWorkload",
    "ServerFill",
    "WorkloadJob",
    "bench_job",
    "command_for",
    "eval_job",
    "flow_job",
    "offline_job",
    "parse_workload",
    "parse_workloads",
    "sweep_job",
]

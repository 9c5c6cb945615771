"""FlowJob: a server, the workloads run against it, and the flow's own settings (its ready gate,
drain, inspection and teardown), each declared once.

The `flow` command's options are generated from these fields (cli/jobopts.py), a flow file's
[flow] table validates straight into the job (`flow_job`: the server's keys into its
`ServeJob`, the rest into the flow's fields; an unknown key is exit 64 naming what is allowed),
only the flags a user set are laid over the file, and the flow's record holds the job as JSON
(`job`), which `flow --resume` reads back.

A listed workload (a flow file's `[[flow.workload]]` entry, or `--workload-cmd`) is a
`FlowWorkload`: a `cmd` line, or the table of a bench, sweep, eval or offline job, which
validates into that job (`FlowWorkload.job`) against the flow's server; every table is checked
when the flow job is built, so a typo fails before a server starts.
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
class FlowWorkload(BaseModel):
    """One listed workload: its kind and job table (keys: the job's field or flag names, `_` or
    `-`), or its command (kind `cmd`); the name and env of its run."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: WorkloadKind
    options: dict[str, Any] = Field(default_factory=dict)
    command: list[str] = Field(default_factory=list)  # kind "cmd" only
    name: str | None = None
    env: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _checked(self) -> FlowWorkload:
        # A bad option fails here, with stand-in server facts, before any server starts.
        if self.kind == "cmd" and not self.command:
            raise ValueError("cmd must be a command line or a list of words")
        self.job(*STAND_IN, runs_dir=".")
        return self

    @property
    def label(self) -> str:
        if self.name:
            return self.name
        if self.kind == "eval":
            return str(self.options.get("task", "gsm8k"))
        return self.kind

    @property
    def run_kind(self) -> str:
        """The kind of its run's record: bench, eval and offline runs are read as such."""
        return {"bench": "bench", "eval": "eval", "offline": "offline"}.get(self.kind, "workload")

    def job(
        self, base_url: str, model: str, *, runs_dir: str
    ) -> BenchJob | SweepJob | EvalJob | OfflineJob | None:
        """The typed job this entry runs against the server at `base_url` serving `model`
        (None for a `cmd`); a bad table is a UsageError naming the key or the field."""
        if self.kind == "bench":
            return bench_job(self.options, base_url, model, where="bench workload")
        if self.kind == "eval":
            return eval_job(self.options, base_url, model)
        if self.kind == "sweep":
            return sweep_job(self.options, base_url, model, runs_dir=runs_dir)
        if self.kind == "offline":
            # Its own engine, run while the flow's server is up (or as the flow's only job);
            # resolved against its engine profile where it runs (jobs/run.py).
            return offline_job(self.options)
        return None


def command_for(workload: FlowWorkload, base_url: str, model: str, *, runs_dir: str) -> list[str]:
    """The argv of the workload's run against the server at `base_url` serving `model`."""
    job = workload.job(base_url, model, runs_dir=runs_dir)
    return list(workload.command) if job is None else job_argv(job)


def parse_workload(entry: object, where: str = "workload") -> FlowWorkload:
    """One flow-file entry (a table naming one kind) as a FlowWorkload; UsageError if malformed."""
    if isinstance(entry, FlowWorkload):
        return entry
    if not isinstance(entry, dict):
        raise UsageError(f"{where}: a table is needed, e.g. {{ bench = {{ concurrency = 8 }} }}")
    if "kind" in entry:  # the job's own form (a flow record's), not a flow file's entry
        return validated(FlowWorkload, entry, what=where, hint="docs/workflow.md")
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
    if kind == "cmd":
        command = shlex.split(body) if isinstance(body, str) else body
        if (
            not isinstance(command, list)
            or not command
            or not all(isinstance(c, str) for c in command)
        ):
            raise UsageError(f"{where}: cmd must be a command line or a list of words")
        return FlowWorkload(kind="cmd", command=list(command), name=name, env=list(env))
    if kind == "eval" and isinstance(body, str):
        body = {"task": body}
    if not isinstance(body, dict):
        raise UsageError(f"{where}: {kind} takes a table of its options, e.g. {kind} = {{ ... }}")
    if kind == "offline":
        # `proctor offline`'s --name and --env, given in its table: the run's, as on any entry.
        body = dict(body)
        own_name = body.pop("name", None)
        name = name or own_name
        env = [*env, *_env_list(body.pop("env", []), where)]
    # The job's own UsageError (naming the key) comes out of the check unwrapped.
    return FlowWorkload(kind=kind, options=dict(body), name=name, env=list(env))


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


def sweep_job(options: Mapping[str, Any], base_url: str, model: str, *, runs_dir: str) -> SweepJob:
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

    @property
    def base_url(self) -> str:
        return f"http://{self.server.host}:{self.server.port}"

    @property
    def served_model(self) -> str:
        return self.server.served_model_name or self.server.model

    def workload_job(
        self, index: int, *, runs_dir: str
    ) -> BenchJob | SweepJob | EvalJob | OfflineJob | None:
        """Workload `index` as its typed job against this flow's server (None: a `cmd`)."""
        return self.workloads[index].job(self.base_url, self.served_model, runs_dir=runs_dir)


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
    "bench_job",
    "command_for",
    "eval_job",
    "flow_job",
    "offline_job",
    "parse_workload",
    "parse_workloads",
    "sweep_job",
]

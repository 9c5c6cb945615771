"""The workloads a flow file lists, each turned into the command of its own supervised run.

A flow file's `[[flow.workload]]` entries each name one kind, with its options as a table:

    [[flow.workload]]
    eval = { task = "gsm8k", limit = 50 }                                # an eval job
    [[flow.workload]]
    bench = { isl = 128, osl = 64, concurrency = 8, num_prompts = 64 }   # a bench job
    [[flow.workload]]
    sweep = { concurrency = [1, 4, 16], isl = 128, osl = 64 }            # a sweep job
    [[flow.workload]]
    offline = { engine = "vllm", model = "/models/x", args = ["--enforce-eager"] }  # offline job
    [[flow.workload]]
    cmd = "python my_client.py --port 8000"                              # any command

plus, on any entry, `name` (the run's name) and `env` (["NAME=VALUE"] for that run). A table is
validated into its typed job (jobs/: keys are the job's fields or flags, `_` or `-`) before any
server starts, so a typo costs nothing; its run is `python -m proctor.jobs run JOB`. The base URL
(and the served model, unless the table names one) of the flow's server are filled in.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from typing import Any

from proctor.errors import UsageError
from proctor.jobs.argv import job_argv
from proctor.jobs.bench import BenchJob
from proctor.jobs.eval import EVAL_TASKS, EvalJob
from proctor.jobs.offline import OfflineJob
from proctor.jobs.options import fields_from_table, lookup, validated
from proctor.jobs.sweep import SweepJob
from proctor.targets.remote.shipfiles import Shipped, dataset_value, gsm8k_data_value

KINDS = ("bench", "sweep", "eval", "offline", "cmd")
COMMON = ("name", "env")


@dataclass(frozen=True)
class FlowWorkload:
    """One listed workload: its kind, its options (flag names with `_` or `-`), run name, env."""

    kind: str
    options: dict[str, Any] = field(default_factory=dict)
    command: list[str] = field(default_factory=list)  # kind "cmd" only
    name: str | None = None
    env: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        if self.name:
            return self.name
        if self.kind == "eval":
            return str(self.options.get("task", "gsm8k"))
        if self.kind == "cmd":
            return "cmd"
        return self.kind

    @property
    def run_kind(self) -> str:
        """The kind of its run's record: bench, eval and offline runs are read as such."""
        return {"bench": "bench", "eval": "eval", "offline": "offline"}.get(self.kind, "workload")

    def to_dict(self) -> dict[str, Any]:
        body: Any = self.command if self.kind == "cmd" else dict(self.options)
        entry: dict[str, Any] = {self.kind: body}
        if self.name:
            entry["name"] = self.name
        if self.env:
            entry["env"] = list(self.env)
        return entry


def parse_workload(entry: object, where: str = "workload") -> FlowWorkload:
    """One flow-file entry (a table naming one kind) as a FlowWorkload; UsageError if malformed."""
    if not isinstance(entry, dict):
        raise UsageError(f"{where}: a table is needed, e.g. {{ bench = {{ concurrency = 8 }} }}")
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
    env = entry.get("env") or []
    env = _env_list(env, where)
    if kind == "cmd":
        command = shlex.split(body) if isinstance(body, str) else body
        if (
            not isinstance(command, list)
            or not command
            or not all(isinstance(c, str) for c in command)
        ):
            raise UsageError(f"{where}: cmd must be a command line or a list of words")
        return FlowWorkload("cmd", command=list(command), name=name, env=list(env))
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
    workload = FlowWorkload(kind, options=dict(body), name=name, env=list(env))
    # Checked now, with stand-in server facts: a bad option must fail before a server starts.
    command_for(workload, "http://127.0.0.1:8000", "model", runs_dir=".")
    return workload


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


def command_for(workload: FlowWorkload, base_url: str, model: str, *, runs_dir: str) -> list[str]:
    """The argv of the workload's run against the server at `base_url` serving `model`."""
    if workload.kind == "cmd":
        return list(workload.command)
    if workload.kind == "bench":
        return job_argv(bench_job(workload.options, base_url, model, where="bench workload"))
    if workload.kind == "eval":
        return job_argv(eval_job(workload.options, base_url, model))
    if workload.kind == "sweep":
        return job_argv(sweep_job(workload.options, base_url, model, runs_dir=runs_dir))
    # offline: its own engine, run while the flow's server is up (or as the flow's only job);
    # resolved against its engine profile where it runs (jobs/run.py).
    return job_argv(offline_job(workload.options))


def bench_job(options: dict[str, Any], base_url: str, model: str, *, where: str) -> BenchJob:
    """A flow file's bench table (field or flag names) as the bench job against the flow's
    server (its URL; the model the server lists unless the table names one), with progress
    lines every 5 s in the run's log."""
    values: dict[str, Any] = {"log_every_s": 5.0}
    values.update(fields_from_table(BenchJob, options, where=where))
    values.update(base_url=base_url, progress=False)
    return validated(BenchJob, values, what=where, hint="its options are proctor bench's")


def sweep_job(options: dict[str, Any], base_url: str, model: str, *, runs_dir: str) -> SweepJob:
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


def eval_job(options: dict[str, Any], base_url: str, model: str) -> EvalJob:
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


def offline_job(options: dict[str, Any]) -> OfflineJob:
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


def file_values(kind: str, options: object, where: tuple[str | int, ...]) -> list[Shipped]:
    """The options of a `kind` workload (at `where` in a flow file) that name local files, read
    and hashed, to ship with `flow --target`: bench and sweep `dataset` (a file kind), eval
    `data` (its GSM8K splits). A `cmd` line, an offline `model` and any other path are the far
    side's own (docs/workflow.md)."""
    if not isinstance(options, dict):
        return []
    found: list[Shipped | None] = []
    for key, value in options.items():
        name = str(key).replace("_", "-")
        if kind in ("bench", "sweep") and name == "dataset":
            found.append(dataset_value(value, (*where, key)))
        elif kind == "eval" and name == "data":
            found.append(gsm8k_data_value(value, (*where, key)))
    return [f for f in found if f is not None]


__all__ = [
    "KINDS",
    "FlowWorkload",
    "bench_job",
    "command_for",
    "eval_job",
    "file_values",
    "offline_job",
    "parse_workload",
    "parse_workloads",
    "sweep_job",
]

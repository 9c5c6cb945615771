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
    cmd = "python my_client.py --port 8000"                              # a command job

plus, on any entry, `name` (the run's name) and `env` (["NAME=VALUE"] for that run). Each entry
is a `FlowWorkload` holding its typed job (discriminated by kind: BenchJob, SweepJob, EvalJob,
OfflineJob, or CommandJob for a `cmd`), validated when the flow file is read (jobs/: keys are
the job's fields or flags, `_` or `-`), so a typo costs nothing; the flow's record stores it
typed. The base URL (and the served model, unless the table names one) of the flow's server are
filled in (`FlowWorkload.fills`); its run is started from the job (`command_for`): `python -m
proctor.jobs run JOB`, or a `cmd`'s own command line.
"""

from __future__ import annotations

from proctor.jobs.flow import (
    COMMON,
    KINDS,
    FlowWorkload,
    WorkloadJob,
    bench_job,
    command_for,
    eval_job,
    offline_job,
    parse_workload,
    parse_workloads,
    sweep_job,
)

__all__ = [
    "COMMON",
    "KINDS",
    "FlowWorkload",
    "WorkloadJob",
    "bench_job",
    "command_for",
    "eval_job",
    "offline_job",
    "parse_workload",
    "parse_workloads",
    "sweep_job",
]

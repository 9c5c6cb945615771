"""proctor: run GPU benchmark and LLM-inference workloads so that their results can be trusted.

The public library API. Names are loaded on first use (PEP 562), so `import proctor` stays
cheap and the layers below never import the whole package.

    import proctor
    result = proctor.run(["python", "bench.py"], timeout="10m")
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from proctor.version import __version__

# name -> module that defines it. tests/test_public_api.py checks that this is complete.
_EXPORTS: dict[str, str] = {
    # supervised runs, flows, benches (proctor.api)
    "run": "proctor.api",
    "plan": "proctor.api",
    "start": "proctor.api",
    "wait": "proctor.api",
    "stop": "proctor.api",
    "status": "proctor.api",
    "find": "proctor.api",
    "bench": "proctor.api",
    "run_job": "proctor.api",
    # `run_flow`, not `flow`: importing the submodule proctor.flow would rebind that name
    "run_flow": "proctor.api",
    "RunResult": "proctor.api",
    "FlowResult": "proctor.api",
    # what they take and give
    "RunPlan": "proctor.spec.plan",
    "ProjectConfig": "proctor.spec.config",
    "load_config": "proctor.spec.config",
    "BenchConfig": "proctor.workloads.loadgen.config",
    "BenchJob": "proctor.jobs.bench",
    "CommandJob": "proctor.jobs.command",
    "SweepJob": "proctor.jobs.sweep",
    "load_job": "proctor.jobs.run",
    "Submission": "proctor.jobs.submission",
    "submit": "proctor.jobs.submit",
    "BenchResult": "proctor.workloads.loadgen.runner",
    "FlowJob": "proctor.jobs.flow",
    "flow_job": "proctor.jobs.flow",
    "load_flow_file": "proctor.flow",
    "ServerRequest": "proctor.serve",
    "DrainConfig": "proctor.monitors.drain",
    "RunDir": "proctor.record.rundir",
    # the server workflow
    "start_server": "proctor.serve",
    "stop_server": "proctor.serve",
    # targets, the run service on them, the evidence
    "parse_target": "proctor.targets.registry",
    "register_target": "proctor.targets.registry",
    "target_options": "proctor.targets.registry",
    "SupervisedRun": "proctor.targets.service",
    "Recorder": "proctor.record.recorder",
    "RecordCore": "proctor.record.schema",
    "load_record": "proctor.record.schema",
    "Target": "proctor.targets.base",
    "JobSpec": "proctor.targets.base",
    "LocalTarget": "proctor.targets.local",
    # workloads and monitors behind the other commands
    "drain": "proctor.monitors.drain",
    "drain_for_engine": "proctor.monitors.drain",
    "inspect": "proctor.supervise.inspect",
    "run_sweep": "proctor.workloads.sweep",
    "run_server_sweep": "proctor.server_sweep",
    "ServerGridJob": "proctor.jobs.grid",
    "slo_search": "proctor.workloads.slo",
    "FlowWorkload": "proctor.jobs.flow",
    "Gsm8kConfig": "proctor.workloads.gsm8k",
    "run_gsm8k": "proctor.workloads.gsm8k",
    "OfflineRequest": "proctor.workloads.offline",
    "OfflineJob": "proctor.jobs.offline",
    "EvalJob": "proctor.jobs.eval",
    "ServeJob": "proctor.jobs.serve",
    "start_offline": "proctor.workloads.offline",
    "SshTarget": "proctor.targets.ssh",
    "SlurmTarget": "proctor.targets.slurm.target",
    "RunpodClient": "proctor.targets.runpod.client",
    # results
    "Metric": "proctor.results.model",
    "ParsedResult": "proctor.results.model",
    "parse_path": "proctor.results.parsers",
    "write_report": "proctor.report.build",
    "load_baseline": "proctor.results.baselines",
    "check": "proctor.results.baselines",
    "compare": "proctor.results.baselines",
    # the store and reports
    "Store": "proctor.store.db",
    "build_report": "proctor.report.build",
    # errors and exit codes
    "ProctorError": "proctor.errors",
    "ExitCode": "proctor.errors",
    "exit_code_for": "proctor.errors",
}

__all__ = [
    "BenchConfig",
    "BenchJob",
    "BenchResult",
    "CommandJob",
    "DrainConfig",
    "EvalJob",
    "ExitCode",
    "FlowJob",
    "FlowResult",
    "FlowWorkload",
    "Gsm8kConfig",
    "JobSpec",
    "LocalTarget",
    "Metric",
    "OfflineJob",
    "OfflineRequest",
    "ParsedResult",
    "ProctorError",
    "ProjectConfig",
    "RecordCore",
    "Recorder",
    "RunDir",
    "RunPlan",
    "RunResult",
    "RunpodClient",
    "ServeJob",
    "ServerGridJob",
    "ServerRequest",
    "SlurmTarget",
    "SshTarget",
    "Store",
    "Submission",
    "SupervisedRun",
    "SweepJob",
    "Target",
    "__version__",
    "bench",
    "build_report",
    "check",
    "compare",
    "drain",
    "drain_for_engine",
    "exit_code_for",
    "find",
    "flow_job",
    "inspect",
    "load_baseline",
    "load_config",
    "load_flow_file",
    "load_job",
    "load_record",
    "parse_path",
    "parse_target",
    "plan",
    "register_target",
    "run",
    "run_flow",
    "run_gsm8k",
    "run_job",
    "run_server_sweep",
    "run_sweep",
    "slo_search",
    "start",
    "start_offline",
    "start_server",
    "status",
    "stop",
    "stop_server",
    "submit",
    "target_options",
    "wait",
    "write_report",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'proctor' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


if TYPE_CHECKING:
    from proctor.api import (
        FlowResult,
        RunResult,
        bench,
        find,
        plan,
        run,
        run_flow,
        run_job,
        start,
        status,
        stop,
        wait,
    )
    from proctor.errors import ExitCode, ProctorError, exit_code_for
    from proctor.flow import load_flow_file
    from proctor.jobs.bench import BenchJob
    from proctor.jobs.command import CommandJob
    from proctor.jobs.eval import EvalJob
    from proctor.jobs.flow import FlowJob, FlowWorkload, flow_job
    from proctor.jobs.grid import ServerGridJob
    from proctor.jobs.offline import OfflineJob
    from proctor.jobs.run import load_job
    from proctor.jobs.serve import ServeJob
    from proctor.jobs.submission import Submission
    from proctor.jobs.submit import submit
    from proctor.jobs.sweep import SweepJob
    from proctor.monitors.drain import DrainConfig, drain, drain_for_engine
    from proctor.record.recorder import Recorder
    from proctor.record.rundir import RunDir
    from proctor.record.schema import RecordCore, load_record
    from proctor.report.build import build_report, write_report
    from proctor.results.baselines import check, compare, load_baseline
    from proctor.results.model import Metric, ParsedResult
    from proctor.results.parsers import parse_path
    from proctor.serve import ServerRequest, start_server, stop_server
    from proctor.server_sweep import run_server_sweep
    from proctor.spec.config import ProjectConfig, load_config
    from proctor.spec.plan import RunPlan
    from proctor.store.db import Store
    from proctor.supervise.inspect import inspect
    from proctor.targets.base import JobSpec, Target
    from proctor.targets.local import LocalTarget
    from proctor.targets.registry import parse_target, register_target, target_options
    from proctor.targets.runpod.client import RunpodClient
    from proctor.targets.service import SupervisedRun
    from proctor.targets.slurm.target import SlurmTarget
    from proctor.targets.ssh import SshTarget
    from proctor.workloads.gsm8k import Gsm8kConfig, run_gsm8k
    from proctor.workloads.loadgen.config import BenchConfig
    from proctor.workloads.loadgen.runner import BenchResult
    from proctor.workloads.offline import OfflineRequest, start_offline
    from proctor.workloads.slo import slo_search
    from proctor.workloads.sweep import run_sweep

"""An inference server on a Slurm allocation: the engine spans N nodes per its profile's
`multinode` launch (e.g. TP within a node, DP or PP across nodes), node 0 serves HTTP.

    started, applied = start_slurm_server(request, options, config, parallel="dp")
    wait_for_head(started.run, timeout_s=600)    # -> {"node": "n1", "address": "10.0.0.5"}

The result is a group run of kind "server" with the usual `server` record section; once the
tracker has seen the head node, `server.host` is its address. So `proctor serve ready RUN`,
`proctor drain RUN` and `proctor serve stop RUN` work on it unchanged: ready probes the
head, drain reads the group log (every node's lines) and the head's /metrics, and stop sends
the tracker SIGTERM, which scancels the job and records every node's verified exit.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from proctor.errors import Interrupted, NotReady, UsageError, WorkloadFailed
from proctor.record.rundir import RunDir
from proctor.record.schema import read_view
from proctor.record.status import run_state
from proctor.spec.config import ProjectConfig
from proctor.spec.plan import RunFlags
from proctor.spec.profiles.models import EngineProfile, MultiNodeLaunch
from proctor.spec.server import (
    ServerRequest,
    applied_facts,
    profiles_for,
    server_command,
    server_name,
    server_plan,
)
from proctor.supervise.launch import Started, request_stop, wait_run
from proctor.targets.slurm.node import fill
from proctor.targets.slurm.options import SlurmOptions
from proctor.targets.slurm.target import GroupLaunch, MultiNodeArgv, SlurmTarget

#: The engine listens on every interface of its node; probes go to the head's address.
LISTEN_ALL = "0.0.0.0"


def pick_launch(engine: EngineProfile, parallel: str | None, nodes: int) -> MultiNodeLaunch:
    """The profile's multi-node launch by name (default: its first); one node needs none."""
    if nodes == 1 and parallel is None:
        return MultiNodeLaunch(description="one node")
    if not engine.multinode:
        raise UsageError(
            f"engine {engine.name!r} has no multi-node launch in its profile",
            hint=f"use --nodes 1, or add [engines.{engine.name}.multinode.NAME] to proctor.toml",
        )
    name = parallel or next(iter(engine.multinode))
    if name not in engine.multinode:
        raise UsageError(
            f"engine {engine.name!r} has no multi-node launch {name!r}",
            hint=f"--parallel one of: {', '.join(engine.multinode)}",
        )
    return engine.multinode[name]


def start_slurm_server(
    request: ServerRequest,
    options: SlurmOptions,
    config: ProjectConfig,
    *,
    flags: RunFlags | None = None,
    parallel: str | None = None,
    rpc_port: int | None = None,
    group: str | None = None,
) -> tuple[Started, dict[str, Any]]:
    """Submit the server: node 0 runs the engine with the launch's head args, every other
    node with its worker args. Returns at once (the job may still be pending)."""
    profiles = profiles_for(config)
    engine = profiles.engine(request.engine)
    launch = pick_launch(engine, parallel, options.nodes)
    nodes, tp = options.nodes, request.tp or 1
    world = tp * nodes
    built = replace(request, host=LISTEN_ALL, tp=request.tp if launch.tp_per_node else world)
    engine, model_profile, argv, env, chat = server_command(built, profiles)
    values = {
        "nodes": str(nodes),
        "rpc_port": str(rpc_port or launch.rpc_port),
        "port": str(request.port),
        "tp": str(tp),
        "world_size": str(world),
        "gpus_per_node": str(options.gpus_per_node),
    }
    head = fill(argv + launch.head_args, values)
    worker = fill(argv + launch.worker_args, values)
    launch_env = {k: fill([v], values)[0] for k, v in launch.env.items()}
    env = {**env, **launch_env}
    plan = server_plan(
        flags or RunFlags(argv=[]),
        config,
        argv=head,
        name=f"{server_name(request)}-slurm{nodes}",
        env=env,
        origin=f"profile:{engine.name}/{model_profile}",
    )
    redactor = plan.redactor()
    name = parallel or (next(iter(engine.multinode)) if nodes > 1 else None)
    applied = {
        **applied_facts(
            request,
            redactor,
            engine=engine.name,
            model_profile=model_profile,
            argv=head,
            plan=plan,
            chat=chat,
        ),
        "host": None,  # the head node's address, once the tracker has seen it
        "listen": LISTEN_ALL,
        "preflight": {"skipped": "port and GPU checks happen on the allocated nodes"},
        "multinode": {
            "parallel": name,
            "description": launch.description,
            "nodes": nodes,
            "tp_per_node": tp if launch.tp_per_node else None,
            "world_size": world,
            "rpc_port": int(values["rpc_port"]),
            "head_argv": redactor.argv(head),
            "worker_argv": redactor.argv(worker),
        },
    }
    target = SlurmTarget(options)
    try:
        started = target.start_plan(
            plan,
            GroupLaunch(
                kind="server",
                group=group,
                extra={"server": applied},
                multinode=MultiNodeArgv(head, worker, frozenset(launch_env)),
            ),
        )
    finally:
        target.close()
    return started, applied


def wait_for_head(
    run: RunDir,
    timeout_s: float,
    poll_s: float = 0.2,
    interrupted: Callable[[], bool] = lambda: False,
) -> dict[str, Any]:
    """Block until the allocation runs and the tracker recorded the head node; on timeout the
    job is cancelled (nothing is left pending) and NotReady (5) raised; once `interrupted()`
    (Ctrl-C), it is cancelled too and Interrupted (130) raised: a pending job left behind
    would start a server later that nobody waits for."""
    deadline = time.monotonic() + timeout_s
    while True:
        record = read_view(run.path)
        slurm = record.fact("slurm") or {}
        head = slurm.get("head")
        if interrupted():
            job = slurm.get("job_id")
            request_stop(run)
            wait_run(run, 60)
            raise Interrupted(
                f"server run {run.run_id} stopped on interrupt (Slurm job {job} cancelled)"
            )
        if head:
            return dict(head)
        if run_state(run).state not in ("running", "starting"):
            raise WorkloadFailed(
                f"server run {run.run_id} ended before its head node started: "
                f"{record.fact('reason') or record.error or record.outcome}",
                hint=f"see {run.log_path()}",
            )
        if time.monotonic() >= deadline:
            job = slurm.get("job_id")
            request_stop(run)
            wait_run(run, 60)
            raise NotReady(
                f"Slurm job {job} did not start in {timeout_s:.0f}s; it was cancelled",
                hint="see `squeue` for the reason; raise --wait or ask for fewer nodes",
            )
        time.sleep(poll_s)

"""`proctor inspect RUN` for a Slurm group run: the stacks are taken where the processes are.

    rows = inspect_group(run, timeout_s=90, patterns=engine.worker_patterns)

The engine of a Slurm server runs on the nodes, so the controller starts one overlapping step
in the live job, a task on every node of it (`srun --jobid J --overlap`), running
`proctor.targets.slurm.nodeinspect`: each task inspects its node's run as a local inspect does
and leaves its answer on the shared filesystem (`<remote run>/inspect/<stamp>/<node>.json`).
Every node is inspected, not the head only: in a multi-node hang the node that stopped is often
a worker, and the stack that matters is the one the others wait for. Each node's tool output
lands in the local group run as `inspect/<node>/PID-TOOL.txt`; each row is a local inspect's
row plus `node`. A node that gave no answer gets one row saying why (`pid` None).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from proctor.errors import TargetUnavailable, UsageError
from proctor.record.rundir import RunDir
from proctor.targets.slurm.login import LoginHost
from proctor.targets.slurm.nodeinspect import PIDS_FLAG
from proctor.targets.slurm.scheduler import Slurm
from proctor.targets.slurm.target import META, login_from_meta

#: An answer holds each tool's text (bounded on the node); read it whole.
MAX_ANSWER = 256 << 20
#: Bound on the whole step: every tool on every process of a node under its own timeout.
STEP_TOOLS_BOUND = 40


def _python(login: LoginHost, meta: dict[str, Any]) -> tuple[str, dict[str, str] | None]:
    """The nodes' python and, over SSH, the PYTHONPATH of proctor's shipped package (as the
    batch script has them; a local login passes its own environment on, as sbatch did)."""
    if login.name == "local":
        return str(meta.get("python") or "python3"), None
    prepared = login.prepare()  # type: ignore[attr-defined]
    env = {"PYTHONPATH": prepared.proctor_path} if prepared.proctor_path else None
    return str(prepared.python), env


def _failed_row(node: str, error: str) -> dict[str, Any]:
    return {
        "node": node,
        "pid": None,
        "tool": None,
        "path": None,
        "returncode": None,
        "timed_out": False,
        "duration_s": 0.0,
        "error": error,
    }


def inspect_group(
    run: RunDir, timeout_s: float = 90.0, patterns: Sequence[str] = (), pids: Sequence[int] = ()
) -> list[dict[str, Any]]:
    """Stacks of the live job's processes on every node (module docstring); with `pids`,
    of those only, on each node where such a pid is a process of the run (its engine or a
    descendant: a bare pid names no node, and may be another user's process elsewhere).
    UsageError (64) when the job is not running or no node has a live process of the run
    (or none of `pids`); TargetUnavailable (69) when no node could be inspected (srun
    refused, no tool on the nodes)."""
    meta = run.read_json(META) or {}
    if not meta.get("job_id") or not meta.get("remote_run_dir"):
        raise UsageError(
            f"run {run.run_id} has no Slurm job to inspect",
            hint="inspect a run started with --target slurm://...",
        )
    job = int(meta["job_id"])
    login = login_from_meta(meta)
    try:
        slurm = Slurm(login)
        entry = slurm.queue(job)
        if entry is None or entry.state != "RUNNING":
            state = entry.state if entry else "gone from the queue"
            raise UsageError(
                f"Slurm job {job} of run {run.run_id} is not running ({state}): "
                "no process to inspect",
                hint="inspect a live server",
            )
        nodes = slurm.hostnames(entry.nodes)
        remote = str(meta["remote_run_dir"])
        out = f"{remote}/inspect/{time.strftime('%Y%m%dT%H%M%S')}-{time.monotonic_ns() % 10**6}"
        python, env = _python(login, meta)
        argv = [
            "srun",
            "--jobid",
            str(job),
            "--overlap",
            f"--nodes={len(nodes)}",
            "--ntasks-per-node=1",
            f"--nodelist={entry.nodes}",
            "--job-name=proctor-inspect",
            python,
            "-m",
            "proctor.targets.slurm.nodeinspect",
            remote,
            out,
            str(timeout_s),
            *([PIDS_FLAG, ",".join(map(str, pids))] if pids else []),
            *patterns,
        ]
        step = login.run(argv, env=env, timeout=timeout_s * STEP_TOOLS_BOUND + 120)
        answers = {n: login.read_bytes(f"{out}/{n}.json", limit=MAX_ANSWER) for n in nodes}
    finally:
        close = getattr(login, "close", None)
        if close is not None:
            close()
    rows: list[dict[str, Any]] = []
    exits: list[int] = []
    for node in nodes:
        try:
            answer = json.loads(answers[node]) if answers[node] else None
        except ValueError:
            answer = None
        if not isinstance(answer, dict):
            why = f"no answer from node {node}"
            if step.returncode != 0:
                said = " | ".join(ln.strip() for ln in step.stderr.splitlines() if ln.strip())
                why += f" (srun exit {step.returncode}: {said[-600:] or 'no message'})"
            rows.append(_failed_row(node, why))
            exits.append(int(TargetUnavailable.exit_code))
            continue
        rows.extend(_write_node(run.path / "inspect" / node, node, answer))
        exits.append(int(answer.get("exit") or 0))
    if 0 not in exits:
        errors = "; ".join(f"{r['node']}: {r['error']}" for r in rows if r["pid"] is None)
        if all(code == int(UsageError.exit_code) for code in exits):
            what = f"no pid of {', '.join(map(str, pids))}" if pids else "no live process"
            raise UsageError(
                f"server run {run.run_id}: {what} to inspect on its nodes ({errors})",
                hint="give pids of the run's processes (see `proctor inspect RUN --json`)"
                if pids
                else "inspect a live server",
            )
        raise TargetUnavailable(
            f"could not inspect run {run.run_id} on its nodes: {errors}",
            hint="the nodes need py-spy or gdb, and srun must reach the job (--overlap)",
        )
    return rows


def _write_node(local: Path, node: str, answer: dict[str, Any]) -> list[dict[str, Any]]:
    """One node's answer as a local inspect leaves it: the files, the rows naming them."""
    if answer.get("error"):
        return [_failed_row(node, str(answer["error"]))]
    local.mkdir(parents=True, exist_ok=True)
    files = answer.get("files") or {}
    rows = []
    for row in answer.get("rows") or []:
        name = Path(str(row.get("path"))).name
        path = local / name
        path.write_text(str(files.get(name, "")), encoding="utf-8")
        rows.append({"node": node, **row, "path": str(path)})
    return rows


__all__ = ["inspect_group"]

"""One node's share of a Slurm run: `python -m proctor.targets.slurm.node REMOTE_RUN_DIR`.

`srun` starts this once per node. It makes `nodes/<SLURMD_NODENAME>/` a full run directory
from the templates the controller left (node-plan.json, node-record.json), runs the same
supervising wrapper as a local run in-process (so Slurm's signals reach the wrapper itself),
and exits with the command's status, so Slurm's step exit code is the command's.

Like the wrapper, it imports no pydantic, rich or typer.
"""

from __future__ import annotations

import json
import os
import socket
import sys
from pathlib import Path
from typing import Any

from proctor.errors import UsageError
from proctor.record.recorder import Recorder
from proctor.record.rundir import RunDir
from proctor.supervise import wrapper
from proctor.targets.slurm.jobenv import JOB_ENV

#: Exit status when the wrapper left no exit_code: the result is unknown (proctor's code 6).
UNKNOWN_STATUS = 6
_GPU_DEVICES = ("/dev/nvidia0", "/dev/kfd")


def node_name() -> str:
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname()


def _slurm_env() -> dict[str, Any]:
    keys = (
        "SLURM_JOB_ID",
        "SLURM_STEP_ID",
        "SLURM_PROCID",
        "SLURM_NODEID",
        "SLURM_JOB_NODELIST",
        "SLURM_JOB_GPUS",
        "CUDA_VISIBLE_DEVICES",
        "ROCR_VISIBLE_DEVICES",
    )
    return {k.lower(): os.environ[k] for k in keys if k in os.environ}


def _gpu(plan: dict[str, Any]) -> dict[str, Any]:
    if not float(plan.get("gpu_sample_s") or 0) or not any(map(os.path.exists, _GPU_DEVICES)):
        return {"present": False, "reason": "no GPU device on this node or sampling off"}
    try:
        from proctor.monitors.gpu import inventory

        inv = inventory()
        raw = inv.model_dump() if hasattr(inv, "model_dump") else dict(inv.__dict__)
        text = json.dumps(raw, default=lambda o: getattr(o, "__dict__", str(o)))
        data: dict[str, Any] = json.loads(text)
        data.setdefault("present", bool(data.get("gpus")))
        return data
    except Exception as error:  # a broken driver must not stop the run
        return {"present": False, "reason": f"GPU inventory failed: {error}"}


def fill(args: list[str], values: dict[str, str]) -> list[str]:
    """Replace `{name}` placeholders by value; other braces are left alone."""
    out = []
    for arg in args:
        for key, value in values.items():
            arg = arg.replace("{" + key + "}", value)
        out.append(arg)
    return out


def apply_role(plan: dict[str, Any]) -> dict[str, Any] | None:
    """A multi-node server launch: this node's argv (head = node 0, else worker), with the
    node's rank and the head's address filled in. The unmasked argv comes through the
    environment (PROCTOR_MULTINODE_ARGV), the displayed one from the plan."""
    multi = plan.get("multinode")
    if not multi:
        return None
    rank = int(os.environ.get("SLURM_NODEID") or 0)
    role = "head" if rank == 0 else "worker"
    values = {
        "node_rank": str(rank),
        "head_address": os.environ.get("PROCTOR_HEAD_ADDR", ""),
        "head_node": os.environ.get("PROCTOR_HEAD_NODE", ""),
    }
    raw = os.environ.pop("PROCTOR_MULTINODE_ARGV", None)
    real = json.loads(raw)[role] if raw else multi[role]
    os.environ["PROCTOR_WRAPPER_ARGV"] = json.dumps(fill(list(real), values))
    for name in multi.get("env_names") or []:
        if name in os.environ:
            os.environ[name] = fill([os.environ[name]], values)[0]
    plan["argv"] = fill(list(multi[role]), values)
    return {**values, "role": role, "node_rank": rank}


def prepare_node_dir(run_dir: Path, node: str) -> RunDir:
    for name in ("node-plan.json", "node-record.json"):
        if not (run_dir / name).is_file():
            raise UsageError(
                f"no {name} in {run_dir}", hint="give the run directory the submit step made"
            )
    plan = json.loads((run_dir / "node-plan.json").read_text(encoding="utf-8"))
    base = json.loads((run_dir / "node-record.json").read_text(encoding="utf-8"))
    path = run_dir / "nodes" / node
    recorder = Recorder.at(path)
    run = recorder.run
    if run.exit_code_path.exists():
        raise UsageError(f"{path} already holds a finished run", hint="submit a new run")
    gpu = _gpu(plan)
    plan["gpu_present"] = bool(gpu.get("present"))
    role = apply_role(plan)
    run.write_json("plan.json", plan)
    from proctor.record.hostinfo import host_info

    slurm = _slurm_env()
    record = {
        **base,
        "run_id": f"{base['group']}.{node}",
        "target": {**base.get("target", {}), "node": node, **slurm},
        "host": host_info(),
        "gpu": gpu,
    }
    if role is not None:
        record["argv"] = plan["argv"]
        record["multinode"] = role
    recorder.start(record)
    (path / str(plan["log"])).touch()
    return run


def load_job_env() -> None:
    """The job's environment from the 0600 file the submit step wrote (its path in
    PROCTOR_JOB_ENV): the unmasked argv and --env values never go through sbatch's saved
    environment. Read, not removed: every node reads it; the batch script removes it."""
    path = os.environ.pop(JOB_ENV, None)
    if not path:
        return
    try:
        values = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise UsageError(
            f"cannot read the job's environment {path}: {error}",
            hint="its file is gone, or another proctor submitted the job",
        ) from None
    os.environ.update({str(k): str(v) for k, v in values.items()})


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        sys.stderr.write("usage: python -m proctor.targets.slurm.node REMOTE_RUN_DIR\n")
        return 64
    load_job_env()
    node = node_name()
    run = prepare_node_dir(Path(args[0]), node)
    # As the local launcher does: the command knows its run directory (a far workflow step
    # keeps its steps there; bench writes its metrics there).
    os.environ["PROCTOR_RUN_DIR"] = str(run.path)
    os.environ["PROCTOR_RUN_ID"] = str((run.read_json("record.json") or {}).get("run_id"))
    wrapper.main([str(run.path)])
    status = run.exit_code_path.read_text().split() if run.exit_code_path.exists() else []
    if not status:
        sys.stderr.write(f"proctor node {node}: no exit status recorded in {run.path}\n")
        return UNKNOWN_STATUS
    return int(status[0]) & 0xFF


if __name__ == "__main__":
    from proctor.crash import guarded

    sys.exit(guarded("proctor node", main))

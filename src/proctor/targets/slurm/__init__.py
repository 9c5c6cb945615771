"""proctor.targets.slurm: multi-node runs through Slurm (sbatch + srun of the wrapper per node).

options.py    slurm://[user@]host, --nodes/--gpus-per-node/--partition/--time, [slurm] config
login.py      LoginHost protocol; LocalLogin (proctor on the login node)
jobenv.py     secrets of the environment sbatch runs in, moved into the job's 0600 env file
scheduler.py  Slurm: sbatch, squeue, scontrol, sacct (else scontrol + jobcomp), scancel
script.py     the batch script and the remote layout
target.py     SlurmTarget: sync source, submit, start the tracker, stop
tracker.py    detached tracker: follow, scancel on stop, fetch + verify nodes, decide outcome
node.py       per-node entry under srun (runs the supervising wrapper in-process)
outcome.py    one outcome from Slurm's state and every node's evidence

The facade is lazy: `node.py` runs on every compute node and must not pay for pydantic.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "SlurmTarget": "target",
    "start_tracker": "target",
    "login_for": "target",
    "SlurmOptions": "options",
    "SlurmFlags": "options",
    "SlurmTargetSpec": "options",
    "parse_target": "options",
    "resolve_slurm_options": "options",
    "Slurm": "scheduler",
    "Accounting": "scheduler",
    "LocalLogin": "login",
    "LoginHost": "login",
    "NodeResult": "outcome",
    "GroupOutcome": "outcome",
    "decide": "outcome",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'proctor.targets.slurm' has no attribute {name!r}")
    return getattr(importlib.import_module(f"proctor.targets.slurm.{module}"), name)

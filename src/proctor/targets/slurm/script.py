"""The batch script: one `srun` step running the supervising wrapper once on every node.

Each task runs `python -m proctor.targets.slurm.node REMOTE_RUN_DIR`, which makes
`nodes/$SLURMD_NODENAME/` a full run directory (log, exit_code, record.json, gpu.csv,
manifest.sha256). The script then writes the step's exit status to `steps/0.exit`, so the
per-step result is known even where Slurm keeps no accounting.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any

from proctor.targets.slurm.jobenv import JOB_ENV
from proctor.targets.slurm.options import SlurmOptions


@dataclass(frozen=True)
class RemoteLayout:
    """Paths on the shared filesystem for one run."""

    workspace: str
    run_id: str

    @property
    def run_dir(self) -> str:
        return f"{self.workspace}/proctor/runs/{self.run_id}"

    @property
    def script(self) -> str:
        return f"{self.run_dir}/job.sbatch"

    @property
    def job_env(self) -> str:
        """The job's environment (the unmasked argv, --env values): 0600, gone at job end."""
        return f"{self.run_dir}/.job-env.json"

    @property
    def nodes_dir(self) -> str:
        return f"{self.run_dir}/nodes"

    @property
    def steps_dir(self) -> str:
        return f"{self.run_dir}/steps"

    def node_dir(self, node: str) -> str:
        return f"{self.nodes_dir}/{node}"

    @property
    def head_file(self) -> str:
        return f"{self.run_dir}/head.json"

    def batch_output(self, job_id: int) -> str:
        return f"{self.run_dir}/slurm-{job_id}.out"


def render_script(
    options: SlurmOptions,
    layout: RemoteLayout,
    job_name: str,
    workdir: str,
    *,
    python: str | None = None,
    pythonpath: str | None = None,
    multinode: dict[str, Any] | None = None,
) -> str:
    """`python`/`pythonpath`: the interpreter and proctor package found on an SSH login host
    (the shared filesystem makes them the nodes' too). `multinode`: a server launch whose
    head and workers differ, so the head node's name and address are found first."""
    q = shlex.quote
    python = python or options.python
    lines = [
        "#!/bin/bash",
        f"#SBATCH --job-name={q(job_name)}",
        f"#SBATCH --nodes={options.nodes}",
        "#SBATCH --ntasks-per-node=1",
        f"#SBATCH --output={q(layout.run_dir)}/slurm-%j.out",
        f"#SBATCH --chdir={q(workdir)}",
        # A requeued job would rerun into the same run directory; a run is one attempt.
        "#SBATCH --no-requeue",
    ]
    if options.time_minutes is not None:
        lines.append(f"#SBATCH --time={options.time_minutes}")
    if options.partition:
        lines.append(f"#SBATCH --partition={q(options.partition)}")
    if options.gpus_per_node:
        lines.append(f"#SBATCH --gpus-per-node={options.gpus_per_node}")
    lines.extend(f"#SBATCH {q(arg)}" for arg in options.sbatch_args)
    steps = q(layout.steps_dir)
    lines += [
        "",
        'echo "proctor: job $SLURM_JOB_ID on $SLURM_JOB_NODELIST"',
        f"mkdir -p {steps} {q(layout.nodes_dir)}",
        # Every node's runner read the job's environment when its step started; at the end
        # (or on scancel's SIGTERM) the file goes.
        f'[ -n "${{{JOB_ENV}:-}}" ] && trap \'rm -f "${JOB_ENV}"\' EXIT',
    ]
    if pythonpath:
        lines.append(f"export PYTHONPATH={q(pythonpath)}${{PYTHONPATH:+:$PYTHONPATH}}")
    if multinode is not None:
        # The batch script runs on the first node of the allocation: rank 0, the head.
        head = q(layout.head_file)
        lines += [
            'PROCTOR_HEAD_NODE=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
            'PROCTOR_HEAD_ADDR=$(scontrol show node -o "$PROCTOR_HEAD_NODE" | tr " " "\\n" '
            "| sed -n 's/^NodeAddr=//p')",
            "PROCTOR_HEAD_ADDR=${PROCTOR_HEAD_ADDR:-$PROCTOR_HEAD_NODE}",
            "export PROCTOR_HEAD_NODE PROCTOR_HEAD_ADDR",
            f'printf \'{{"node": "%s", "address": "%s"}}\\n\' '
            f'"$PROCTOR_HEAD_NODE" "$PROCTOR_HEAD_ADDR" > {head}.tmp && mv {head}.tmp {head}',
            'echo "proctor: head node $PROCTOR_HEAD_NODE at $PROCTOR_HEAD_ADDR"',
        ]
    lines += [
        f'srun --ntasks-per-node=1 --nodes="$SLURM_JOB_NUM_NODES" {q(python)} '
        f"-m proctor.targets.slurm.node {q(layout.run_dir)}",
        "rc=$?",
        f'echo "$rc" > {steps}/.0.exit && mv {steps}/.0.exit {steps}/0.exit',
        'echo "proctor: step 0 exited $rc"',
        "exit $rc",
        "",
    ]
    return "\n".join(lines)

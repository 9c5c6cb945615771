"""The --target help texts, in one place for every command (cheap to import: no target code)."""

from __future__ import annotations

TARGET_HELP = (
    "ssh://user@host[:port] or runpod[:POD_ID][?keep&max-cost=N]: run this command "
    "there, next to the GPU, with proctor in <ws>/proctor/venv; SSH settings from "
    "[remote], pods from [runpod] in proctor.toml (docs/remote.md, docs/runpod.md). "
    "slurm://[user@]login-host: one Slurm job on a node, followed and fetched "
    "(docs/slurm.md)."
)
#: --target of the commands that act on runs: on Slurm they act on the local group run.
RUN_TARGET_HELP = (
    "ssh://user@host[:port] or runpod[:POD_ID]: act there, on the far runs "
    "(docs/remote.md); slurm://[user@]login-host: on a Slurm run here, its "
    "record and tracker are local (docs/slurm.md)."
)

#: --target of serve start: on Slurm the server spans an allocation, a local run of kind server.
SERVE_TARGET_HELP = (
    "ssh://user@host[:port] or runpod[:POD_ID]: start it there, next to the GPU "
    "(docs/remote.md); slurm://[user@]login-host: on a Slurm allocation "
    "(--nodes N; node 0 serves HTTP), a local server run (docs/slurm.md)."
)


__all__ = ["RUN_TARGET_HELP", "SERVE_TARGET_HELP", "TARGET_HELP"]

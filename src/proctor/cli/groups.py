"""Which command groups exist. Each module named here exposes `app` or `register(app)`.

Importing every group costs most of a second (aiohttp, plotly, pydantic models), paid by every
`proctor` call, detached runs' controllers included. So only the module that owns the command
being run is imported; `--help` and unknown commands import them all.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence

import typer

# (module, group name or None for top-level commands registered by `register(app)`,
#  the top-level command names the entry provides)
GROUPS: list[tuple[str, str | None, tuple[str, ...]]] = [
    ("run", None, ("run", "plan")),
    ("runs", "runs", ("runs",)),
    ("pod", "pod", ("pod",)),
    ("serve", "serve", ("serve",)),
    ("workflow", None, ("drain", "inspect", "flow")),
    ("eval", "eval", ("eval",)),
    ("bench", None, ("bench", "sweep")),
    ("results", "results", ("results",)),
    ("results", None, ("check",)),
    ("slurm", "slurm", ("slurm",)),
    ("report", None, ("report",)),
    ("offline", None, ("offline",)),
]


def _command_of(argv: Sequence[str]) -> str | None:
    for arg in argv:
        if not arg.startswith("-"):
            return arg
        if arg == "--":
            return None
    return None


def mount(root: typer.Typer, argv: Sequence[str] | None = None) -> None:
    command = _command_of(argv or [])
    wanted = [g for g in GROUPS if command in g[2]] or GROUPS
    for module_name, group, _ in wanted:
        module = importlib.import_module(f"proctor.cli.{module_name}")
        if group is None:
            module.register(root)
        else:
            root.add_typer(module.app, name=group)

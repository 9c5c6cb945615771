"""Which command groups exist. Each module named here exposes `app` or `register(app)`."""

from __future__ import annotations

import importlib

import typer

# (module, group name or None for top-level commands registered by `register(app)`)
GROUPS: list[tuple[str, str | None]] = [
    ("run", None),
    ("runs", "runs"),
    ("pod", "pod"),
    ("serve", "serve"),
    ("workflow", None),
    ("eval", "eval"),
    ("bench", None),
    ("results", "results"),
    ("results", None),
    ("slurm", "slurm"),
    ("report", None),
]


def mount(root: typer.Typer) -> None:
    for module_name, group in GROUPS:
        module = importlib.import_module(f"proctor.cli.{module_name}")
        if group is None:
            module.register(root)
        else:
            root.add_typer(module.app, name=group)

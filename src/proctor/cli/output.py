"""Printing for the CLI: one console for people, plain JSON for automation."""

from __future__ import annotations

import json
import sys
from typing import Any

from rich.console import Console

console = Console(highlight=False)
err_console = Console(stderr=True, highlight=False, soft_wrap=True)


def print_error(message: str) -> None:
    err_console.print(f"[bold red]proctor:[/] {message}", markup=True, soft_wrap=True)


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")
    sys.stdout.flush()

"""`proctor sweep --server-grid` / a flow file's [sweep] table, and `proctor sweep --slo`: the
thin CLI over proctor.server_sweep and proctor.workloads.slo."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer

from proctor.cli.output import print_json
from proctor.errors import UsageError
from proctor.jobs.flow import FlowJob
from proctor.spec.config import ProjectConfig


def run_grid(
    flow: FlowJob,
    table: dict[str, Any],
    source: Path | None,
    config: ProjectConfig,
    *,
    as_json: bool,
    say: Callable[[str], None],
    group: str | None = None,
) -> None:
    """Run a server sweep; print its summary table (or summary.json); exit as its first failure."""
    from proctor.server_sweep import grid_job, run_server_sweep, summary_text

    if not isinstance(table, dict):
        raise UsageError("[sweep] must be a table with server = {...} and bench = {...}")
    name = group or table.get("group") or (source.stem if source else None)
    if not name:
        raise UsageError("a server sweep needs a group", hint="pass --group NAME")
    result = run_server_sweep(grid_job(flow, table, str(name)), config, say=say)
    if as_json:
        print_json(
            {
                **(result.dir.read_json("summary.json") or {}),
                "ran": result.ran,
                "reused": result.reused,
                "exit_code": result.exit_code,
            }
        )
    else:
        sys.stdout.write(summary_text(result.rows))
        say(
            f"proctor: server sweep {name}: {len(result.ran)} point(s) run, "
            f"{len(result.reused)} reused; {result.dir.path / 'summary.csv'}"
        )
    if result.exit_code:
        raise typer.Exit(result.exit_code)


def grid_table(axes: list[str], bench: dict[str, Any]) -> dict[str, Any]:
    """The [sweep] table that `--server-grid NAME=V1,V2 ...` and the bench flags describe."""
    from proctor.server_sweep import parse_axis

    server: dict[str, list[Any]] = {}
    for text in axes:
        name, values = parse_axis(text)
        server[name] = values
    return {"server": server, "bench": {k: v for k, v in bench.items() if v is not None}}


__all__ = ["grid_table", "run_grid"]

"""`proctor sweep --server-grid` / a flow file's [sweep] table: the thin CLI that builds the
ServerGridJob and submits it, here or on --target."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from proctor.errors import UsageError
from proctor.jobs.flow import FlowJob
from proctor.jobs.grid import ServerGridJob


def grid_of(
    flow: FlowJob, table: dict[str, Any], source: Path | None, group: str | None = None
) -> ServerGridJob:
    """The server grid job a [sweep] table (or `--server-grid` and the bench flags) describes
    over `flow`; its group is --group, else the table's, else the flow file's name."""
    from proctor.server_sweep import grid_job

    if not isinstance(table, dict):
        raise UsageError("[sweep] must be a table with server = {...} and bench = {...}")
    name = group or table.get("group") or (source.stem if source else None)
    if not name:
        raise UsageError("a server sweep needs a group", hint="pass --group NAME")
    return grid_job(flow, table, str(name))


def submit_grid(
    grid: ServerGridJob, target: str | None, *, runs_dir: str | None, as_json: bool
) -> None:
    """Run a server sweep here or on `target` (cli/remote.py submit_command): its summary
    table (or summary.json); exit as its first failure."""
    from proctor.cli.remote import submit_command
    from proctor.jobs.submission import Submission

    submit_command(Submission(job=grid, answer=as_json), target, runs_dir=runs_dir, as_json=as_json)


def grid_table(axes: list[str], bench: dict[str, Any]) -> dict[str, Any]:
    """The [sweep] table that `--server-grid NAME=V1,V2 ...` and the bench flags describe."""
    from proctor.server_sweep import parse_axis

    server: dict[str, list[Any]] = {}
    for text in axes:
        name, values = parse_axis(text)
        server[name] = values
    return {"server": server, "bench": {k: v for k, v in bench.items() if v is not None}}


__all__ = ["grid_of", "grid_table", "submit_grid"]

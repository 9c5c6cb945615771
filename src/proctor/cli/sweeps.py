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
from proctor.flow import FlowOptions
from proctor.spec.config import ProjectConfig


def run_grid(
    options: FlowOptions,
    table: dict[str, Any],
    source: Path | None,
    config: ProjectConfig,
    *,
    as_json: bool,
    say: Callable[[str], None],
    group: str | None = None,
) -> None:
    """Run a server sweep; print its summary table (or summary.json); exit as its first failure."""
    from proctor.server_sweep import parse_grid, run_server_sweep, summary_text

    if not isinstance(table, dict):
        raise UsageError("[sweep] must be a table with server = {...} and bench = {...}")
    grid = parse_grid(table)
    name = group or table.get("group") or (source.stem if source else None)
    if not name:
        raise UsageError("a server sweep needs a group", hint="pass --group NAME")
    result = run_server_sweep(options, grid, config, group=str(name), say=say)
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


def run_slo(
    base_argv: list[str],
    slo: str,
    axis: str,
    lo: float | None,
    hi: float | None,
    config: ProjectConfig,
    *,
    runs_dir: str | None,
    name: str,
    max_probes: int,
    resolution: float | None,
    as_json: bool,
    say: Callable[[str], None],
) -> None:
    from proctor.workloads.slo import parse_slo, percentiles_needed, slo_search

    conditions = parse_slo(slo)
    if lo is None or hi is None:
        raise UsageError("--slo needs the range to search", hint="pass --lo A --hi B")
    argv = [
        *base_argv,
        "--percentiles",
        ",".join(sorted({"99", *percentiles_needed(conditions)}, key=float)),
    ]
    result = slo_search(
        argv,
        axis,
        lo,
        hi,
        conditions,
        config,
        runs_dir=runs_dir,
        name=name,
        resolution=resolution,
        max_probes=max_probes,
        say=say,
    )
    if as_json:
        print_json(result.dir.read_json("result.json"))
    else:
        shown = "none" if result.answer is None else f"{result.answer:g}"
        typer.echo(f"{axis}: {shown}")
        say(f"proctor: slo search {result.dir.run_id}: {result.dir.path / 'result.json'}")
    if result.error:
        raise UsageError(
            result.error, hint="name metrics of the bench's metrics.json, e.g. p99_ttft_ms<=500"
        )
    if result.exit_code:
        raise typer.Exit(result.exit_code)


__all__ = ["grid_table", "run_grid", "run_slo"]

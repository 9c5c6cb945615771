"""`proctor runs compare`, kept out of cli/results.py so that mounting `runs` (every `runs list`,
`runs show`) does not import the result parsers: they are imported when compare runs."""

from __future__ import annotations

import typer

from proctor.cli.helptext import JSON_HELP, REF_FORMS, RUNS_DIR_HELP

ALLOW = "--allow-mismatch"
ALLOW_HELP = (
    "Compare even when the two sides differ in source, engine args, dataset or GPU "
    "(the output is marked NOT COMPARABLE)."
)


def register_compare(runs_app: typer.Typer) -> None:
    @runs_app.command("compare")
    def compare_runs(
        a: str = typer.Argument(..., help="Run A: " + REF_FORMS + "; or a result file."),
        b: str = typer.Argument(..., help="Run B: " + REF_FORMS + "; or a result file."),
        runs_dir: str | None = typer.Option(None, "--runs-dir", help=RUNS_DIR_HELP),
        json_out: bool = typer.Option(False, "--json", help=JSON_HELP),
        allow_mismatch: bool = typer.Option(False, ALLOW, help=ALLOW_HELP),
    ) -> None:
        """Compare two runs metric by metric, with noise bands.

        Each metric of two runs side by side, with the change and its noise band (the 95% CI
        of the difference when both ran bench --repeat). Exit 77 when the runs differ in
        source, engine args, dataset or GPU, unless --allow-mismatch."""
        from proctor.cli.results import _run_path, compare_cmd

        compare_cmd(
            str(_run_path(a, runs_dir)), str(_run_path(b, runs_dir)), json_out, allow_mismatch
        )


__all__ = ["ALLOW", "ALLOW_HELP", "register_compare"]

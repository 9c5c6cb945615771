"""`proctor report RUN | SWEEP | --compare A B [...]`: one self-contained HTML file.

A top-level command: the lead mounts it with `register(app)`.
"""

from __future__ import annotations

import webbrowser
from pathlib import Path

import typer

from proctor.cli.helptext import REF_FORMS
from proctor.cli.output import err_console, print_json
from proctor.report import build_report, write_report
from proctor.results.baselines import load_baseline
from proctor.spec.config import load_config
from proctor.spec.plan import resolve_runs_dir

REPORT_HELP = """Write an HTML report of a run, a sweep, or runs compared.

A sweep is the runs sharing a group.

The file needs no network to view (plotly.js is inline) and holds: outcome and exit status,
source identity, target and GPU, timestamps, the command, the completion checks; the GPU
memory timeline with the workflow's phases; latency CDFs and the summary for benchmarks;
throughput and latency curves for sweeps; scores with stderr against the baseline for evals;
every metric side by side with its change and noise band for comparisons.
Default output: RUNS_DIR/reports/<run id | sweep | compare-...>.html.
"""


def register(app: typer.Typer) -> None:
    @app.command("report", help=REPORT_HELP)
    def report_command(
        refs: list[str] = typer.Argument(
            None,
            metavar="RUN|SWEEP [MORE]...",
            show_default=False,
            help="Each a run (" + REF_FORMS + ") or a sweep's group name.",
        ),
        compare: bool = typer.Option(
            False, "--compare", help="Put every run (or sweep) given side by side, the first as A."
        ),
        output: Path = typer.Option(None, "--output", "-o", help="Where the .html goes."),
        baseline: Path = typer.Option(
            None,
            "--baseline",
            help="A perf baseline (TOML/JSON) or ATOM models_accuracy.json to judge against.",
        ),
        model: str = typer.Option(
            None,
            "--model",
            help="Which model entry of an accuracy baseline (default: the run's model).",
        ),
        open_it: bool = typer.Option(
            False, "--open", help="Open the report in the default browser."
        ),
        runs_dir: str = typer.Option(
            None, "--runs-dir", help="Runs directory (env PROCTOR_RUNS_DIR)."
        ),
        as_json: bool = typer.Option(False, "--json", help="Print what was written as JSON."),
    ) -> None:
        directory = Path(resolve_runs_dir(runs_dir, load_config()).value)
        base = load_baseline(baseline) if baseline is not None else None
        report = build_report(
            directory, list(refs or []), compare_runs=compare, baseline=base, model=model
        )
        path = output or directory / "reports" / f"{report.default_name}.html"
        write_report(report, path)
        if as_json:
            print_json(
                {
                    "path": str(path.resolve()),
                    "kind": report.kind,
                    "bytes": path.stat().st_size,
                    "runs": [v.run_id for s in report.subjects for v in s.views],
                    "figures": [
                        {"id": f.id, "title": f.title, "points": f.points} for f in report.figures
                    ],
                }
            )
        else:
            err_console.print(f"proctor: {report.kind} report -> {path}", highlight=False)
            typer.echo(str(path))
        if open_it:
            webbrowser.open(path.resolve().as_uri())

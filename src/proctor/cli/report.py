"""`proctor report RUN | SWEEP | --compare A B [...]`: one self-contained HTML file.

A top-level command: the lead mounts it with `register(app)`.
"""

from __future__ import annotations

import webbrowser
from pathlib import Path

import typer

from proctor.cli.helptext import REF_FORMS
from proctor.cli.output import err_console, print_json
from proctor.errors import UsageError
from proctor.report import Report, build_report, write_report
from proctor.results.baselines import load_baseline
from proctor.spec.config import ProjectConfig, load_config
from proctor.spec.plan import resolve_runs_dir, resolve_store_path

REPORT_HELP = """Write an HTML report of a run, a sweep, or runs compared.

A sweep is the runs sharing a group.

`proctor report history --metric NAME` draws one metric across runs and commits from the
store (a point per run, INVALID runs marked), filtered by --name, --kind and --since.

The file needs no network to view: plotly.js is written once beside it
(assets/plotly-VERSION.min.js, kept with the page when it is copied) or, with
--self-contained, inside it. It holds: outcome and exit status,
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
        self_contained: bool = typer.Option(
            False,
            "--self-contained",
            help="Put plotly.js inside the page (about 4.7 MB more): one file to send"
            " anywhere. Without it the page loads assets/plotly-VERSION.min.js, written once"
            " beside it.",
        ),
        metric: str = typer.Option(
            None,
            "--metric",
            help="history: the metric to draw across runs (a metrics.json name such as"
            " output_throughput or median_ttft_ms).",
        ),
        name: str = typer.Option(
            None, "--name", help="history: only runs whose name contains this."
        ),
        kind: str = typer.Option(
            None, "--kind", help="history: only runs of this kind (bench, eval, offline...)."
        ),
        since: str = typer.Option(
            None,
            "--since",
            help="history: only runs created since an ISO date/time or a duration ago (7d).",
        ),
        x_axis: str = typer.Option(
            "time", "--x", help="history: the x axis, time (run created) or commit."
        ),
        as_json: bool = typer.Option(False, "--json", help="Print what was written as JSON."),
    ) -> None:
        config = load_config()
        directory = Path(resolve_runs_dir(runs_dir, config).value)
        refs = list(refs or [])
        history = {"--metric": metric, "--name": name, "--kind": kind, "--since": since}
        if refs[:1] == ["history"]:
            report = _history(refs, directory, config, metric, name, kind, since, x_axis)
        else:
            given = [flag for flag, value in history.items() if value]
            if given or x_axis != "time":
                raise UsageError(
                    f"{(given or ['--x'])[0]} is an option of the history page",
                    hint="proctor report history --metric NAME [--name N] [--kind K] [--since T]",
                )
            base = load_baseline(baseline) if baseline is not None else None
            report = build_report(directory, refs, compare_runs=compare, baseline=base, model=model)
        path = output or directory / "reports" / f"{report.default_name}.html"
        write_report(report, path, self_contained=self_contained)
        if as_json:
            print_json(
                {
                    "path": str(path.resolve()),
                    "kind": report.kind,
                    "bytes": path.stat().st_size,
                    "self_contained": self_contained,
                    "runs": report.run_ids,
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


def _history(
    refs: list[str],
    directory: Path,
    config: ProjectConfig,
    metric: str | None,
    name: str | None,
    kind: str | None,
    since: str | None,
    x_axis: str,
) -> Report:
    from proctor.cli.runs import _since
    from proctor.report.history import build_history

    if len(refs) > 1:
        raise UsageError(
            f"history takes no run ({refs[1]!r} given)", hint="choose runs with --name/--kind"
        )
    if not metric:
        raise UsageError(
            "history needs --metric NAME",
            hint="e.g. proctor report history --metric output_throughput --kind bench",
        )
    return build_history(
        directory,
        Path(resolve_store_path(config, directory).value),
        metric,
        name=name,
        kind=kind,
        since=_since(since) if since else None,
        x=x_axis,
    )

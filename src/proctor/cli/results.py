"""`proctor results`: parse results from anywhere, check them against baselines, compare."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer
from rich.table import Table

from proctor.cli.helptext import JSON_HELP, REF_FORMS, RUNS_DIR_HELP
from proctor.cli.output import console, err_console, print_json
from proctor.cli.runs_compare import ALLOW, ALLOW_HELP
from proctor.errors import NotAuthorised, Regression, ResultUnknown, UsageError
from proctor.results import PerfBaseline, check, compare, load_baseline, parse_path, worst_status
from proctor.results.identity import FIELDS, identity_of, mismatches
from proctor.results.model import ParsedResult

app = typer.Typer(
    help="Parse, check and compare benchmark and evaluation results.", no_args_is_help=True
)


def _fmt(v: float | None, pct: bool = False) -> str:
    if v is None:
        return "-"
    return f"{v:+.2%}" if pct else f"{v:.4g}"


def _parse(file: Path) -> ParsedResult:
    res = parse_path(file)
    if res.meta.get("input_cut"):  # a huge or endless input: say what was not read
        err_console.print(f"proctor: warning: {file}: {res.meta['input_cut']}", highlight=False)
    return res


# Shared with `runs compare` (cli/runs_compare.py, which imports this module only when it runs).
_ALLOW, _ALLOW_HELP = ALLOW, ALLOW_HELP


def _refuse_or_mark(
    what: str, a: dict[str, str | None], b: dict[str, str | None], allow: bool
) -> list[str]:
    """Exit 77 when the sides measured different things, unless allowed; the differences."""
    diff = mismatches(a, b)
    if diff and not allow:
        raise NotAuthorised(f"{what} measured different things: {'; '.join(diff)}", flag=_ALLOW)
    if diff:
        err_console.print(
            f"proctor: NOT COMPARABLE ({what}): {'; '.join(diff)}", markup=False, highlight=False
        )
    return diff


@app.command("parse")
def parse_cmd(
    file: str = typer.Argument(
        ...,
        help="What to parse: a log, result JSON or lm-eval JSON, or a run: " + REF_FORMS + ".",
    ),
    json_out: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Print the metrics found in FILE, with normalized names and units."""
    res = _parse(_run_path(file, None))
    if json_out:
        print_json(res.model_dump())
        return
    table = Table(title=f"{res.kind}: {res.path}")
    for col in ("metric", "value", "± stderr", "unit", "better"):
        table.add_column(col)
    for m in res.metrics.values():
        table.add_row(m.name, _fmt(m.value), _fmt(m.stderr), m.unit, m.direction)
    console.print(table)


@app.command("check")
def check_cmd(
    file: str = typer.Argument(
        ..., help="What to check: a result file, or a run: " + REF_FORMS + "."
    ),
    baselines: Path = typer.Option(..., "--baselines", help="models_accuracy.json or perf TOML."),
    model: str | None = typer.Option(None, "--model", help="Entry in models_accuracy.json."),
    json_out: bool = typer.Option(False, "--json", help=JSON_HELP),
    allow_mismatch: bool = typer.Option(False, _ALLOW, help=_ALLOW_HELP),
) -> None:
    """Judge a result against baselines, metric by metric.

    Exit 7 on regression, 6 when a metric is missing or the
    benchmark's validity verdict is INVALID (its reasons are printed), 77 when the baseline's
    [meta] names a source, engine args, dataset or GPU the result differs in."""
    path = _run_path(file, None)
    ended = run_not_ok(path)
    if ended is not None:  # a failed, stopped or unfinished run's figures are no measurement
        raise ResultUnknown(
            f"run {path.name} {ended}: its results are not judged",
            hint="check a run that ended ok (proctor runs show it says why)",
        )
    res = _parse(path)
    named = model or next(
        (
            res.meta[k]
            for k in ("model_name", "model_id", "model")
            if isinstance(res.meta.get(k), str)
        ),
        None,
    )
    baseline = load_baseline(baselines)
    diff: list[str] = []
    if isinstance(baseline, PerfBaseline):
        theirs = {
            k: str(v) if v is not None else None
            for k, v in ((f, baseline.meta.get(f)) for f in FIELDS)
        }
        diff = _refuse_or_mark(
            "the result and the baseline", identity_of(path), theirs, allow_mismatch
        )
    verdicts = check(
        res.metrics, baseline, named, res.meta.get("not_numbers"), explicit=model is not None
    )
    status = worst_status(verdicts)
    if json_out:
        print_json(
            {
                "status": status,
                "verdicts": [v.model_dump() for v in verdicts],
                "validity": res.meta.get("validity"),
                **({"not_comparable": diff} if diff else {}),
            }
        )
    else:
        mark = "  [NOT COMPARABLE]" if diff else ""
        table = Table(title=f"{file} vs {baselines}{mark}")
        for col in ("metric", "value", "baseline", "change", "noise", "verdict", "why"):
            table.add_column(col)
        for v in verdicts:
            table.add_row(
                v.metric,
                _fmt(v.value),
                _fmt(v.baseline if v.baseline is not None else v.threshold),
                _fmt(v.change, pct=True),
                _fmt(v.noise),
                v.status,
                v.message,
            )
        console.print(table)
    refuse_invalid(res)
    if status == "regression":
        bad = [v.metric for v in verdicts if v.status == "regression"]
        raise Regression(
            f"regression in {', '.join(bad)}",
            hint="each metric's verdict says how far it moved against its baseline",
        )
    if status == "missing":
        gone = [v.metric for v in verdicts if v.status == "missing"]
        raise ResultUnknown(
            f"baselined metrics missing from the result: {', '.join(gone)}",
            hint="check that the run produced them",
        )


def run_not_ok(path: Path) -> str | None:
    """How a run directory's run did not end ok ("ended failed (exit 1)", "is still running"),
    from its record; None when it ended ok or `path` is no run directory. A record this proctor
    cannot read (a newer schema, not JSON) is refused (RecordError, exit 64)."""
    from proctor.record.schema import load_record

    if not path.is_dir() or not (path / "record.json").is_file():
        return None
    record = load_record(path, strict=True)
    if record.outcome == "ok":
        return None
    if record.outcome in ("starting", "running"):
        return f"is still {record.outcome} (or its end was never recorded)"
    code = f" (exit {record.exit.code})" if record.exit is not None else ""
    return f"ended {record.outcome}{code}"


def _warn_untrusted(side: str, path: Path, res: ParsedResult) -> None:
    """compare shows any two results, but says which side is no trusted measurement."""
    ended = run_not_ok(path)
    if ended is not None:
        err_console.print(
            f"proctor: warning: {side} ({path.name}) {ended}; its figures are "
            "not a measurement to trust",
            markup=False,
            highlight=False,
        )
    validity = res.meta.get("validity")
    if isinstance(validity, dict) and validity.get("verdict") == "INVALID":
        reasons = "; ".join(str(r) for r in validity.get("reasons") or []) or "no reason given"
        err_console.print(
            f"proctor: warning: {side} ({path.name}) is an INVALID benchmark ({reasons})",
            markup=False,
            highlight=False,
        )
    if res.kind == "imported":  # another tool's figures: say what proctor could not check
        lacks = res.meta.get("lacks") or []
        err_console.print(
            f"proctor: note: {side} ({path.name}) was imported from"
            f" {res.meta.get('imported_from')}; it lacks: {'; '.join(map(str, lacks[:3]))}",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
    for name, value in (res.meta.get("not_numbers") or {}).items():
        err_console.print(
            f"proctor: warning: {side} gives {name} as {value}, not a number",
            markup=False,
            highlight=False,
        )


def refuse_invalid(res: ParsedResult) -> None:
    """An INVALID benchmark is no measurement: its metrics cannot pass or regress (exit 6)."""
    validity = res.meta.get("validity")
    if not isinstance(validity, dict) or validity.get("verdict") != "INVALID":
        return
    reasons = [str(r) for r in validity.get("reasons") or []]
    for reason in reasons:
        err_console.print(f"proctor: invalid benchmark: {reason}", markup=False, highlight=False)
    raise ResultUnknown(
        f"the benchmark is INVALID ({'; '.join(reasons) or 'no reason given'})",
        hint="fix what the reasons say and run the benchmark again",
    )


@app.command("compare")
def compare_cmd(
    a: str = typer.Argument(..., help="Result A: a result file, or a run: " + REF_FORMS + "."),
    b: str = typer.Argument(..., help="Result B: a result file, or a run: " + REF_FORMS + "."),
    json_out: bool = typer.Option(False, "--json", help=JSON_HELP),
    allow_mismatch: bool = typer.Option(False, _ALLOW, help=_ALLOW_HELP),
) -> None:
    """Compare two results metric by metric, with noise bands.

    Each metric of A and B side by side, with the change and its noise band (the 95% CI of
    the difference when both come from bench --repeat). Exit 77 when A and B differ in source,
    engine args, dataset or GPU, unless --allow-mismatch."""
    path_a, path_b = _run_path(a, None), _run_path(b, None)
    diff = _refuse_or_mark("A and B", identity_of(path_a), identity_of(path_b), allow_mismatch)
    res_a, res_b = _parse(path_a), _parse(path_b)
    _warn_untrusted("A", path_a, res_a)
    _warn_untrusted("B", path_b, res_b)
    rows = compare(res_a.metrics, res_b.metrics)
    if not rows:  # an empty table with exit 0 would read as "no difference"
        raise ResultUnknown(
            "neither A nor B holds a metric: nothing to compare",
            hint="give results that hold figures (metrics.json, a benchmark log)",
        )
    if json_out:
        print_json([r.model_dump() for r in rows])
        return
    table = Table(title=f"A={a}  B={b}" + ("  [NOT COMPARABLE]" if diff else ""))
    for col in ("metric", "A", "B", "change", "± noise", "noise from", "assessment"):
        table.add_column(col)
    for r in rows:
        table.add_row(
            r.metric,
            _fmt(r.a),
            _fmt(r.b),
            _fmt(r.change, pct=True),
            _fmt(r.noise),
            r.method,
            r.assessment,
        )
    console.print(table)


_EXPORT_HELP = (
    "br-0.2: llm-d's Benchmark Report v0.2 (version 0.2.1 of its schema); proctor: proctor's"
    " own export (schema proctor.results.export, committed in the package)."
)


@app.command("export")
def export_cmd(
    run: str = typer.Argument(..., help=f"The run to export: {REF_FORMS}."),
    fmt: str = typer.Option("proctor", "--format", help=_EXPORT_HELP),
    output: Path | None = typer.Option(
        None, "--output", "-o", help="Write the export to this file (default: stdout)."
    ),
    runs_dir: str | None = typer.Option(None, "--runs-dir", help=RUNS_DIR_HELP),
) -> None:
    """Write a run's result in a public schema (llm-d's, proctor's).

    `--format br-0.2` for llm-d-benchmark and llm-d-prism, `--format proctor` for proctor's own
    versioned export. Exit 64 for an unknown format, a run that is no run directory, or
    (br-0.2) a run with no serving metrics."""
    from proctor.record.rundir import write_atomic
    from proctor.results.exchange import export_run

    doc = export_run(_run_path(run, runs_dir), fmt)
    if output is None:
        print_json(doc)
        return
    from proctor import redact

    try:
        text = json.dumps(redact.data(doc), indent=2, allow_nan=False) + "\n"
        write_atomic(output, text, mask=False)
    except OSError as error:
        raise UsageError(
            f"cannot write {output}: {error.strerror}", hint="give a writable --output path"
        ) from None
    err_console.print(f"proctor: wrote {fmt} export to {output}", markup=False, highlight=False)


_IMPORT_HELP = "auto (default), vllm, guidellm, aiperf, br-0.2 or proctor."


@app.command("import")
def import_cmd(
    file: Path = typer.Argument(..., help="The other tool's result file."),
    fmt: str = typer.Option("auto", "--format", help=_IMPORT_HELP),
    runs_dir: str | None = typer.Option(None, "--runs-dir", help=RUNS_DIR_HELP),
    json_out: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Read another tool's result into the store as a run of its own.

    The run's kind is "imported". Read: vLLM's `bench serve --save-result` JSON, GuideLLM's benchmarks JSON (one run per
    benchmark), AIPerf's profile_export_aiperf.json, an llm-d Benchmark Report v0.2 (JSON or
    YAML) or a proctor export. The format is found from the file (--format forces one);
    metrics take proctor's names and units, so `runs compare` and `check` work across tools.
    Each run says which tool it came from and what it lacks. Exit 64, one line, for a file
    that is none of them (not UTF-8, not JSON, the wrong shape, over 64 MiB)."""
    from proctor.record.imported import import_file
    from proctor.spec.config import load_config
    from proctor.spec.plan import resolve_runs_dir, resolve_store_path

    config = load_config()
    runs = Path(resolve_runs_dir(runs_dir, config).value)
    store = resolve_store_path(config, runs).value
    done = import_file(file, runs, store, None if fmt == "auto" else fmt)
    rows: list[dict[str, Any]] = [
        {
            "run_id": path.name,
            "dir": str(path),
            "tool": res.tool,
            "format": res.format,
            "tool_version": res.tool_version,
            "model": res.model,
            "metrics": len(res.metrics),
            "lacks": res.lacks,
            "not_numbers": res.not_numbers,
            "validity": _validity_of(path),
        }
        for path, res in done
    ]
    if json_out:
        print_json(rows)
        return
    for row, (_, res) in zip(rows, done, strict=True):
        console.print(
            f"imported {file.name} ({row['format']}, from {row['tool']}) as run {row['run_id']}:"
            f" {row['metrics']} metrics",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
        console.print(
            f"  lacks: {'; '.join(res.lacks)}", markup=False, highlight=False, soft_wrap=True
        )
        validity = row["validity"] or {}
        reasons = "; ".join(validity.get("reasons") or [])
        console.print(
            f"  validity: {validity.get('verdict')}" + (f" ({reasons})" if reasons else ""),
            markup=False,
            highlight=False,
            soft_wrap=True,
        )


def _validity_of(run_dir: Path) -> dict[str, Any] | None:
    """The validity section an imported run's metrics.json holds."""
    try:
        doc = json.loads((run_dir / "metrics.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    validity = doc.get("validity") if isinstance(doc, dict) else None
    return validity if isinstance(validity, dict) else None


def _run_path(ref: str | Path, runs_dir: str | None) -> Path:
    """A result file or run directory, or a run id, name or 'last' (the newest run that has
    results: not a server or a flow), as the path the parsers read."""
    candidate = Path(ref)
    if candidate.exists():
        return candidate
    from proctor.spec.config import load_config
    from proctor.spec.plan import resolve_runs_dir
    from proctor.supervise.refs import RESULT_KINDS, resolve_run

    directory = Path(resolve_runs_dir(runs_dir, load_config()).value)
    if not directory.is_dir():
        raise UsageError(
            f"no file {str(ref)!r}, and no runs in {directory} to find a run {str(ref)!r} in",
            hint="give a result file, a run directory, or a run id with --runs-dir",
        )
    return resolve_run(directory, str(ref), RESULT_KINDS).path


def register(root: typer.Typer) -> None:
    """`proctor check RUN --baselines FILE` at the top level, as the workflow names it."""

    @root.command("check")
    def check_run(
        run: str = typer.Argument(
            ..., help="What to check: a run (" + REF_FORMS + ") or a result file."
        ),
        baselines: Path = typer.Option(
            ..., "--baselines", help="models_accuracy.json or perf TOML."
        ),
        model: str | None = typer.Option(None, "--model", help="Entry in models_accuracy.json."),
        runs_dir: str | None = typer.Option(None, "--runs-dir", help=RUNS_DIR_HELP),
        json_out: bool = typer.Option(False, "--json", help=JSON_HELP),
        allow_mismatch: bool = typer.Option(False, _ALLOW, help=_ALLOW_HELP),
    ) -> None:
        """Judge a run against baselines, metric by metric.

        Verdicts: pass, within noise, regression (exit 7), missing (exit 6); exit 77 when the baseline's [meta] identity differs from the run's."""
        check_cmd(str(_run_path(run, runs_dir)), baselines, model, json_out, allow_mismatch)

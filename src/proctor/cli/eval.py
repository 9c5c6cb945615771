"""`proctor eval`: accuracy workloads against a running OpenAI-compatible server."""

from __future__ import annotations

from pathlib import Path

import typer

from proctor.cli.helptext import RUNS_DIR_HELP
from proctor.cli.jobopts import JobGroup, JobValues, job_command
from proctor.cli.output import console, print_json
from proctor.cli.targethelp import TARGET_HELP
from proctor.errors import UsageError
from proctor.jobs.eval import EvalJob
from proctor.jobs.options import validated
from proctor.jobs.submission import ServerField, Submission
from proctor.workloads.gsm8k import run_gsm8k

app = typer.Typer(help="Accuracy evaluations (GSM8K through lm-eval).", no_args_is_help=True)


@app.callback()
def _group() -> None:
    """Accuracy evaluations (GSM8K through lm-eval)."""


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4f}"


def eval_job(job: JobValues, *, port: int, absolute: bool = True) -> EvalJob:
    """The eval job the options describe: what the user set, then the defaults (--port's URL);
    `--data` made absolute where `absolute` (a supervised run may start elsewhere; under
    --target it stays as given: the folder is shipped, its far copy named)."""
    if "base_url" in job.given and port != 8000:
        raise UsageError("give --base-url or --port, not both")
    values = dict(job.values)
    if "base_url" not in job.given:
        values["base_url"] = f"http://127.0.0.1:{port}"
    if values.get("data") and absolute:
        values["data"] = str(Path(values["data"]).resolve())
    return validated(EvalJob, values, what="invalid option", hint="see proctor eval gsm8k --help")


def _gsm8k(
    *,
    job: JobValues,
    port: int = typer.Option(
        8000, "--port", min=1, max=65535, help="Port on 127.0.0.1 when --base-url is unset."
    ),
    output_dir: Path | None = typer.Option(
        None,
        "--output-dir",
        help="Run in-process, writing here, instead of a supervised run.",
    ),
    server: str | None = typer.Option(None, "--server", help="A server run to evaluate."),
    name: str | None = typer.Option(None, "--name", help="Run name (default gsm8k-Nshot)."),
    detach: bool = typer.Option(False, "--detach", "-d", help="Start the run and return its id."),
    runs_dir: str | None = typer.Option(None, "--runs-dir", help=RUNS_DIR_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print metrics.json's metrics as JSON."),
    target: str | None = typer.Option(None, "--target", help=TARGET_HELP),
) -> None:
    """Run GSM8K with lm-eval against a server, as a supervised run.

    Exit 3 when lm-eval fails, leaves no results, or more requests went unanswered than --max-error-rate allows (default: any)."""
    # Bad input is refused here, before a run (or a far machine) exists.
    config = eval_job(job, port=port, absolute=not target)
    if not server:
        config.require_model()
    if output_dir is None:
        from proctor.cli.bench import server_ref
        from proctor.cli.remote import submit_command

        submission = Submission(
            job=config,
            name=name,
            detach=detach,
            server=server_ref(server, job, EVAL_FILLS),
            answer=as_json,
        )
        return submit_command(submission, target, runs_dir=runs_dir, as_json=as_json)
    if target:
        raise UsageError(
            "--output-dir runs the eval in this process; --target runs it there",
            hint="drop one of them",
        )
    if server:
        from proctor.workloads.loadgen.server_run import live_server_facts

        fills = Submission(job=config, server=server_ref(server, job, EVAL_FILLS))
        filled = fills.with_server_facts(live_server_facts(server, runs_dir)).job
        assert isinstance(filled, EvalJob)
        config = filled
    result = run_gsm8k(config, output_dir, echo=not as_json)
    if as_json:
        print_json({"kind": "gsm8k", "metrics": result.to_metrics(), "output_dir": str(output_dir)})
        return
    fx, sm = result.flexible_extract, result.strict_match
    console.print(
        f"gsm8k ({result.n_samples} samples, {result.num_fewshot}-shot): "
        f"flexible-extract {_fmt(fx.exact_match)} ± {_fmt(fx.stderr)}, "
        f"strict-match {_fmt(sm.exact_match)} ± {_fmt(sm.stderr)}"
    )
    console.print(f"metrics: {output_dir / 'metrics.json'}")


# What a --server run's facts fill in an eval job where the user did not set them.
EVAL_FILLS: tuple[ServerField, ...] = ("base_url", "model")

gsm8k = app.command("gsm8k")(job_command(_gsm8k, JobGroup("job", EvalJob)))

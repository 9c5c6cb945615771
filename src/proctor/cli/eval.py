"""`proctor eval`: accuracy workloads against a running OpenAI-compatible server."""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from pathlib import Path

import typer

from proctor.cli.helptext import RUNS_DIR_HELP
from proctor.cli.jobopts import JobGroup, JobValues, job_command
from proctor.cli.output import console, print_json
from proctor.cli.targethelp import TARGET_HELP
from proctor.errors import UsageError
from proctor.jobs.argv import job_argv
from proctor.jobs.eval import EvalJob
from proctor.jobs.options import validated
from proctor.workloads.gsm8k import run_gsm8k

app = typer.Typer(help="Accuracy evaluations (GSM8K through lm-eval).", no_args_is_help=True)


@app.callback()
def _group() -> None:
    """Accuracy evaluations (GSM8K through lm-eval)."""


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4f}"


def _own(name: str, annotation: object, default: object) -> inspect.Parameter:
    return inspect.Parameter(
        name, inspect.Parameter.KEYWORD_ONLY, annotation=annotation, default=default
    )


# The command's own options: where and how the run goes. Every eval setting is EvalJob's.
EVAL_OWN = [
    _own(
        "port",
        int,
        typer.Option(
            8000, "--port", min=1, max=65535, help="Port on 127.0.0.1 when --base-url is unset."
        ),
    ),
    _own(
        "output_dir",
        Path | None,
        typer.Option(
            None,
            "--output-dir",
            help="Run in-process, writing here, instead of a supervised run.",
        ),
    ),
    _own("server", str | None, typer.Option(None, "--server", help="A server run to evaluate.")),
    _own("name", str | None, typer.Option(None, "--name", help="Run name (default gsm8k-Nshot).")),
    _own(
        "detach",
        bool,
        typer.Option(False, "--detach", "-d", help="Start the run and return its id."),
    ),
    _own("runs_dir", str | None, typer.Option(None, "--runs-dir", help=RUNS_DIR_HELP)),
    _own(
        "as_json",
        bool,
        typer.Option(False, "--json", help="Print metrics.json's metrics as JSON."),
    ),
    _own("target", str | None, typer.Option(None, "--target", help=TARGET_HELP)),
]


def eval_job(job: JobValues, *, server_facts: Mapping[str, object], port: int) -> EvalJob:
    """The eval job the options describe: what the user set, then the --server run's facts,
    then the defaults (--port's URL); `--data` made absolute (the run may start elsewhere)."""
    if "base_url" in job.given and port != 8000:
        raise UsageError("give --base-url or --port, not both")
    values = dict(job.values)
    if "base_url" not in job.given:
        values["base_url"] = str(server_facts.get("base_url") or f"http://127.0.0.1:{port}")
    if not values.get("model") and server_facts.get("checked_model"):
        values["model"] = str(server_facts["checked_model"])
    if values.get("data"):
        values["data"] = str(Path(values["data"]).resolve())
    return validated(EvalJob, values, what="invalid option", hint="see proctor eval gsm8k --help")


def _gsm8k(
    *,
    job: JobValues,
    port: int,
    output_dir: Path | None,
    server: str | None,
    name: str | None,
    detach: bool,
    runs_dir: str | None,
    as_json: bool,
    target: str | None,
) -> None:
    """Run GSM8K with lm-eval against a server, as a supervised run.

    Exit 3 when lm-eval fails, leaves no results, or more requests went unanswered than --max-error-rate allows (default: any)."""
    if target:
        from proctor.cli.remote import hand_off

        return hand_off(
            target,
            runs_dir=runs_dir,
            as_json=as_json,
            answer=True,
            leave_live=detach,
            direct=detach,
            detach=detach,
        )
    facts: dict[str, object] = {}
    if server:
        from proctor.workloads.loadgen.server_run import live_server_facts

        facts = live_server_facts(server, runs_dir)
    # Bad input is refused here, before a supervised run (and its directory) exists.
    config = eval_job(job, server_facts=facts, port=port)
    if output_dir is None:
        server_run = str(facts["run_id"]) if facts else None
        name = name or f"gsm8k-{config.num_fewshot}shot"
        _supervised(job_argv(config), name, server_run, detach, runs_dir, as_json)
        return
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


gsm8k = app.command("gsm8k")(job_command(_gsm8k, EVAL_OWN, JobGroup("job", EvalJob)))


def _supervised(
    argv: list[str],
    name: str,
    server_run: str | None,
    detach: bool,
    runs_dir: str | None,
    as_json: bool,
) -> None:
    from proctor.cli.follow import finish, follow
    from proctor.spec.config import load_config
    from proctor.spec.plan import RunFlags, resolve_run_plan
    from proctor.supervise.launch import RunSpec, start_run
    from proctor.targets.service import guard_start

    plan = resolve_run_plan(
        RunFlags(argv=argv, name=name, runs_dir=runs_dir, detach=detach, gpu_sample=0),
        load_config(),
    )
    extra = {"server_run": server_run} if server_run else {}
    interrupts = guard_start()
    started = start_run(plan, RunSpec(kind="eval", extra=extra))
    run = started.run
    interrupts.attach(run)
    if detach:
        typer.echo(run.run_id)
        return
    supervised, state = follow(run, "eval", quiet=as_json)
    if as_json:
        print_json({"run_id": run.run_id, **(run.read_json("metrics.json") or {})})
    finish(supervised, interrupts, state, "eval")

"""`proctor eval`: accuracy workloads against a running OpenAI-compatible server."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from proctor.cli.helptext import RUNS_DIR_HELP
from proctor.cli.output import console, print_json
from proctor.cli.targethelp import TARGET_HELP
from proctor.errors import UsageError
from proctor.workloads.gsm8k import Gsm8kConfig, find_lm_eval, run_gsm8k

app = typer.Typer(help="Accuracy evaluations (GSM8K through lm-eval).", no_args_is_help=True)


@app.callback()
def _group() -> None:
    """Accuracy evaluations (GSM8K through lm-eval)."""


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4f}"


@app.command("gsm8k")
def gsm8k(
    fewshot: int = typer.Option(3, "--fewshot", help="Few-shot examples per question."),
    limit: int | None = typer.Option(None, "--limit", help="Only the first N test questions."),
    chat: bool = typer.Option(
        False, "--chat", help="Chat completions, chat template, multi-turn few-shot."
    ),
    num_concurrent: int = typer.Option(65, "--num-concurrent", help="Requests in flight."),
    gen_kwargs: str | None = typer.Option(
        None, "--gen-kwargs", help="lm-eval generation overrides, e.g. max_gen_toks=512."
    ),
    data: Path | None = typer.Option(
        None, "--data", help="Folder with GSM8K train.jsonl/test.jsonl: run offline from it."
    ),
    base_url: str | None = typer.Option(
        None, "--base-url", help="Server root, e.g. http://127.0.0.1:8000 (default: --port)."
    ),
    port: int = typer.Option(
        8000, "--port", min=1, max=65535, help="Port on 127.0.0.1 when --base-url is unset."
    ),
    model: str | None = typer.Option(
        None, "--model", help="Served model name (default: the server run's)."
    ),
    output_dir: Path | None = typer.Option(
        None, "--output-dir", help="Run in-process, writing here, instead of a supervised run."
    ),
    server: str | None = typer.Option(None, "--server", help="A server run to evaluate."),
    name: str | None = typer.Option(None, "--name", help="Run name (default gsm8k-Nshot)."),
    detach: bool = typer.Option(False, "--detach", "-d", help="Start the run and return its id."),
    runs_dir: str | None = typer.Option(None, "--runs-dir", help=RUNS_DIR_HELP),
    log_samples: bool = typer.Option(False, "--log-samples", help="Keep lm-eval's samples."),
    lm_eval: str | None = typer.Option(None, "--lm-eval", help="Path of the lm_eval executable."),
    as_json: bool = typer.Option(False, "--json", help="Print metrics.json's metrics as JSON."),
    max_error_rate: float = typer.Option(
        0.0,
        "--max-error-rate",
        help="Fraction of samples allowed to go unanswered (default 0); above it exit 3.",
    ),
    target: str | None = typer.Option(None, "--target", help=TARGET_HELP),
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
    if base_url is not None and port != 8000:
        raise UsageError("give --base-url or --port, not both")
    server_run = None
    if server:
        from proctor.workloads.loadgen.server_run import live_server_facts

        facts = live_server_facts(server, runs_dir)
        server_run = str(facts["run_id"])
        base_url = base_url or str(facts["base_url"])
        model = model or str(facts["checked_model"])
    if not model:
        raise UsageError("--model is required without --server", hint="pass the served model name")
    # Bad input is refused here, before a supervised run (and its directory) exists.
    Gsm8kConfig(
        base_url=base_url or f"http://127.0.0.1:{port}",
        model=model,
        output_path=Path("lm_eval"),
        num_fewshot=fewshot,
        limit=limit,
        num_concurrent=num_concurrent,
        max_error_rate=max_error_rate,
    )
    if output_dir is None:
        argv = [
            sys.executable,
            "-m",
            "proctor.workloads.gsm8k",
            "--base-url",
            base_url or f"http://127.0.0.1:{port}",
            "--model",
            model,
            "--fewshot",
            str(fewshot),
            "--num-concurrent",
            str(num_concurrent),
        ]
        argv += ["--limit", str(limit)] if limit is not None else []
        argv += ["--chat"] if chat else []
        argv += ["--gen-kwargs", gen_kwargs] if gen_kwargs else []
        argv += ["--data", str(data.resolve())] if data else []
        argv += ["--log-samples"] if log_samples else []
        argv += ["--lm-eval", lm_eval] if lm_eval else []
        argv += ["--max-error-rate", str(max_error_rate)] if max_error_rate else []
        _supervised(argv, name or f"gsm8k-{fewshot}shot", server_run, detach, runs_dir, as_json)
        return
    config = Gsm8kConfig(
        base_url=base_url or f"http://127.0.0.1:{port}",
        model=model,
        output_path=output_dir / "lm_eval",
        num_fewshot=fewshot,
        limit=limit,
        chat=chat,
        num_concurrent=num_concurrent,
        gen_kwargs=gen_kwargs,
        log_samples=log_samples,
        lm_eval=find_lm_eval(lm_eval),
        max_error_rate=max_error_rate,
    )
    result = run_gsm8k(config, output_dir, data_dir=data, echo=not as_json)
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

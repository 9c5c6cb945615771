"""`proctor eval`: accuracy workloads against a running OpenAI-compatible server."""

from __future__ import annotations

from pathlib import Path

import typer

from proctor.cli.output import console, print_json
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
    port: int = typer.Option(8000, "--port", help="Port on 127.0.0.1 when --base-url is unset."),
    model: str = typer.Option(..., "--model", help="Served model name."),
    output_dir: Path = typer.Option(
        Path("gsm8k-out"), "--output-dir", help="Where metrics.json and lm-eval's files go."
    ),
    log_samples: bool = typer.Option(False, "--log-samples", help="Keep lm-eval's samples."),
    lm_eval: str | None = typer.Option(None, "--lm-eval", help="Path of the lm_eval executable."),
    as_json: bool = typer.Option(False, "--json", help="Print metrics.json's metrics as JSON."),
) -> None:
    """Run GSM8K with lm-eval against a server; exit 3 when lm-eval fails or leaves no results."""
    if base_url is not None and port != 8000:
        raise UsageError("give --base-url or --port, not both")
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

"""`proctor offline`: an engine's offline inference (no server) as a supervised run."""

from __future__ import annotations

from pathlib import Path

import typer

from proctor.cli.helptext import RUNS_DIR_HELP
from proctor.cli.jobopts import JobGroup, JobValues, job_command
from proctor.cli.targethelp import TARGET_HELP
from proctor.jobs.offline import OfflineJob
from proctor.jobs.options import validated
from proctor.jobs.submission import Submission

OFFLINE_HELP = """Run an engine's offline inference as a supervised run.

With the engine's entry point (ATOM: atom.examples.simple_inference; vLLM: `vllm bench
throughput`; SGLang: sglang.bench_offline_throughput), words after -- are extra arguments:

    proctor offline --engine atom --model /data/DeepSeek-R1 --tp 8 -- --max-tokens 64

Any command instead, with --cmd (the engine still names the fault patterns and parsing):

    proctor offline --engine vllm --model /data/m --cmd -- python my_offline.py

Before the command starts, the disks holding the model and the weights cache must have
--min-free-disk GiB free (the profile's default: 50 for atom, as ATOM requires). The tokens/s it
prints are parsed into metrics.json (and the store); `proctor drain --offline RUN` watches it.
With --target it runs on that machine (in the synced checkout) and comes back as a local run.

Exit status: 0 ok; 2 fault pattern printed; 3 the command failed; 4 --timeout; 6 unknown;
64 bad usage; 69 not enough disk, or the command or engine is not installed; 130 Ctrl-C.
"""


def offline_job(job: JobValues, words: list[str], config: Path | None) -> OfflineJob:
    """The offline job the options describe, the words after -- its `args`."""
    values = {**job.values, "args": list(words), "config": str(config) if config else None}
    return validated(OfflineJob, values, what="invalid option", hint="see proctor offline --help")


def _offline(
    *,
    job: JobValues,
    words: list[str] = typer.Argument(
        None,
        metavar="[-- EXTRA | CMD]...",
        show_default=False,
        help="After --: extra arguments for the engine's offline entry point (with --cmd: the whole command).",
    ),
    name: str | None = typer.Option(
        None, "--name", "-n", help="Run name (default offline-ENGINE-MODEL)."
    ),
    timeout: str | None = typer.Option(None, "--timeout", help="Time limit, e.g. 30m (exit 4)."),
    env: list[str] = typer.Option(None, "--env", help="NAME=VALUE for the command (repeatable)."),
    key: str | None = typer.Option(
        None, "--key", help="Attach to a live run with this key instead of starting another."
    ),
    gpu_sample: float | None = typer.Option(
        None, "--gpu-sample", help="GPU sampling interval in seconds (0 disables)."
    ),
    detach: bool = typer.Option(False, "--detach", "-d", help="Start the run and print its id."),
    runs_dir: str | None = typer.Option(None, "--runs-dir", help=RUNS_DIR_HELP),
    config: Path | None = typer.Option(None, "--config", help="proctor.toml to use."),
    as_json: bool = typer.Option(
        False, "--json", help="Print the run id, outcome and parsed metrics as JSON."
    ),
    target: str | None = typer.Option(None, "--target", help=TARGET_HELP),
) -> None:
    from proctor.cli.remote import submit_command

    submission = Submission(
        job=offline_job(job, words or [], config),
        name=name,
        key=key,
        detach=detach,
        timeout=timeout,
        answer=as_json,
        env=list(env or []),
        gpu_sample=gpu_sample,
        config=str(config) if config else None,
    )
    submit_command(submission, target, runs_dir=runs_dir, as_json=as_json)


def register(app: typer.Typer) -> None:
    app.command("offline", help=OFFLINE_HELP, context_settings={"allow_interspersed_args": False})(
        job_command(_offline, JobGroup("job", OfflineJob))
    )


__all__ = ["register"]

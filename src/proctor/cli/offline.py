"""`proctor offline`: an engine's offline inference (no server) as a supervised run."""

from __future__ import annotations

import inspect
from pathlib import Path

import typer

from proctor.cli.helptext import RUNS_DIR_HELP
from proctor.cli.jobopts import JobGroup, JobValues, job_command
from proctor.cli.output import print_json
from proctor.jobs.documents import OfflineDocument, read_or_none
from proctor.jobs.offline import OfflineJob
from proctor.jobs.options import validated
from proctor.spec.config import load_config
from proctor.workloads.offline import OfflineRequest, start_offline

OFFLINE_HELP = """Run an engine's offline inference as a supervised run.

With the engine's entry point (ATOM: atom.examples.simple_inference; vLLM: `vllm bench
throughput`; SGLang: sglang.bench_offline_throughput), words after -- are extra arguments:

    proctor offline --engine atom --model /data/DeepSeek-R1 --tp 8 -- --max-tokens 64

Any command instead, with --cmd (the engine still names the fault patterns and parsing):

    proctor offline --engine vllm --model /data/m --cmd -- python my_offline.py

Before the command starts, the disks holding the model and the weights cache must have
--min-free-disk GiB free (the profile's default: 50 for atom, as ATOM requires). The tokens/s it
prints are parsed into metrics.json (and the store); `proctor drain --offline RUN` watches it.

Exit status: 0 ok; 2 fault pattern printed; 3 the command failed; 4 --timeout; 6 unknown;
64 bad usage; 69 not enough disk, or the command or engine is not installed; 130 Ctrl-C.
"""


def _own(name: str, annotation: object, default: object) -> inspect.Parameter:
    return inspect.Parameter(
        name, inspect.Parameter.KEYWORD_ONLY, annotation=annotation, default=default
    )


# The command's own options and argument: how the run goes. Every offline setting is
# OfflineJob's (the words after -- are its `args`).
OFFLINE_OWN = [
    _own(
        "words",
        list[str],
        typer.Argument(
            None,
            metavar="[-- EXTRA | CMD]...",
            show_default=False,
            help="After --: extra arguments for the engine's offline entry point (with --cmd: the whole command).",
        ),
    ),
    _own(
        "name",
        str | None,
        typer.Option(None, "--name", "-n", help="Run name (default offline-ENGINE-MODEL)."),
    ),
    _own(
        "timeout",
        str | None,
        typer.Option(None, "--timeout", help="Time limit, e.g. 30m (exit 4)."),
    ),
    _own(
        "env",
        list[str],
        typer.Option(None, "--env", help="NAME=VALUE for the command (repeatable)."),
    ),
    _own(
        "key",
        str | None,
        typer.Option(
            None, "--key", help="Attach to a live run with this key instead of starting another."
        ),
    ),
    _own(
        "gpu_sample",
        float | None,
        typer.Option(None, "--gpu-sample", help="GPU sampling interval in seconds (0 disables)."),
    ),
    _own(
        "detach",
        bool,
        typer.Option(False, "--detach", "-d", help="Start the run and print its id."),
    ),
    _own("runs_dir", str | None, typer.Option(None, "--runs-dir", help=RUNS_DIR_HELP)),
    _own("config", Path | None, typer.Option(None, "--config", help="proctor.toml to use.")),
    _own(
        "as_json",
        bool,
        typer.Option(False, "--json", help="Print the run id, outcome and parsed metrics as JSON."),
    ),
]


def offline_job(job: JobValues, words: list[str], config: Path | None) -> OfflineJob:
    """The offline job the options describe, the words after -- its `args`."""
    values = {**job.values, "args": list(words), "config": str(config) if config else None}
    return validated(OfflineJob, values, what="invalid option", hint="see proctor offline --help")


def _offline(
    *,
    job: JobValues,
    words: list[str] | None,
    name: str | None,
    timeout: str | None,
    env: list[str] | None,
    key: str | None,
    gpu_sample: float | None,
    detach: bool,
    runs_dir: str | None,
    config: Path | None,
    as_json: bool,
) -> None:
    from proctor.cli.follow import finish, follow
    from proctor.record.schema import load_record
    from proctor.targets.service import guard_start

    request = OfflineRequest(
        job=offline_job(job, words or [], config),
        name=name,
        runs_dir=runs_dir,
        timeout=timeout,
        env=list(env or []),
        key=key,
        detach=detach,
        gpu_sample=gpu_sample,
    )
    interrupts = guard_start()
    started = start_offline(request, load_config(config))
    run = started.run
    interrupts.attach(run)
    if detach:
        if as_json:
            print_json({"run_id": run.run_id, "dir": str(run.path), "attached": started.attached})
        else:
            typer.echo(run.run_id)
        return
    supervised, state = follow(run, "offline", quiet=as_json)
    doc = read_or_none(run.path / "metrics.json")
    offline = doc if isinstance(doc, OfflineDocument) else OfflineDocument.model_validate({})
    record = load_record(run.path)
    if as_json:
        print_json(
            {
                "run_id": run.run_id,
                "dir": str(run.path),
                "outcome": record.outcome if record else None,
                "status": offline.status,
                "metrics": offline.metrics.root,
                "faults": offline.faults,
            }
        )
    finish(supervised, interrupts, state, "offline")


def register(app: typer.Typer) -> None:
    app.command("offline", help=OFFLINE_HELP, context_settings={"allow_interspersed_args": False})(
        job_command(_offline, OFFLINE_OWN, JobGroup("job", OfflineJob))
    )


__all__ = ["register"]

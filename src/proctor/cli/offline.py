"""`proctor offline`: an engine's offline inference (no server) as a supervised run."""

from __future__ import annotations

from pathlib import Path

import typer

from proctor.cli.helptext import RUNS_DIR_HELP
from proctor.cli.output import print_json
from proctor.jobs.documents import OfflineDocument, read_or_none
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


def register(app: typer.Typer) -> None:
    @app.command("offline", help=OFFLINE_HELP, context_settings={"allow_interspersed_args": False})
    def offline(
        words: list[str] = typer.Argument(
            None,
            metavar="[-- EXTRA | CMD]...",
            show_default=False,
            help="After --: extra arguments for the engine's offline entry point (with --cmd: the whole command).",
        ),
        engine: str = typer.Option(
            ...,
            "--engine",
            "-e",
            help="Engine profile: atom, vllm, sglang, transformers or one of yours.",
        ),
        model: str = typer.Option(
            None, "--model", "-m", help="Model path (required unless --cmd)."
        ),
        tp: int = typer.Option(None, "--tp", help="Tensor parallelism."),
        cmd: bool = typer.Option(
            False, "--cmd", help="The words after -- are the whole command, not extra arguments."
        ),
        python: str = typer.Option(
            None, "--python", help="Interpreter that has the engine installed."
        ),
        min_free_disk: float = typer.Option(
            None,
            "--min-free-disk",
            help="GiB that must be free on the model's and the cache's disks (0 disables).",
        ),
        name: str = typer.Option(
            None, "--name", "-n", help="Run name (default offline-ENGINE-MODEL)."
        ),
        timeout: str = typer.Option(None, "--timeout", help="Time limit, e.g. 30m (exit 4)."),
        env: list[str] = typer.Option(
            None, "--env", help="NAME=VALUE for the command (repeatable)."
        ),
        key: str = typer.Option(
            None, "--key", help="Attach to a live run with this key instead of starting another."
        ),
        gpu_sample: float = typer.Option(
            None, "--gpu-sample", help="GPU sampling interval in seconds (0 disables)."
        ),
        detach: bool = typer.Option(
            False, "--detach", "-d", help="Start the run and print its id."
        ),
        runs_dir: str = typer.Option(None, "--runs-dir", help=RUNS_DIR_HELP),
        config: Path = typer.Option(None, "--config", help="proctor.toml to use."),
        as_json: bool = typer.Option(
            False, "--json", help="Print the run id, outcome and parsed metrics as JSON."
        ),
    ) -> None:
        from proctor.cli.follow import finish, follow
        from proctor.record.schema import load_record
        from proctor.targets.service import guard_start

        words = [w for w in (words or [])]
        request = OfflineRequest(
            engine=engine,
            model=model,
            tp=tp,
            extra=[] if cmd else words,
            command=words if cmd else None,
            python=python,
            min_free_disk_gib=min_free_disk,
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
                print_json(
                    {"run_id": run.run_id, "dir": str(run.path), "attached": started.attached}
                )
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


__all__ = ["register"]

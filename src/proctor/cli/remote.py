"""`--target` for run and the workflow commands, and `runs attach|wait` of far runs: thin glue
over proctor.targets (the registry, targets/remote/commands.py); this module only prints.

`--target` on bench/sweep/eval/offline/flow and sweep --server-grid|--file: `submit_command()`
hands the typed submission to `proctor.jobs.submit.submit`, here or far away. serve
start|ready|stop, drain and inspect: `step_command()` hands the typed step (jobs/steps.py) to
`proctor.jobs.step_run.run_step`, here or far away, the same way.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import click

from proctor.cli.output import err_console, print_json, tell_json_error
from proctor.cli.targethelp import RUN_TARGET_HELP, TARGET_HELP
from proctor.results.cost import format_cost
from proctor.source.identity import source_identity
from proctor.spec.config import ProjectConfig
from proctor.spec.plan import RunFlags
from proctor.targets.registry import TargetOptions
from proctor.targets.remote.commands import (
    GroupRun,
    group_exit_status,
    job_from_flags,
    run_far,
    setup_script,
)
from proctor.targets.remote.orchestrate import Completion, RemoteOptions, resume_remote

if TYPE_CHECKING:
    from proctor.jobs.step_run import StepVoice
    from proctor.jobs.steps import AnyStep
    from proctor.jobs.submission import Submission
    from proctor.targets.remote.commands import WorkflowRun
    from proctor.targets.remote.workflow import WorkflowResult


def run_with_target(
    flags: RunFlags,
    spec: TargetOptions,
    config: ProjectConfig,
    runs_dir: Path,
    as_json: bool,
    remote_checkout: str | None = None,
) -> int:
    """`proctor run --target ...` on a far kind: returns the exit code (raising the deciding
    ProctorError)."""
    job = job_from_flags(flags, config)
    identity = source_identity(Path(flags.cwd or ".").resolve())
    options = RemoteOptions(
        existing_checkout=remote_checkout, setup_script=setup_script(config), detach=flags.detach
    )
    done = run_far(spec, job, identity, config, runs_dir, _log_out(as_json), options)
    if done.group is None:
        return report(done.completions[0], as_json)
    return print_group(done, as_json)


def report(completion: Completion, as_json: bool) -> int:
    if as_json:
        print_json(completion.to_dict())
    elif completion.detached:
        err_console.print(
            f"proctor: started remote run {completion.run_id} ({completion.local_dir})"
        )
        sys.stdout.write(f"{completion.run_id}\n")
    else:
        err_console.print(completion.text(), highlight=False, markup=False)
    return completion.exit_status()


def attach(local_dir: Path, *, follow: bool, as_json: bool) -> int:
    """`proctor runs attach|wait ID` for a far run: reconnect, fetch, verify, release."""
    out = _log_out(as_json) if follow else None
    return report(resume_remote(local_dir, out, follow=follow), as_json)


def print_group(done: GroupRun, as_json: bool) -> int:
    if as_json:
        print_json(done.report)
    else:
        for c in done.completions:
            err_console.print(c.text(), highlight=False, markup=False)
        err_console.print(
            f"group {done.group}: {len(done.completions)} runs; report {done.report_path}"
        )
    return group_exit_status(done.completions)


def _log_out(as_json: bool) -> IO[bytes]:
    # With --json, stdout carries only the report; the followed log goes to stderr.
    return sys.stderr.buffer if as_json else sys.stdout.buffer


def print_far(done: WorkflowRun, title: str, as_json: bool, *, print_run: bool = False) -> int:
    """What a command run on a target did (its far result, the runs fetched back); its exit
    code (raising what decides it)."""
    result = done.result
    if result.stderr and not as_json:
        sys.stderr.write(result.stderr)
    if as_json:
        view: dict[str, Any] = {done.view_key: done.view} if done.view_key else {}
        print_json({**result.to_dict(), **view})
        code = result.exit_status()
        far = _far_error(result) if code else None
        if far is not None:
            tell_json_error(*far)
        return code
    if result.completion.detached:
        run_id = result.completion.run_id
        err_console.print(
            f"proctor: submitted {title} as run {run_id} "
            f"({result.completion.local_dir}); `proctor runs wait {run_id}` "
            "waits for its end",
            highlight=False,
            markup=False,
        )
        sys.stdout.write(f"{run_id}\n")
        return result.exit_status()
    if done.text:
        err_console.print(done.text, highlight=False, markup=False)
    if result.direct_exit is None:
        err_console.print(result.completion.text(), highlight=False, markup=False)
    for child in result.children:
        state = (
            "live"
            if child.live
            else (
                f"{child.outcome}, exit {child.exit_code}, "
                + ("verified" if child.verified else "NOT verified")
            )
        )
        err_console.print(
            f"proctor: run {child.run_id}: {state} ({child.local_dir})",
            highlight=False,
            markup=False,
        )
        if child.cost is not None:
            err_console.print(
                f"proctor: run {child.run_id}: {format_cost(child.cost)}",
                highlight=False,
                markup=False,
            )
    if print_run and result.children:
        live = [c.run_id for c in result.children if c.live] or [result.children[0].run_id]
        sys.stdout.write(f"{live[0]}\n")
    return result.exit_status()


def _far_error(result: WorkflowResult) -> tuple[str, str | None] | None:
    """(reason, fix) of a far command that failed: the JSON error it answered with (the far
    proctor's own words), else the job's error (lost, stopped), else its last `proctor:` line."""
    answer = result.answer
    error = answer.get("error") if isinstance(answer, dict) else None
    if isinstance(error, dict) and error.get("reason"):
        fix = error.get("fix")
        return str(error["reason"]), (str(fix) if fix else None)
    if result.completion.error:
        return str(result.completion.error), None
    said = [
        line[len("proctor: ") :]
        for line in result.stderr.splitlines()
        if line.startswith("proctor: ")
    ]
    return (said[-1], None) if said else None


def submit_command(
    submission: Submission, target: str | None, *, runs_dir: str | None, as_json: bool
) -> None:
    """Run a typed job's submission (bench, sweep, eval, offline, flow, server grid) here or on
    `target`, through the one call the library has too (`proctor.jobs.submit.submit`); print
    what it did; exit with its code."""
    from proctor.jobs.submit import Voice, submit

    # A flow's (and a server grid's) progress lines: not under --json, as before.
    quiet = as_json and submission.kind in ("flow", "server-grid")

    def say(line: str) -> None:
        if not quiet:
            err_console.print(line, markup=False, highlight=False)

    def echo(line: str) -> None:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()

    if target is None:
        log = None if as_json else sys.stdout.buffer
        voice = Voice(say=say, echo=echo, answer=print_json, log=log)
        code = submit(submission, runs_dir=runs_dir, voice=voice).status()
    else:
        # Under --json the far command answers in JSON too: its error comes back as one
        # (reason, fix), said in this command's JSON error (_far_error).
        done = submit(submission, target, runs_dir=runs_dir, voice=Voice(log=_log_out(as_json)))
        assert done.far is not None
        # Detached: the run's id on stdout, as a detached run here prints it.
        code = print_far(done.far, submission.title(), as_json, print_run=submission.detach)
    if code:
        raise click.exceptions.Exit(code)


def step_voice(as_json: bool) -> StepVoice:
    """How a step run here speaks through this CLI: its lines on stderr, its answer on stdout
    (--json: one document), a followed far log on stdout (stderr under --json)."""
    from proctor.cli.output import console, print_evidence
    from proctor.cli.serve import print_applied
    from proctor.jobs.step_run import StepVoice

    def say(line: str) -> None:
        err_console.print(line, highlight=False, markup=False)

    def echo(line: str) -> None:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()

    def row(row: dict[str, Any]) -> None:
        console.print({k: str(v) for k, v in row.items()})

    return StepVoice(
        say=say,
        echo=echo,
        answer=print_json,
        log=_log_out(as_json),
        evidence=print_evidence,
        applied=print_applied,
        row=row,
    )


def step_command(
    step: AnyStep,
    target: str | None,
    *,
    runs_dir: str | None,
    as_json: bool,
    target_flags: dict[str, Any] | None = None,
    config: ProjectConfig | None = None,
) -> None:
    """Run a server workflow step (serve start|ready|stop, drain, inspect) here or on
    `target` (or where `target_flags` say: Slurm's --nodes ...), through the one call the
    library has too (`proctor.jobs.step_run.run_step`); print what it did; exit with its code."""
    from proctor.jobs.step_run import run_step

    done = run_step(
        step,
        target,
        answer=as_json,
        runs_dir=runs_dir,
        voice=step_voice(as_json),
        target_flags=target_flags,
        config=config,
    )
    if done.far is not None:
        code = print_far(done.far, step.title, as_json, print_run=step.leaves_live)
    else:
        code = done.exit_code
    if code:
        raise click.exceptions.Exit(code)


__all__ = [
    "RUN_TARGET_HELP",
    "TARGET_HELP",
    "attach",
    "print_far",
    "print_group",
    "report",
    "run_with_target",
    "step_command",
    "step_voice",
    "submit_command",
]

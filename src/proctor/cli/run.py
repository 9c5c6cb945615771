"""`proctor run` and `proctor plan`: run any command as a supervised, evidenced run."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from proctor.cli.helptext import JSON_HELP
from proctor.cli.output import print_json, say
from proctor.errors import ExitCode
from proctor.record.rundir import RunDir
from proctor.record.schema import health_of, load_record
from proctor.spec.config import ProjectConfig, load_config
from proctor.spec.plan import RunFlags, RunPlan, resolve_run_plan
from proctor.supervise.launch import Started
from proctor.targets.base import FAR
from proctor.targets.registry import (
    TargetOptions,
    kind_named,
    open_planner,
    target_options,
)
from proctor.targets.service import (
    Interrupts,
    SupervisedRun,
    exit_for_state,
    summary_line,
)

if TYPE_CHECKING:
    import typer

    from proctor.jobs.command import CommandJob

# This module imports no typer, click or rich: `proctor run -- CMD` is answered through
# `run_here` by the console script (cli/entry.py) without them; `register` imports typer.

RUN_HELP = """Run CMD as a supervised run and pass its exit status through.

Leaves a run directory (under logs/ by default) with the combined log, exit_code, record.json,
gpu.csv and manifest.sha256. The command runs under a wrapper in its own session: killing this
proctor does not stop it, and `proctor runs wait ID` still gets its status.

Exit status: the command's own; 4 if --timeout stopped it; 6 if no status could be established;
130 on Ctrl-C (the run is stopped first); 64 bad usage; 69 command not found, or the GPU
preflight failed (the run is recorded, not started; --allow-unhealthy-gpu).
"""


def command_job(command: list[str] | None, values: Mapping[str, Any]) -> CommandJob:
    """The CommandJob of `proctor run`: CMD and the job's options the user set (`values`, by
    field name; None or [] is not given), validated (a bad one is exit 64 naming it)."""
    from proctor.jobs.command import CommandJob, command_fields
    from proctor.jobs.options import validated

    return validated(
        CommandJob,
        {**command_fields(values), "argv": list(command or [])},
        what="invalid option",
        hint="see proctor run --help",
    )


def print_health(run: RunDir) -> None:
    """The GPU preflight's one line on stderr (docs/gpu-health.md)."""
    from proctor.monitors.gpu_health import one_line

    health = health_of(run.path)
    if health is not None:
        say(f"proctor: {one_line(health)}")


def plan_view(plan: RunPlan) -> dict[str, Any]:
    redactor = plan.redactor()
    return {
        "argv": redactor.argv(plan.argv),
        "config": plan.config_path,
        "options": plan.options(redactor),
    }


def print_plan(plan: RunPlan, as_json: bool, target: dict[str, Any] | None = None) -> None:
    view = plan_view(plan)
    if target:
        view["target"] = target  # a target with options of its own (slurm: nodes, time ...)
    if as_json:
        print_json(view)
        return
    from rich.table import Table

    from proctor.cli.output import console

    table = Table(title="proctor run plan", show_lines=False)
    table.add_column("option")
    table.add_column("value")
    table.add_column("from")
    table.add_row("command", " ".join(view["argv"]), "flag")
    for option, value in view["options"].items():
        table.add_row(option, str(value["value"]), str(value["origin"]))
    for option, value in (target or {}).items():
        known = isinstance(value, dict) and "value" in value
        table.add_row(
            f"target {option}",
            str(value["value"] if known else value),
            str(value.get("origin", "")) if known else "target",
        )
    console.print(table)


def _follow_started(
    started: Started,
    *,
    key: str | None,
    detach: bool,
    as_json: bool,
    interrupts: Interrupts,
    facts: dict[str, Any] | None = None,
) -> int:
    """Report a started run; in the foreground follow it. Its exit code.

    With --json, stdout holds the JSON document only: the command's output (always in the
    run's log) is copied to stderr instead.
    """
    run = started.run
    info = {
        "run_id": run.run_id,
        "dir": str(run.path),
        "log": str(run.log_path()),
        "attached": started.attached,
        **(facts or {}),
        "gpu_health": health_of(run.path),
    }
    if detach:
        if as_json:
            print_json(info)
        else:
            verb = "attached to running" if started.attached else "started"
            say(f"proctor: {verb} run {run.run_id} ({run.path})")
            sys.stdout.write(f"{run.run_id}\n")
            sys.stdout.flush()
        interrupts.raise_if_hit(run)
        return 0
    if started.attached:
        say(f"proctor: a run with key {key!r} is alive: attaching to {run.run_id}")
    else:
        say(f"proctor: run {run.run_id} -> {run.path}")
        print_health(run)
    supervised = SupervisedRun(run)
    state = supervised.follow_to_end(sys.stderr.buffer if as_json else sys.stdout.buffer)
    if as_json:
        record = load_record(run.path)
        print_json(
            {
                **info,
                "state": state.state,
                "exit": state.exit.model_dump() if state.exit else None,
                "outcome": record.outcome if record else None,
            }
        )
    else:
        say(f"proctor: {supervised.summary(state)}")
    return interrupts.exit_code(run, state)


def run_here(
    flags: RunFlags,
    project: ProjectConfig,
    spec: TargetOptions,
    *,
    dry_run: bool = False,
    as_json: bool = False,
) -> int:
    """`proctor run` on a target that runs the command from here (local, Slurm): its plan,
    printed (dry_run) or started and, in the foreground, followed. The exit code."""
    plan = resolve_run_plan(flags, project)
    planned = open_planner(spec, plan, project)
    if dry_run:
        print_plan(plan, as_json, planned.describe().details)
        planned.close()
        return 0
    # Stop signals are held while the run starts (LocalTarget.start_plan) and noted by the
    # handler: the run they find is stopped as soon as it is known (attach), never orphaned.
    with Interrupts() as interrupts:
        try:
            started = planned.start_plan(plan)
        finally:
            planned.close()  # a connection to a login host is not needed to follow
        interrupts.attach(started.run)
        return _follow_started(
            started,
            key=flags.key,
            detach=flags.detach,
            as_json=as_json,
            interrupts=interrupts,
            facts=planned.run_facts(started.run),
        )


def _run_far(
    flags: RunFlags,
    spec: TargetOptions,
    project: ProjectConfig,
    runs_dir: str | None,
    dry_run: bool,
    as_json: bool,
    remote_checkout: str | None,
) -> int:
    """`proctor run --target X` where X's runs live far away: its exit code."""
    from proctor.cli.remote import run_with_target
    from proctor.spec.plan import resolve_runs_dir
    from proctor.targets.remote.commands import job_from_flags

    if dry_run:
        job = job_from_flags(flags, project)
        print_json({"job": job.public(), "target": spec.model_dump(mode="json")})
        return 0
    where = Path(resolve_runs_dir(runs_dir, project).value)
    return run_with_target(flags, spec, project, where, as_json, remote_checkout)


def register(app: typer.Typer) -> None:
    import typer

    from proctor.cli.helptext import RUNS_DIR_HELP
    from proctor.cli.jobopts import JobGroup, job_command
    from proctor.jobs.command import CommandJob, run_flags

    # The job's options (name, env, timeout, grace, gpu sample, key, cwd, GPU preflight) are
    # CommandJob's fields (jobs/command.py); what is declared here is run control.
    # `job: Any`: annotations are read in this module's globals, where typer's helpers are not
    # imported (the lean path must not import them); it is a JobValues.
    def run_command(
        job: Any,
        command: list[str] = typer.Argument(
            None,
            metavar="-- CMD [ARGS]...",
            show_default=False,
            help="The command to run and its arguments, after -- (proctor's options go before).",
        ),
        runs_dir: str = typer.Option(
            None,
            "--runs-dir",
            help="Where run directories go (env PROCTOR_RUNS_DIR; default ./logs at the project root).",
        ),
        detach: bool = typer.Option(
            False, "--detach", "-d", help="Start and return the run id at once."
        ),
        dry_run: bool = typer.Option(
            False, "--dry-run", help="Print the resolved plan (with origins) and run nothing."
        ),
        config: Path = typer.Option(
            None, "--config", help="proctor.toml to use (default: found at the project root)."
        ),
        as_json: bool = typer.Option(
            False,
            "--json",
            help="Machine-readable output: stdout holds the JSON only; the command's output goes to stderr (and the log).",
        ),
        target: str = typer.Option(
            None,
            "--target",
            help="local (default), ssh://user@host[:port], runpod, or slurm://[user@]login-host (docs/remote.md, docs/slurm.md).",
        ),
        identity_file: str = typer.Option(None, "--identity-file", help="SSH private key file."),
        known_hosts: str = typer.Option(
            None,
            "--known-hosts",
            help="known_hosts file to verify host keys (default ~/.ssh/known_hosts).",
        ),
        insecure_accept_host_key: bool = typer.Option(
            False, "--insecure-accept-host-key", help="Do not verify the SSH host key."
        ),
        jump: str = typer.Option(None, "--jump", help="SSH jump host, ssh://user@host[:port]."),
        workspace: str = typer.Option(
            None,
            "--workspace",
            help="Persistent workspace on the target (default /workspace, else $HOME).",
        ),
        remote_python: str = typer.Option(
            None,
            "--remote-python",
            help="Python on the target (default <ws>/proctor/venv/bin/python, else python3).",
        ),
        remote_checkout: str = typer.Option(
            None,
            "--remote-checkout",
            help="Run in this existing checkout on the target (inspected and verified first).",
        ),
        pod: list[str] = typer.Option(None, "--pod", help="Reuse this Runpod pod (repeatable)."),
        pods: int = typer.Option(None, "--pods", help="Run the same job on N new pods at once."),
        gpu_type: str = typer.Option(None, "--gpu-type", help="Runpod GPU type id."),
        gpu_count: int = typer.Option(None, "--gpu-count", help="GPUs per pod."),
        image: str = typer.Option(None, "--image", help="Pod image (must run sshd)."),
        max_time: str = typer.Option(
            None, "--max-time", help="Pod time budget (controller and on-pod watchdog)."
        ),
        max_cost: float = typer.Option(None, "--max-cost", help="Pod cost budget in credits."),
        keep: bool = typer.Option(False, "--keep", help="Leave the pod running afterwards."),
        terminate: bool = typer.Option(
            False, "--terminate", help="Terminate the pod afterwards (needs --allow-terminate)."
        ),
        allow_terminate: bool = typer.Option(
            False, "--allow-terminate", help="Runpod: authorise terminating (deleting) the pod."
        ),
        allow_create_volume: bool = typer.Option(
            False, "--allow-create-volume", help="Runpod: authorise creating a network volume."
        ),
        allow_other_volume: bool = typer.Option(
            False,
            "--allow-other-volume",
            help="Runpod: authorise using a volume not named for the project.",
        ),
        allow_gpu_substitution: bool = typer.Option(
            False,
            "--allow-gpu-substitution",
            help="Runpod: authorise another GPU type than asked (and the config's fallbacks).",
        ),
        allow_more_capacity: bool = typer.Option(
            False,
            "--allow-more-capacity",
            help="Runpod: authorise a pod with more GPUs than asked.",
        ),
        api_url: str = typer.Option(
            None, "--api-url", envvar="PROCTOR_RUNPOD_API_URL", help="Runpod API base URL."
        ),
        nodes: int = typer.Option(
            None, "--nodes", "-N", help="Slurm: nodes (default 1 or [slurm] nodes)."
        ),
        gpus_per_node: int = typer.Option(
            None, "--gpus-per-node", help="Slurm: GPUs per node (default 0 or [slurm])."
        ),
        partition: str = typer.Option(
            None, "--partition", help="Slurm: partition (default [slurm] partition)."
        ),
        time_limit: str = typer.Option(
            None, "--time", help="Slurm: time limit, e.g. 30m, 2h, 1:30:00 (default: --timeout)."
        ),
    ) -> None:
        flags = run_flags(command_job(command, job.set_by_user()), runs_dir=runs_dir, detach=detach)
        project = load_config(config)
        spec = target_options(
            target,
            project,
            identity_file=identity_file,
            known_hosts=known_hosts,
            insecure_accept_host_key=insecure_accept_host_key,
            jump=jump,
            workspace=workspace,
            remote_python=remote_python,
            reuse_pods=list(pod or []),
            pods=pods,
            gpu_type=gpu_type,
            gpu_count=gpu_count,
            image=image,
            max_time=max_time,
            max_cost=max_cost,
            keep=keep,
            terminate=terminate,
            allow_terminate=allow_terminate,
            allow_create_volume=allow_create_volume,
            allow_other_volume=allow_other_volume,
            allow_gpu_substitution=allow_gpu_substitution,
            allow_more_capacity=allow_more_capacity,
            api_url=api_url,
            nodes=nodes,
            gpus_per_node=gpus_per_node,
            partition=partition,
            time_limit=time_limit,
        )
        if FAR in kind_named(spec.kind).capabilities:
            code = _run_far(flags, spec, project, runs_dir, dry_run, as_json, remote_checkout)
            if code:
                raise typer.Exit(code)
            return
        code = run_here(flags, project, spec, dry_run=dry_run, as_json=as_json)
        if code:
            raise typer.Exit(code)

    app.command("run", help=RUN_HELP, context_settings={"allow_interspersed_args": False})(
        _job_first(job_command(run_command, JobGroup("job", CommandJob)))
    )

    def plan_command(
        job: Any,
        command: list[str] = typer.Argument(
            None,
            metavar="-- CMD [ARGS]...",
            help="The command `proctor run` would run, after -- (as for `proctor run`).",
        ),
        runs_dir: str = typer.Option(None, "--runs-dir", help=RUNS_DIR_HELP),
        config: Path = typer.Option(
            None, "--config", help="proctor.toml to use (default: found at the project root)."
        ),
        as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
    ) -> None:
        """Print what `proctor run` would run, with each value's origin."""
        flags = run_flags(command_job(command, job.set_by_user()), runs_dir=runs_dir)
        print_plan(resolve_run_plan(flags, load_config(config)), as_json)

    app.command("plan", context_settings={"allow_interspersed_args": False})(
        _job_first(job_command(plan_command, JobGroup("job", CommandJob)))
    )


def _job_first(command: Any) -> Any:
    """The command with the job's options listed first in its help, after CMD (then its run
    control and the target's options)."""
    import inspect

    from proctor.jobs.command import CommandJob

    params = list(inspect.signature(command).parameters.values())
    job = [p for p in params if p.name in CommandJob.model_fields]
    rest = [p for p in params if p.name not in CommandJob.model_fields]
    command.__signature__ = inspect.Signature([*rest[:1], *job, *rest[1:]])
    return command


__all__ = ["ExitCode", "exit_for_state", "register", "summary_line"]

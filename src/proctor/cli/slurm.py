"""`proctor slurm ...`: multi-node runs through Slurm, and a look at the cluster.

`proctor slurm run --target slurm://local --nodes 2 -- CMD` submits CMD under the supervising
wrapper on every node and follows it like `proctor run`; the group run directory then works
with every `proctor runs` command (`runs stop` scancels the job).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import typer

from proctor.cli.helptext import (
    EXTRA_ENGINE_HELP,
    REF_FORMS,
)
from proctor.cli.jobopts import JobGroup, JobValues, job_command
from proctor.cli.output import console, err_console, print_json
from proctor.cli.run import command_job
from proctor.errors import Interrupted, TargetUnavailable
from proctor.jobs.command import CommandJob
from proctor.jobs.serve import ServeJob
from proctor.jobs.steps import ServeStartStep
from proctor.record.schema import SlurmRecord, load_record
from proctor.spec.config import ProjectConfig, load_config
from proctor.spec.plan import RunFlags, resolve_run_plan, resolve_runs_dir
from proctor.supervise.refs import SLURM_KINDS, resolve_run
from proctor.targets.service import SupervisedRun, guard_start

app = typer.Typer(help="Multi-node runs on a Slurm cluster (sbatch + srun).", no_args_is_help=True)

TargetOpt = typer.Option(None, "--target", help="slurm://[user@]login-host, or slurm://local.")
JsonOpt = typer.Option(False, "--json", help="Machine-readable output.")
RunsDirOpt = typer.Option(None, "--runs-dir", help="Runs directory (env PROCTOR_RUNS_DIR).")


IdentityOpt = typer.Option(None, "--identity-file", help="SSH key file for the login host.")
KnownHostsOpt = typer.Option(None, "--known-hosts", help="known_hosts file for the login host.")
InsecureOpt = typer.Option(False, "--insecure-accept-host-key", help="Skip host-key checks.")
JumpOpt = typer.Option(None, "--jump", help="SSH jump host, ssh://user@host[:port].")


def slurm_flags(
    target: str | None,
    nodes: int | None = None,
    gpus_per_node: int | None = None,
    partition: str | None = None,
    time_limit: str | None = None,
    workspace: str | None = None,
    python: str | None = None,
    identity_file: str | None = None,
    known_hosts: str | None = None,
    insecure_accept_host_key: bool = False,
    jump: str | None = None,
) -> Any:
    from proctor.targets.slurm.options import SlurmFlags

    # `--target slurm` alone takes the login host from [slurm] target.
    return SlurmFlags(
        None if target == "slurm" else target,
        nodes,
        gpus_per_node,
        partition,
        time_limit,
        workspace,
        python,
        identity_file,
        known_hosts,
        insecure_accept_host_key,
        jump,
    )


def run_on_slurm(
    flags: RunFlags, sflags: Any, project: ProjectConfig, *, as_json: bool, dry_run: bool
) -> None:
    """Submit a run through Slurm and follow it (or return its id with --detach): what both
    `proctor slurm run` and `proctor run --target slurm://...` do."""
    from proctor.targets.slurm.options import resolve_slurm_options
    from proctor.targets.slurm.target import SlurmTarget

    plan = resolve_run_plan(flags, project)
    options = resolve_slurm_options(sflags, project, timeout_s=plan.timeout_s.value)
    if dry_run:
        print_json(
            {
                "argv": plan.redactor().argv(plan.argv),
                "slurm": options.as_dict(),
                "options": plan.options(plan.redactor()),
            }
        )
        return
    target = SlurmTarget(options, runs_dir=Path(plan.runs_dir.value))
    interrupts = guard_start()
    try:
        started = target.start_plan(plan)
    finally:
        target.close()
    run = started.run
    interrupts.attach(run)
    meta = run.read_json("slurm.json") or {}
    info = {
        "run_id": run.run_id,
        "dir": str(run.path),
        "log": str(run.log_path()),
        "job_id": meta.get("job_id"),
        "attached": started.attached,
    }
    if flags.detach:
        if as_json:
            print_json(info)
        else:
            err_console.print(f"proctor: submitted Slurm job {info['job_id']} as run {run.run_id}")
            typer.echo(run.run_id)
        return
    err_console.print(
        f"proctor: Slurm job {info['job_id']}, run {run.run_id} -> {run.path}", highlight=False
    )
    # The tracker keeps the group's local run directory: follow it through the target.
    supervised = SupervisedRun(run, target)
    state = supervised.follow_to_end(sys.stdout.buffer)
    record = load_record(run.path)
    group = record if isinstance(record, SlurmRecord) else None
    if as_json:
        print_json(
            {
                **info,
                "state": state.state,
                "outcome": record.outcome if record else None,
                "exit": state.exit.model_dump() if state.exit else None,
                "reason": group.reason if group else None,
                "nodes": group.nodes if group else None,
            }
        )
    else:
        err_console.print(f"proctor: {supervised.summary(state)}", highlight=False)
        if group and group.reason:
            err_console.print(f"proctor: {group.reason}", highlight=False)
    if interrupts.hit:
        raise Interrupted(f"run {run.run_id} stopped on interrupt (job {info['job_id']} cancelled)")
    code = supervised.exit_code(state)
    if code:
        raise typer.Exit(code)


def run_command(
    *,
    job: JobValues,
    command: list[str] = typer.Argument(
        None,
        metavar="-- CMD [ARGS]...",
        show_default=False,
        help="The command to run on every node and its arguments, after --.",
    ),
    target: str = TargetOpt,
    nodes: int = typer.Option(None, "--nodes", "-N", help="Nodes (default 1 or [slurm] nodes)."),
    gpus_per_node: int = typer.Option(None, "--gpus-per-node", help="GPUs per node (default 0)."),
    partition: str = typer.Option(None, "--partition", "-p", help="Slurm partition."),
    time_limit: str = typer.Option(None, "--time", help="Slurm time limit: 30m, 2h, 90, 1:30:00."),
    workspace: str = typer.Option(None, "--workspace", help="Shared workspace on the cluster."),
    python: str = typer.Option(None, "--python", help="Python with proctor on the nodes."),
    identity_file: str = IdentityOpt,
    known_hosts: str = KnownHostsOpt,
    insecure_accept_host_key: bool = InsecureOpt,
    jump: str = JumpOpt,
    runs_dir: str = RunsDirOpt,
    detach: bool = typer.Option(False, "--detach", "-d", help="Submit and return the run id."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the resolved options only."),
    config: Path = typer.Option(None, "--config", help="proctor.toml to use."),
    as_json: bool = JsonOpt,
) -> None:
    """Run CMD on N nodes under Slurm, one supervised run per node.

    The exact source is shipped. The job's options are `proctor run`'s (CommandJob): a
    --timeout is proctor's own limit on each node.

    Exit status: as `proctor run`; 4 if Slurm's or proctor's time limit ended it; 2 if a node
    failed; 6 if no status could be established; 69 cluster unavailable.
    """
    from proctor.jobs.command import run_flags

    project = load_config(config)
    flags = run_flags(command_job(command, job.set_by_user()), runs_dir=runs_dir, detach=detach)
    sflags = slurm_flags(
        target,
        nodes,
        gpus_per_node,
        partition,
        time_limit,
        workspace,
        python,
        identity_file,
        known_hosts,
        insecure_accept_host_key,
        jump,
    )
    run_on_slurm(flags, sflags, project, as_json=as_json, dry_run=dry_run)


# The job's options (name, env, timeout, grace, gpu sample, key, cwd, GPU preflight) are
# CommandJob's fields, as `proctor run`'s are; what is declared above is Slurm and run control.
app.command("run", context_settings={"allow_interspersed_args": False})(
    job_command(run_command, JobGroup("job", CommandJob))
)


def serve(
    *,
    job: JobValues,
    step: JobValues,
    target: str = TargetOpt,
    nodes: int = typer.Option(None, "--nodes", "-N", help="Nodes (default 1 or [slurm] nodes)."),
    gpus_per_node: int = typer.Option(
        None, "--gpus-per-node", help="GPUs per node (default 0 or [slurm])."
    ),
    partition: str = typer.Option(None, "--partition", help="Slurm partition."),
    time_limit: str = typer.Option(None, "--time", help="Slurm time limit: 30m, 2h, 1:30:00."),
    workspace: str = typer.Option(None, "--workspace", help="Shared workspace on the cluster."),
    node_python: str = typer.Option(
        None, "--node-python", help="Python with proctor on the nodes."
    ),
    identity_file: str = IdentityOpt,
    known_hosts: str = KnownHostsOpt,
    insecure_accept_host_key: bool = InsecureOpt,
    jump: str = JumpOpt,
    runs_dir: str = RunsDirOpt,
    config: Path = typer.Option(None, "--config", help="proctor.toml to use."),
    extra: list[str] = typer.Argument(
        None, metavar="[-- EXTRA ENGINE ARGS]", help=EXTRA_ENGINE_HELP
    ),
    as_json: bool = JsonOpt,
) -> None:
    """Start an inference server on a Slurm allocation.

    Node 0 serves HTTP on every interface, the other nodes join it per the engine profile's
    multi-node launch. Returns the run id once the head node is known; then `proctor serve
    ready RUN`, `proctor drain RUN`, `proctor serve stop RUN`. The same step as `proctor serve
    start --target slurm://...` (ServeStartStep), with the cluster's options."""
    from proctor.cli.remote import step_command
    from proctor.cli.serve import serve_job
    from proctor.jobs.options import validated

    server = serve_job(job, extra or [], what="slurm serve")
    started = validated(
        ServeStartStep,
        {**step.values, "server": server},
        what="invalid option",
        hint="see --help",
    )
    machine = {
        "nodes": nodes,
        "gpus_per_node": gpus_per_node,
        "partition": partition,
        "time_limit": time_limit,
        "workspace": workspace,
        "remote_python": node_python,
        "identity_file": identity_file,
        "known_hosts": known_hosts,
        "insecure_accept_host_key": insecure_accept_host_key,
        "jump": jump,
    }
    step_command(
        started,
        target or "slurm",
        runs_dir=runs_dir,
        as_json=as_json,
        target_flags=machine,
        config=load_config(config),
    )


app.command("serve", context_settings={"allow_interspersed_args": False})(
    job_command(serve, JobGroup("job", ServeJob, skip=("host",)), JobGroup("step", ServeStartStep))
)


@app.command("stop")
def stop(
    ref: str = typer.Argument(..., help="The Slurm run: " + REF_FORMS + "."),
    runs_dir: str = RunsDirOpt,
) -> None:
    """Cancel a Slurm run's job (scancel, through its tracker).

    The tracker records the outcome."""
    from proctor.targets.slurm.target import SlurmTarget

    run = resolve_run(Path(resolve_runs_dir(runs_dir, load_config()).value), ref, SLURM_KINDS)
    sent = SlurmTarget.stop_run(run)
    err_console.print(f"proctor: {'stop sent to' if sent else 'nothing to stop in'} {run.run_id}")


@app.command("track")
def track(
    ref: str = typer.Argument(..., help="The Slurm run: " + REF_FORMS + "."),
    runs_dir: str = RunsDirOpt,
) -> None:
    """Resume tracking a Slurm run whose tracker is gone (idempotent)."""
    from proctor.record.status import is_alive, read_wrapper_ref
    from proctor.targets.slurm.target import start_tracker

    run = resolve_run(Path(resolve_runs_dir(runs_dir, load_config()).value), ref, SLURM_KINDS)
    if run.exit_code_path.exists() or is_alive(read_wrapper_ref(run)):
        err_console.print(f"proctor: run {run.run_id} is finished or already tracked")
        return
    run.wrapper_pid_path.unlink(missing_ok=True)
    start_tracker(run)
    err_console.print(f"proctor: tracking run {run.run_id} again")


@app.command("status")
def status(
    target: str = TargetOpt,
    identity_file: str = IdentityOpt,
    known_hosts: str = KnownHostsOpt,
    insecure_accept_host_key: bool = InsecureOpt,
    jump: str = JumpOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Partitions and nodes as `sinfo` sees them."""
    from proctor.targets.slurm.options import resolve_slurm_options
    from proctor.targets.slurm.target import login_for

    project = load_config()
    sflags = slurm_flags(target or ("slurm://local" if not project.table("slurm") else None))
    sflags.identity_file, sflags.known_hosts, sflags.jump = identity_file, known_hosts, jump
    sflags.insecure_accept_host_key = insecure_accept_host_key
    options = resolve_slurm_options(sflags, project)
    login = login_for(options.target, options.ssh, options.workspace, options.python)
    result = login.run(["sinfo", "-h", "-N", "-o", "%N|%P|%t|%c|%G"])
    if result.returncode != 0:
        raise TargetUnavailable(
            f"sinfo failed: {result.first_error_line()}",
            hint="check SLURM_CONF and that slurmctld is up",
        )
    rows: list[dict[str, Any]] = []
    for line in result.stdout.splitlines():
        parts = line.split("|")
        if len(parts) == 5:
            rows.append(
                dict(zip(("node", "partition", "state", "cpus", "gres"), parts, strict=True))
            )
    if as_json:
        print_json(rows)
        return
    for row in rows:
        console.print(
            f"{row['node']:<12} {row['partition']:<10} {row['state']:<8} "
            f"cpus={row['cpus']} gres={row['gres']}"
        )


def main(argv: list[str] | None = None) -> int:
    """`python -m proctor.cli.slurm ...` until the group is mounted in the root CLI."""
    from proctor.cli import groups
    from proctor.cli import main as root

    if not any(entry[0] == "slurm" for entry in groups.GROUPS):
        root.app.add_typer(app, name="slurm")
    return root.main(argv)


if __name__ == "__main__":
    sys.exit(main())

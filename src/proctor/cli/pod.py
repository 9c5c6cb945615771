"""`proctor pod`: list and control Runpod pods by hand, with the same guards as a run.

Stop is verified through the API (exit 69 if the pod does not reach EXITED); terminate needs
--allow-terminate (exit 77 otherwise, and nothing is sent). The API key comes from
RUNPOD_API_KEY or ~/.runpod/config.toml, never from a flag (it would show in process listings).
"""

from __future__ import annotations

import time
from typing import Any

import typer
from rich.table import Table

from proctor.cli.output import console, print_json
from proctor.errors import TargetUnavailable
from proctor.spec.durations import parse_duration
from proctor.targets.runpod.client import API_URL_ENV, RunpodClient
from proctor.targets.runpod.models import Pod
from proctor.targets.runpod.pods import FinalState, release, wait_ssh
from proctor.targets.runpod.retry import poll

app = typer.Typer(
    help="List and control Runpod pods, each change verified.",
    no_args_is_help=True,
)

_API_URL = typer.Option(
    None,
    "--api-url",
    envvar=API_URL_ENV,
    help="Runpod REST v1 base URL (default https://rest.runpod.io/v1).",
)
_JSON = typer.Option(False, "--json", help="Print JSON for automation.")
_TIMEOUT = typer.Option(
    "180", "--timeout", help="How long to wait for the verified final state (180, 3m, 1h)."
)


def _seconds(timeout: str) -> float:
    """--timeout as every duration reads (nan, inf, negative, over 366 days: 64), before any
    request: a deadline of nan or inf would wait for ever for a state the pod never reaches."""
    return parse_duration(timeout, option="--timeout")


def _client(api_url: str | None) -> RunpodClient:
    return RunpodClient(base_url=api_url)


def _endpoint(pod: Pod) -> str:
    return f"{pod.publicIp}:{pod.ssh_port}" if pod.publicIp and pod.ssh_port else "-"


def _pod_table(pods: list[Pod]) -> Table:
    table = Table("id", "name", "status", "gpu", "count", "$/hr", "ssh", "volume")
    for pod in pods:
        volume = pod.networkVolume.name if pod.networkVolume else None
        table.add_row(
            pod.id,
            pod.name or "",
            pod.desiredStatus or "?",
            pod.gpu_name or "-",
            str(pod.gpu_count if pod.gpu_count is not None else "-"),
            f"{pod.costPerHr:.2f}" if pod.costPerHr is not None else "-",
            _endpoint(pod),
            f"{volume} @ {pod.volumeMountPath}" if volume else "-",
        )
    return table


def _release(
    pod_id: str,
    api_url: str | None,
    as_json: bool,
    *,
    timeout_s: float,
    terminate: bool = False,
    allow_terminate: bool = False,
) -> None:
    """Stop (or terminate) the pod, verify its final state and say so."""
    with _client(api_url) as client:
        states = release(
            client,
            [pod_id],
            terminate=terminate,
            allow_terminate=allow_terminate,
            timeout_s=timeout_s,
        )
    _print_states(states, as_json)


def _print_states(states: list[FinalState], as_json: bool) -> None:
    if as_json:
        print_json({"pods": [s.to_record() for s in states]})
        return
    for s in states:
        console.print(f"pod {s.pod_id}: {s.action}, verified {s.desired_status or 'gone'}")


@app.command("list")
def list_pods(
    status: str | None = typer.Option(
        None, "--status", help="Only pods in this state (RUNNING, EXITED, TERMINATED)."
    ),
    api_url: str | None = _API_URL,
    as_json: bool = _JSON,
) -> None:
    """List your pods."""
    with _client(api_url) as client:
        pods = client.list_pods(desired_status=status.upper() if status else None)
    if as_json:
        print_json({"pods": [p.to_record() for p in pods]})
    elif pods:
        console.print(_pod_table(pods))
    else:
        console.print("no pods")


@app.command("status")
def status(
    pod_id: str = typer.Argument(..., help="POD_ID, as `proctor pod list` shows it."),
    api_url: str | None = _API_URL,
    as_json: bool = _JSON,
) -> None:
    """Show one pod as the API reports it."""
    with _client(api_url) as client:
        pod = client.get_pod(pod_id)
    if as_json:
        print_json(pod.to_record())
    else:
        console.print(_pod_table([pod]))


@app.command("stop")
def stop(
    pod_id: str = typer.Argument(..., help="POD_ID, as `proctor pod list` shows it."),
    timeout: str = _TIMEOUT,
    api_url: str | None = _API_URL,
    as_json: bool = _JSON,
) -> None:
    """Stop a pod (keeps its volume) and verify it reached EXITED."""
    _release(pod_id, api_url, as_json, timeout_s=_seconds(timeout))


@app.command("terminate")
def terminate(
    pod_id: str = typer.Argument(..., help="POD_ID, as `proctor pod list` shows it."),
    allow_terminate: bool = typer.Option(
        False, "--allow-terminate", help="Authorise deleting the pod and its container disk."
    ),
    timeout: str = _TIMEOUT,
    api_url: str | None = _API_URL,
    as_json: bool = _JSON,
) -> None:
    """Terminate (delete) a pod; needs --allow-terminate.

    The pod is verified gone afterwards."""
    _release(
        pod_id,
        api_url,
        as_json,
        terminate=True,
        allow_terminate=allow_terminate,
        timeout_s=_seconds(timeout),
    )


@app.command("start")
def start(
    pod_id: str = typer.Argument(..., help="POD_ID, as `proctor pod list` shows it."),
    wait_for_ssh: bool = typer.Option(
        False, "--wait-ssh", help="Also wait for a public IP and port 22 mapping."
    ),
    timeout: str = typer.Option(
        "600", "--timeout", help="How long to wait for RUNNING (600, 10m)."
    ),
    api_url: str | None = _API_URL,
    as_json: bool = _JSON,
) -> None:
    """Start a stopped pod (billing resumes) and verify it is RUNNING."""
    seconds = _seconds(timeout)
    deadline = time.time() + seconds
    with _client(api_url) as client:
        client.start_pod(pod_id)

        def running() -> Pod | None:
            pod = client.get_pod(pod_id)
            return pod if pod.desiredStatus == "RUNNING" else None

        pod = poll(running, deadline=deadline)
        if pod is None:
            raise TargetUnavailable(
                f"pod {pod_id} did not reach RUNNING within {seconds:.0f}s",
                hint=f"check `proctor pod status {pod_id}`; the host's GPU may be rented",
            )
        result: dict[str, Any] = pod.to_record()
        if wait_for_ssh:
            ssh = wait_ssh(client, pod_id, deadline=deadline)
            result.update(public_ip=ssh.host, ssh_port=ssh.port)
    if as_json:
        print_json(result)
    else:
        where = f"{result['public_ip']}:{result['ssh_port']}" if result["ssh_port"] else "not yet"
        console.print(f"pod {pod_id}: RUNNING, ssh {where}")


if __name__ == "__main__":
    # Through the real root, so errors map to exit codes as in `proctor pod ...`.
    import sys

    from proctor.cli.main import main

    sys.exit(main(["pod", *sys.argv[1:]]))

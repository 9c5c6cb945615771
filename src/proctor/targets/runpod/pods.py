"""Pod lifecycle policy: provision exactly the resolved configuration (or reuse `--pod ID`), wait
for SSH, release (stop unless kept; terminate only when authorised), and verify the final state
through the API. A later `RunpodTarget` calls `acquire` in prepare and `release` in release.

Every function takes the client, a deadline (epoch seconds, from the run's budget), and the
clock/sleep seams, so tests drive it against the emulator without real waiting.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from proctor.errors import NotAuthorised, ProctorError, TargetUnavailable, UsageError
from proctor.targets.runpod.client import ApiUnavailable, NotFound, RunpodClient, SoldOut
from proctor.targets.runpod.models import (
    STOPPED_STATUSES,
    CloudType,
    NetworkVolume,
    Pod,
    PodCreateInput,
)
from proctor.targets.runpod.retry import Backoff, Clock, Sleep, poll, retry

Action = Literal["kept", "stopped", "terminated"]
OnPod = Callable[[Pod], None]


class CleanupFailed(TargetUnavailable):
    """A pod could not be brought to the agreed final state: it may still be billing."""

    def __init__(self, message: str, *, states: list[FinalState], hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.states = states


@dataclass(frozen=True)
class PodSpec:
    """The resolved pod configuration (from flags and proctor.toml)."""

    gpu_type: str
    image: str
    gpu_count: int = 1
    pod_count: int = 1
    cloud_type: CloudType = "SECURE"
    data_center: str | None = None
    container_disk_gb: int = 50
    volume_gb: int | None = None  # pod volume, used only without a network volume
    volume_mount_path: str = "/workspace"
    ports: tuple[str, ...] = ("22/tcp",)
    name: str = "proctor"
    env: Mapping[str, str] = field(default_factory=dict, repr=False)
    fallback_gpu_types: tuple[str, ...] = ()  # used only with allow_gpu_substitution

    def __post_init__(self) -> None:
        if self.gpu_count < 1 or self.pod_count < 1:
            raise UsageError("gpu count and pod count must be at least 1")


@dataclass(frozen=True)
class Grants:
    """The user's explicit word for things that cost money or change hardware."""

    allow_gpu_substitution: bool = False  # --allow-gpu-substitution
    allow_more_capacity: bool = False  # --allow-more-capacity
    allow_terminate: bool = False  # --allow-terminate


@dataclass(frozen=True)
class SshEndpoint:
    pod_id: str
    host: str
    port: int
    user: str = "root"


@dataclass(frozen=True)
class Acquired:
    pod: Pod
    ssh: SshEndpoint
    created: bool  # False for a reused pod

    def to_record(self) -> dict[str, Any]:
        return {**self.pod.to_record(), "created": self.created}


@dataclass(frozen=True)
class FinalState:
    pod_id: str
    action: Action
    desired_status: str | None  # as last read from the API; None when the pod is gone
    verified: bool
    error: str | None = None

    def to_record(self) -> dict[str, Any]:
        return asdict(self)


def create_input(
    spec: PodSpec, *, gpu_type: str, name: str, volume: NetworkVolume | None
) -> PodCreateInput:
    """Exactly the resolved configuration: one GPU type, so the API cannot substitute."""
    ports = list(spec.ports) if "22/tcp" in spec.ports else [*spec.ports, "22/tcp"]
    data_center = volume.dataCenterId if volume is not None else spec.data_center
    if volume is not None and spec.data_center and volume.dataCenterId != spec.data_center:
        raise UsageError(
            f"volume {volume.name} is in {volume.dataCenterId}, not in {spec.data_center}",
            hint="a pod must be created in its network volume's data center",
        )
    return PodCreateInput(
        name=name,
        imageName=spec.image,
        computeType="GPU",
        gpuTypeIds=[gpu_type],
        gpuCount=spec.gpu_count,
        cloudType=spec.cloud_type,
        dataCenterIds=[data_center] if data_center else None,
        networkVolumeId=volume.id if volume is not None else None,
        volumeInGb=spec.volume_gb if volume is None else None,
        volumeMountPath=spec.volume_mount_path,
        containerDiskInGb=spec.container_disk_gb,
        ports=ports,
        env=dict(spec.env) or None,
        supportPublicIp=True,
        interruptible=False,
    )


def check_pod(pod: Pod, spec: PodSpec, grants: Grants) -> None:
    """The pod has the GPUs the run asked for, or the user authorised the difference."""
    gpu_type = pod.gpu_type_id
    if gpu_type and gpu_type != spec.gpu_type and not grants.allow_gpu_substitution:
        raise NotAuthorised(
            f"pod {pod.id} has {gpu_type}, the run asked for {spec.gpu_type}",
            flag="--allow-gpu-substitution",
        )
    count = pod.gpu_count
    if count is not None and count < spec.gpu_count:
        raise TargetUnavailable(
            f"pod {pod.id} has {count} GPU(s), the run needs {spec.gpu_count}",
            hint="a resumed pod can lose its GPUs when the host is rented meanwhile; "
            "provision a new pod",
        )
    if count is not None and count > spec.gpu_count and not grants.allow_more_capacity:
        raise NotAuthorised(
            f"pod {pod.id} has {count} GPUs, the run asked for {spec.gpu_count} (costs more)",
            flag="--allow-more-capacity",
        )


def _create_one(
    client: RunpodClient,
    body: PodCreateInput,
    *,
    deadline: float,
    backoff: Backoff,
    clock: Clock,
    sleep: Sleep,
) -> Pod:
    name = body.name or ""

    def attempt() -> Pod:
        try:
            return client.create_pod(body)
        except ApiUnavailable:
            # The create may have reached the API before the connection broke: adopt the pod
            # by its unique name instead of renting a second one.
            for pod in client.list_pods(name=name):
                if pod.name == name and pod.desiredStatus == "RUNNING":
                    return pod
            raise

    return retry(
        attempt,
        deadline=deadline,
        backoff=backoff,
        retry_on=(SoldOut, ApiUnavailable),
        clock=clock,
        sleep=sleep,
    )


def provision(
    client: RunpodClient,
    spec: PodSpec,
    *,
    run_id: str,
    volume: NetworkVolume | None,
    deadline: float,
    grants: Grants = Grants(),
    on_pod: OnPod | None = None,
    backoff: Backoff = Backoff(),
    clock: Clock = time.time,
    sleep: Sleep = time.sleep,
) -> list[Pod]:
    """Create `spec.pod_count` pods. On any failure, pods already created are stopped."""
    created: list[Pod] = []
    try:
        for index in range(spec.pod_count):
            name = f"{spec.name}-{run_id}-{index}"[:191]
            pod = _create_with_fallbacks(
                client, spec, name, volume, deadline, grants, backoff, clock, sleep
            )
            created.append(pod)
            if on_pod is not None:
                on_pod(pod)
            check_pod(pod, spec, grants)
    except ProctorError as error:
        _stop_after_failure(client, created, error, backoff=backoff, clock=clock, sleep=sleep)
        raise
    return created


def _create_with_fallbacks(
    client: RunpodClient,
    spec: PodSpec,
    name: str,
    volume: NetworkVolume | None,
    deadline: float,
    grants: Grants,
    backoff: Backoff,
    clock: Clock,
    sleep: Sleep,
) -> Pod:
    types = [spec.gpu_type, *spec.fallback_gpu_types]
    for position, gpu_type in enumerate(types):
        body = create_input(spec, gpu_type=gpu_type, name=name, volume=volume)
        try:
            return _create_one(
                client, body, deadline=deadline, backoff=backoff, clock=clock, sleep=sleep
            )
        except SoldOut as error:
            more = position + 1 < len(types)
            if not more:
                raise
            if not grants.allow_gpu_substitution:
                raise NotAuthorised(
                    f"{error.message}; substituting {types[position + 1]} for {gpu_type}",
                    flag="--allow-gpu-substitution",
                ) from None
    raise AssertionError("unreachable")  # the loop returns or raises


def reuse(
    client: RunpodClient,
    pod_ids: Iterable[str],
    spec: PodSpec,
    *,
    deadline: float,
    grants: Grants = Grants(),
    on_pod: OnPod | None = None,
    backoff: Backoff = Backoff(),
    clock: Clock = time.time,
    sleep: Sleep = time.sleep,
) -> tuple[list[Pod], list[Pod]]:
    """The pods named by `--pod`, started if stopped. Returns (pods, the ones this call started)."""
    pods: list[Pod] = []
    started: list[Pod] = []
    try:
        for pod_id in pod_ids:
            pod = client.get_pod(pod_id)
            if pod.desiredStatus == "TERMINATED":
                raise TargetUnavailable(
                    f"pod {pod_id} is terminated", hint="drop --pod to provision a new one"
                )
            if pod.desiredStatus != "RUNNING":
                retry(
                    lambda pid=pod_id: client.start_pod(pid),  # type: ignore[misc]
                    deadline=deadline,
                    backoff=backoff,
                    retry_on=(ApiUnavailable,),
                    clock=clock,
                    sleep=sleep,
                )
                started.append(pod)
                pod = client.get_pod(pod_id)
            pods.append(pod)
            if on_pod is not None:
                on_pod(pod)
            check_pod(pod, spec, grants)
    except ProctorError as error:
        _stop_after_failure(client, started, error, backoff=backoff, clock=clock, sleep=sleep)
        raise
    return pods, started


def wait_ssh(
    client: RunpodClient,
    pod_id: str,
    *,
    deadline: float,
    backoff: Backoff = Backoff(initial=1.0, factor=1.5, maximum=10.0),
    clock: Clock = time.time,
    sleep: Sleep = time.sleep,
) -> SshEndpoint:
    """Poll until the pod is RUNNING with a public IP and a public port mapped to 22."""
    started = clock()
    last: list[Pod] = []

    def check() -> SshEndpoint | None:
        pod = retry(
            lambda: client.get_pod(pod_id),
            deadline=deadline,
            backoff=backoff,
            retry_on=(ApiUnavailable,),
            clock=clock,
            sleep=sleep,
        )
        last[:] = [pod]
        if pod.desiredStatus in STOPPED_STATUSES:
            raise TargetUnavailable(
                f"pod {pod_id} became {pod.desiredStatus} while waiting for SSH",
                hint="see the pod's logs in the Runpod console",
            )
        if pod.ssh_ready() and pod.publicIp and pod.ssh_port:
            return SshEndpoint(pod_id=pod_id, host=pod.publicIp, port=pod.ssh_port)
        return None

    endpoint = poll(check, deadline=deadline, backoff=backoff, clock=clock, sleep=sleep)
    if endpoint is not None:
        return endpoint
    pod = last[0] if last else None
    state = (
        f"status={pod.desiredStatus}, publicIp={pod.publicIp or 'none'}, "
        f"port 22 mapped={'yes' if pod.ssh_port else 'no'}"
        if pod is not None
        else "never read"
    )
    raise TargetUnavailable(
        f"pod {pod_id} not reachable by SSH after {clock() - started:.0f}s ({state})",
        hint="the image must run sshd and the pod must expose 22/tcp with a public IP",
    )


def acquire(
    client: RunpodClient,
    spec: PodSpec,
    *,
    run_id: str,
    volume: NetworkVolume | None,
    deadline: float,
    reuse_ids: Iterable[str] = (),
    grants: Grants = Grants(),
    on_pod: OnPod | None = None,
    backoff: Backoff = Backoff(),
    clock: Clock = time.time,
    sleep: Sleep = time.sleep,
) -> list[Acquired]:
    """Pods ready for SSH: reused (`--pod`) or provisioned. `on_pod` sees each pod id as soon as it
    exists, so the record has it even if the wait fails. On failure, pods this call created or
    started are stopped (and verified) before the error is raised."""
    reuse_ids = list(reuse_ids)
    ours: list[Pod]
    if reuse_ids:
        pods, ours = reuse(
            client,
            reuse_ids,
            spec,
            deadline=deadline,
            grants=grants,
            on_pod=on_pod,
            backoff=backoff,
            clock=clock,
            sleep=sleep,
        )
    else:
        pods = provision(
            client,
            spec,
            run_id=run_id,
            volume=volume,
            deadline=deadline,
            grants=grants,
            on_pod=on_pod,
            backoff=backoff,
            clock=clock,
            sleep=sleep,
        )
        ours = list(pods)
    try:
        ready = [
            Acquired(
                pod=pod,
                ssh=wait_ssh(
                    client, pod.id, deadline=deadline, backoff=backoff, clock=clock, sleep=sleep
                ),
                created=not reuse_ids,
            )
            for pod in pods
        ]
    except ProctorError as error:
        _stop_after_failure(client, ours, error, backoff=backoff, clock=clock, sleep=sleep)
        raise
    # Re-read so the record has the running pod's price, IP and GPU as the API reports them.
    return [Acquired(client.get_pod(a.pod.id), a.ssh, a.created) for a in ready]


def _stop_after_failure(
    client: RunpodClient,
    pods: list[Pod],
    error: ProctorError,
    *,
    backoff: Backoff,
    clock: Clock,
    sleep: Sleep,
) -> None:
    """Stop what this call rented before re-raising `error`; a failed stop outranks the error."""
    if not pods:
        return
    try:
        release(client, [p.id for p in pods], backoff=backoff, clock=clock, sleep=sleep)
    except CleanupFailed as cleanup:
        cleanup.message = f"{error.one_line()}; and then {cleanup.message}"
        cleanup.args = (cleanup.message,)
        raise cleanup from error


def release(
    client: RunpodClient,
    pod_ids: Iterable[str],
    *,
    keep: bool = False,
    terminate: bool = False,
    allow_terminate: bool = False,
    timeout_s: float = 180.0,
    backoff: Backoff = Backoff(initial=1.0, factor=1.5, maximum=10.0),
    clock: Clock = time.time,
    sleep: Sleep = time.sleep,
) -> list[FinalState]:
    """Bring each pod to its agreed final state and verify it through the API.

    keep: leave RUNNING (verified). terminate: DELETE (needs allow_terminate; without it,
    NotAuthorised before any request). Otherwise stop, verified EXITED. Every pod is attempted;
    any that did not reach its state raises CleanupFailed listing all of them.
    """
    pod_ids = list(pod_ids)
    if terminate and not allow_terminate:
        raise NotAuthorised(
            f"terminating {', '.join(pod_ids)} deletes the pod disk; stop keeps it",
            flag="--allow-terminate",
        )
    action: Action = "kept" if keep else "terminated" if terminate else "stopped"
    deadline = clock() + timeout_s
    states = [
        _release_one(
            client, pod_id, action, deadline=deadline, backoff=backoff, clock=clock, sleep=sleep
        )
        for pod_id in pod_ids
    ]
    failed = [s for s in states if not s.verified]
    if failed:
        what = "; ".join(f"pod {s.pod_id}: {s.error}" for s in failed)
        raise CleanupFailed(
            f"cleanup failed, pod may still be billing: {what}",
            states=states,
            hint="check with `proctor pod status ID` and stop it (`proctor pod stop ID`) "
            "or in the Runpod console",
        )
    return states


def _release_one(
    client: RunpodClient,
    pod_id: str,
    action: Action,
    *,
    deadline: float,
    backoff: Backoff,
    clock: Clock,
    sleep: Sleep,
) -> FinalState:
    try:
        if action == "kept":
            pod = client.get_pod(pod_id)
            ok = pod.desiredStatus == "RUNNING"
            return FinalState(
                pod_id,
                action,
                pod.desiredStatus,
                ok,
                None if ok else f"kept pod is {pod.desiredStatus}, not RUNNING",
            )
        if action == "terminated":

            def request() -> None:
                client.terminate_pod(pod_id, allow_terminate=True)
        else:

            def request() -> None:
                client.stop_pod(pod_id)

        # NotFound: already gone; the verification below says what state it is in.
        with contextlib.suppress(NotFound):
            retry(
                request,
                deadline=deadline,
                backoff=backoff,
                retry_on=(ApiUnavailable,),
                clock=clock,
                sleep=sleep,
            )
        return verify_final_state(
            client, pod_id, action, deadline=deadline, backoff=backoff, clock=clock, sleep=sleep
        )
    except ProctorError as error:
        return FinalState(pod_id, action, _status_or_none(client, pod_id), False, error.one_line())


def verify_final_state(
    client: RunpodClient,
    pod_id: str,
    action: Action,
    *,
    deadline: float,
    backoff: Backoff = Backoff(initial=1.0, factor=1.5, maximum=10.0),
    clock: Clock = time.time,
    sleep: Sleep = time.sleep,
) -> FinalState:
    """Poll the API until the pod is EXITED/TERMINATED (stopped) or gone/TERMINATED (terminated)."""
    want = {"TERMINATED"} if action == "terminated" else set(STOPPED_STATUSES)
    seen: list[str | None] = [None]

    def check() -> FinalState | None:
        try:
            pod = client.get_pod(pod_id)
        except NotFound:
            if action == "terminated":
                return FinalState(pod_id, action, None, True)
            return FinalState(pod_id, action, None, False, "pod vanished (terminated?) on stop")
        except ApiUnavailable:
            return None
        seen[0] = pod.desiredStatus
        if pod.desiredStatus in want:
            return FinalState(pod_id, action, pod.desiredStatus, True)
        return None

    state = poll(check, deadline=deadline, backoff=backoff, clock=clock, sleep=sleep)
    if state is not None:
        return state
    return FinalState(
        pod_id,
        action,
        seen[0],
        False,
        f"still {seen[0] or 'unreadable'} after the "
        f"{'terminate' if action == 'terminated' else 'stop'} request",
    )


def _status_or_none(client: RunpodClient, pod_id: str) -> str | None:
    try:
        return client.get_pod(pod_id).desiredStatus
    except ProctorError:
        return None

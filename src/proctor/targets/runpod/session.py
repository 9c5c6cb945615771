"""Runpod as a registry kind: the `--target runpod...` string, and acquiring pods for a command.

`acquire_pods` resolves the pod configuration (flags and the target string over `[runpod]`),
starts the budget, resolves the volume, and acquires or reuses the pods; it returns them as
registry `Acquired` targets with the budget's deadline and a view of the pod for reports.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from proctor.errors import NotAuthorised, UsageError
from proctor.record.rundir import new_run_id
from proctor.spec.durations import parse_duration
from proctor.targets.registry import Acquired, TargetContext

if TYPE_CHECKING:
    from proctor.targets.kinds import RunpodTargetOptions
    from proctor.targets.runpod.target import RunpodTarget


@dataclass
class PodChoice:
    """What a `--target runpod[:ID[,ID]][?keep&max-cost=N...]` string asks for."""

    reuse: list[str] = field(default_factory=list)
    keep: bool = False
    terminate: bool = False
    allow_terminate: bool = False
    max_time: str | None = None
    max_cost: float | None = None


RUNPOD_TARGET_HINT = (
    "use runpod (a new pod from [runpod] in proctor.toml), runpod:POD_ID to "
    "reuse a pod, options after ?: keep, terminate, allow-terminate, "
    "max-time=30m, max-cost=2.5 (e.g. runpod:abc123?keep)"
)


def parse_runpod_target(target: str) -> PodChoice:
    """`runpod`, `runpod:ID`, `runpod://ID,ID2`, each optionally `?keep&max-cost=2.5`."""
    head, _, query = target.partition("?")
    if head != "runpod" and not head.startswith("runpod:"):
        raise UsageError(f"not a Runpod target: {target!r}", hint=RUNPOD_TARGET_HINT)
    ids = head[len("runpod:") :].lstrip("/") if head.startswith("runpod:") else ""
    choice = PodChoice(reuse=[i for i in ids.split(",") if i])
    for item in (q for q in query.split("&") if q):
        key, sep, value = item.partition("=")
        flag = key.replace("_", "-")
        if flag in ("keep", "terminate", "allow-terminate") and not sep:
            setattr(choice, flag.replace("-", "_"), True)
        elif flag == "max-time" and value:
            choice.max_time = value
        elif flag == "max-cost" and value:
            try:
                choice.max_cost = float(value)
            except ValueError:
                raise UsageError(
                    f"max-cost={value!r} in --target is not a number",
                    hint="write e.g. runpod?max-cost=2.5",
                ) from None
        else:
            raise UsageError(f"unknown option {item!r} in --target {head}", hint=RUNPOD_TARGET_HINT)
    if choice.keep and choice.terminate:
        raise UsageError("keep and terminate contradict each other", hint="pick one")
    return choice


def acquire_pods(rf: RunpodTargetOptions, ctx: TargetContext, identity: Any) -> Acquired:
    """Acquire or reuse the pods `rf` asks for; the budget starts now. A pod that will host a
    server outliving the command (ctx.keep_for_server) is kept unless told to terminate."""
    from proctor.targets.runpod import Budget, Grants, PodSpec, RunpodClient, resolve_volume
    from proctor.targets.runpod.target import ReleasePolicy, acquire_targets

    rp = ctx.config.table("runpod")
    max_time = rf.max_time or rp.get("max_time")
    max_cost = rf.max_cost if rf.max_cost is not None else rp.get("max_cost")
    budget = Budget.starting_now(
        parse_duration(str(max_time), option="--max-time") if max_time else None,
        float(max_cost) if max_cost is not None else None,
    )
    gpu_type = rf.gpu_type or rp.get("gpu_type")
    image = rf.image or rp.get("image")
    if not rf.reuse_pods and (not gpu_type or not image):
        raise UsageError(
            "a new pod needs a GPU type and an image",
            hint="pass --gpu-type and --image, or set them in [runpod], or --pod ID",
        )
    spec = PodSpec(
        gpu_type=str(gpu_type or "unknown"),
        image=str(image or "unknown"),
        gpu_count=int(rf.gpu_count or rp.get("gpu_count") or 1),
        pod_count=int(rf.pods or rp.get("pods") or 1),
        cloud_type=rp.get("cloud_type", "SECURE"),
        data_center=rp.get("data_center"),
        container_disk_gb=int(rp.get("container_disk_gb", 50)),
        volume_mount_path=str(rp.get("volume_mount_path", "/workspace")),
        name=str(rp.get("name", "proctor")),
    )
    keep = rf.keep or (ctx.keep_for_server and not rf.terminate)
    policy = ReleasePolicy(keep=keep, terminate=rf.terminate, allow_terminate=rf.allow_terminate)
    grants = Grants(rf.allow_gpu_substitution, rf.allow_more_capacity, rf.allow_terminate)
    if policy.terminate and not policy.allow_terminate:
        raise NotAuthorised(
            "--terminate deletes the pod disk; stop keeps it", flag="--allow-terminate"
        )
    group = new_run_id()
    with RunpodClient(base_url=rf.api_url or rp.get("api_url")) as client:
        volume = None
        if rp.get("volume") or rf.allow_create_volume:
            project = str(rp.get("project") or Path(identity.repo_root or ".").name)
            volume = resolve_volume(
                client,
                project=project,
                name=rp.get("volume"),
                data_center=spec.data_center,
                allow_create_volume=rf.allow_create_volume,
                allow_other_volume=rf.allow_other_volume,
            ).volume
        targets = acquire_targets(
            client,
            spec,
            run_id=group,
            ssh_base=rf.ssh.ssh_options(),
            volume=volume,
            reuse_ids=rf.reuse_pods,
            grants=grants,
            policy=policy,
            budget=budget,
            api_url=client.base_url,
        )
    kept_because = "a server or detached run lives on it" if keep and not rf.keep else None
    first = targets[0] if targets else None
    return Acquired(
        list(targets),
        group=group,
        deadline=budget.deadline() if budget.max_time_s is not None else None,
        started_at=budget.started_at,
        view_key="pod",
        view=(lambda: pod_view(first, keep, kept_because)) if first is not None else None,
        text=pod_text,
    )


def pod_view(pod: RunpodTarget, kept: bool, kept_because: str | None) -> dict[str, Any]:
    released = pod.released
    return {
        "pod_id": pod.pod_id,
        "pod": pod.pod,
        "kept": kept,
        "kept_because": kept_because,
        "release": released.to_record() if released else None,
        "release_verified": released.verified if released else None,
        "budget": pod.budget_view(),
        "watchdog": pod.watchdog,
        "cost": pod_cost(pod),
    }


def pod_cost(pod: RunpodTarget) -> dict[str, Any]:
    """What the pod time has cost so far: price (summed over the run's pods) x time since the
    pods were acquired; `usd` None when a pod has no price."""
    import time

    from proctor.targets.runpod.budget import cost_of

    price, source = pod.price_per_hr()
    started = pod.budget.started_at if pod.budget is not None else None
    elapsed = round(time.time() - started, 1) if started is not None else None
    usd = round(cost_of(price, elapsed), 6) if price is not None and elapsed is not None else None
    return {"usd_per_hour": price, "source": source, "elapsed_s": elapsed, "usd": usd}


def pod_text(view: dict[str, Any]) -> str:
    pod = view.get("pod") or {}
    release = view.get("release") or {}
    state = ", ".join(f"{s.get('desired_status') or 'gone'}" for s in release.get("states") or [])
    gpu = pod.get("gpu_name") or pod.get("gpu_type_id")
    verified = "(verified through the API)" if view.get("release_verified") else "(NOT verified)"
    lines = [
        f"pod {view['pod_id']}: {pod.get('gpu_count')}x {gpu}, {pod.get('cost_per_hr')}/hr; "
        f"final state {state or 'unknown'} {verified}"
    ]
    if view.get("kept_because"):
        lines.append(f"  kept running: {view['kept_because']}")
    budget = view.get("budget") or {}
    cost = view.get("cost") or {}
    if cost.get("usd") is not None:
        lines.append(
            f"  cost: about ${cost['usd']:.4f} for {cost.get('elapsed_s')}s of pod time "
            f"at ${cost['usd_per_hour']:g}/hr ({cost.get('source')})"
        )
    elif cost:
        lines.append(f"  cost: not measured (no costPerHr from the API; {cost.get('source')})")
    if budget.get("max_time_s") or budget.get("max_cost"):
        stopped = budget.get("limit_reached")
        lines.append(
            f"  budget: {budget.get('elapsed_s')}s, spent {budget.get('spent')} of "
            f"max_time {budget.get('max_time_s')}s / max_cost {budget.get('max_cost')}"
            + (f"; STOPPED: {stopped}" if stopped else "")
        )
    return "\n".join(lines)


__all__ = [
    "RUNPOD_TARGET_HINT",
    "PodChoice",
    "acquire_pods",
    "parse_runpod_target",
    "pod_cost",
    "pod_text",
    "pod_view",
]

"""proctor.targets.runpod: Runpod pods through the REST API v1.

Layers, each importing only those above it:
    models   pydantic shapes of rest-v1-openapi.json
    client   RunpodClient (httpx); maps HTTP/API errors into proctor.errors
    retry    bounded retry/poll helpers (deadline, repeat-without-evidence stop)
    budget   time/cost budget and the on-pod watchdog's command line
    volumes  which network volume (project-named unless authorised)
    pods     acquire (provision or reuse, wait for SSH) and release (verified final state)
watchdog.py is a stdlib-only script shipped as package data and run on the pod.
"""

from proctor.targets.runpod.budget import Budget, total_cost_per_hr, watchdog_argv, watchdog_source
from proctor.targets.runpod.client import (
    ApiUnavailable,
    NotFound,
    RunpodClient,
    SoldOut,
    resolve_api_key,
)
from proctor.targets.runpod.models import (
    KNOWN_GPU_TYPE_IDS,
    GpuType,
    NetworkVolume,
    NetworkVolumeCreateInput,
    Pod,
    PodCreateInput,
)
from proctor.targets.runpod.pods import (
    Acquired,
    CleanupFailed,
    FinalState,
    Grants,
    PodSpec,
    SshEndpoint,
    acquire,
    release,
    verify_final_state,
    wait_ssh,
)
from proctor.targets.runpod.retry import Backoff, poll, retry
from proctor.targets.runpod.volumes import VolumeChoice, resolve_volume

__all__ = [
    "KNOWN_GPU_TYPE_IDS",
    "Acquired",
    "ApiUnavailable",
    "Backoff",
    "Budget",
    "CleanupFailed",
    "FinalState",
    "GpuType",
    "Grants",
    "NetworkVolume",
    "NetworkVolumeCreateInput",
    "NotFound",
    "Pod",
    "PodCreateInput",
    "PodSpec",
    "RunpodClient",
    "SoldOut",
    "SshEndpoint",
    "VolumeChoice",
    "acquire",
    "poll",
    "release",
    "resolve_api_key",
    "resolve_volume",
    "retry",
    "total_cost_per_hr",
    "verify_final_state",
    "wait_ssh",
    "watchdog_argv",
    "watchdog_source",
]

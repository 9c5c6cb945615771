"""Volume choice and pod lifecycle policy against the emulator: what is sent, what is refused,
and that the final state is verified through the API."""

from __future__ import annotations

import time

import pytest

from proctor.errors import ExitCode, NotAuthorised, TargetUnavailable, UsageError
from proctor.targets.runpod.client import RunpodClient
from proctor.targets.runpod.pods import (
    CleanupFailed,
    Grants,
    PodSpec,
    acquire,
    release,
)
from proctor.targets.runpod.retry import Backoff
from proctor.targets.runpod.volumes import named_for_project, resolve_volume
from tests.fixtures.runpod_emulator import SOLD_OUT_MESSAGE, RunpodEmulator

FAST = Backoff(initial=0.01, factor=1.0, maximum=0.01)
H200 = "NVIDIA H200"
SPEC = PodSpec(gpu_type=H200, gpu_count=2, image="runpod/pytorch:2.8", data_center="EU-RO-1")


@pytest.fixture
def client(emulator: RunpodEmulator, canary_key: str) -> RunpodClient:
    return RunpodClient(canary_key, emulator.base_url, timeout=5)


def soon(seconds: float = 20.0) -> float:
    return time.time() + seconds


# --- volumes ----------------------------------------------------------------------------------


def test_named_for_project() -> None:
    assert named_for_project("mxx", "mxx") and named_for_project("mxx-eu", "mxx")
    assert not named_for_project("mxxold", "mxx") and not named_for_project(None, "mxx")


def test_prefers_existing_project_volume(emulator: RunpodEmulator, client: RunpodClient) -> None:
    emulator.add_volume("other", "EU-RO-1")
    vid = emulator.add_volume("mxx-eu", "EU-RO-1")
    choice = resolve_volume(client, project="mxx")
    assert (choice.volume.id, choice.created) == (vid, False)
    assert emulator.calls("POST", "/networkvolumes") == []


def test_no_volume_needs_allow_create(emulator: RunpodEmulator, client: RunpodClient) -> None:
    emulator.add_volume("other", "EU-RO-1")
    with pytest.raises(NotAuthorised) as e:
        resolve_volume(client, project="mxx", data_center="EU-RO-1")
    assert e.value.flag == "--allow-create-volume" and e.value.exit_code == 77
    assert "other" in e.value.message
    assert emulator.calls("POST", "/networkvolumes") == []
    choice = resolve_volume(client, project="mxx", data_center="EU-RO-1", allow_create_volume=True)
    assert choice.created and choice.volume.name == "mxx"
    assert emulator.calls("POST", "/networkvolumes")[0].body == {
        "name": "mxx",
        "size": 100,
        "dataCenterId": "EU-RO-1",
    }


def test_other_volume_needs_allow_other(emulator: RunpodEmulator, client: RunpodClient) -> None:
    vid = emulator.add_volume("shared-data", "US-TX-3")
    with pytest.raises(NotAuthorised) as e:
        resolve_volume(client, project="mxx", name="shared-data")
    assert e.value.flag == "--allow-other-volume"
    assert emulator.requests == []  # refused before asking the API anything
    choice = resolve_volume(client, project="mxx", name="shared-data", allow_other_volume=True)
    assert choice.volume.id == vid


def test_volume_in_other_data_center_is_not_chosen(
    emulator: RunpodEmulator, client: RunpodClient
) -> None:
    emulator.add_volume("mxx", "US-TX-3")
    with pytest.raises(NotAuthorised):
        resolve_volume(client, project="mxx", data_center="EU-RO-1")


def test_create_without_data_center_is_usage(client: RunpodClient) -> None:
    with pytest.raises(UsageError):
        resolve_volume(client, project="mxx", allow_create_volume=True)


# --- acquire / release ------------------------------------------------------------------------


def test_create_wait_stop_verified(emulator: RunpodEmulator, client: RunpodClient) -> None:
    vid = emulator.add_volume("mxx", "EU-RO-1")
    volume = resolve_volume(client, project="mxx").volume
    seen: list[str] = []
    got = acquire(
        client,
        SPEC,
        run_id="r1",
        volume=volume,
        deadline=soon(),
        backoff=FAST,
        on_pod=lambda p: seen.append(p.id),
    )
    assert len(got) == 1 and seen == [got[0].pod.id]
    a = got[0]
    assert a.ssh.port == emulator.pods[a.pod.id]["portMappings"]["22"]
    assert a.pod.ssh_ready()
    record = a.to_record()
    assert record["gpu_count"] == 2 and record["gpu_type_id"] == H200
    assert record["cost_per_hr"] == pytest.approx(5.0)
    assert record["volume"]["id"] == vid and record["volume_mount_path"] == "/workspace"
    sent = emulator.calls("POST", "/pods")[0].body
    assert sent["gpuTypeIds"] == [H200] and sent["gpuCount"] == 2
    assert sent["networkVolumeId"] == vid and sent["dataCenterIds"] == ["EU-RO-1"]
    assert "22/tcp" in sent["ports"] and sent["supportPublicIp"] is True

    states = release(client, [a.pod.id], backoff=FAST)
    assert [(s.action, s.desired_status, s.verified) for s in states] == [
        ("stopped", "EXITED", True)
    ]
    assert emulator.pods[a.pod.id]["desiredStatus"] == "EXITED"
    assert emulator.calls("DELETE") == []
    # verified through the API: the last request about the pod was a read after the stop
    assert emulator.requests[-1].method == "GET" and emulator.requests[-1].route == "/pods/{podId}"


def test_pod_count_creates_exactly_that_many(
    emulator: RunpodEmulator, client: RunpodClient
) -> None:
    spec = PodSpec(gpu_type=H200, image="i", pod_count=3)
    got = acquire(client, spec, run_id="r", volume=None, deadline=soon(), backoff=FAST)
    assert len(got) == 3 == len(emulator.calls("POST", "/pods"))
    assert len({a.pod.name for a in got}) == 3


def test_sold_out_exits_69_with_api_message_no_substitution(
    emulator: RunpodEmulator, client: RunpodClient
) -> None:
    emulator.sold_out.add(H200)
    with pytest.raises(TargetUnavailable) as e:
        acquire(client, SPEC, run_id="r", volume=None, deadline=soon(), backoff=FAST)
    assert e.value.exit_code == ExitCode.UNAVAILABLE
    assert SOLD_OUT_MESSAGE in e.value.message and "same error twice" in e.value.message
    bodies = [r.body for r in emulator.calls("POST", "/pods")]
    assert len(bodies) == 2 and all(b["gpuTypeIds"] == [H200] for b in bodies)
    assert emulator.pods == {}


def test_fallback_gpu_needs_allow_substitution(
    emulator: RunpodEmulator, client: RunpodClient
) -> None:
    emulator.sold_out.add(H200)
    spec = PodSpec(gpu_type=H200, image="i", fallback_gpu_types=("NVIDIA B200",))
    with pytest.raises(NotAuthorised) as e:
        acquire(client, spec, run_id="r", volume=None, deadline=soon(), backoff=FAST)
    assert e.value.flag == "--allow-gpu-substitution"
    assert all(r.body["gpuTypeIds"] == [H200] for r in emulator.calls("POST", "/pods"))
    got = acquire(
        client,
        spec,
        run_id="r",
        volume=None,
        deadline=soon(),
        backoff=FAST,
        grants=Grants(allow_gpu_substitution=True),
    )
    assert got[0].pod.gpu_type_id == "NVIDIA B200"


def test_ssh_never_mapped_stops_the_pod_and_reports(
    emulator: RunpodEmulator, client: RunpodClient
) -> None:
    emulator.never_ssh = True
    with pytest.raises(TargetUnavailable) as e:
        acquire(client, SPEC, run_id="r", volume=None, deadline=soon(0.5), backoff=FAST)
    assert "not reachable by SSH" in e.value.message and "port 22 mapped=no" in e.value.message
    (pod,) = emulator.pods.values()
    assert pod["desiredStatus"] == "EXITED"  # not left billing


def test_reuse_starts_a_stopped_pod_and_checks_gpus(
    emulator: RunpodEmulator, client: RunpodClient
) -> None:
    pod_id = emulator.add_pod({"gpuTypeIds": [H200], "gpuCount": 2, "name": "old"}, "EXITED")
    got = acquire(
        client, SPEC, run_id="r", volume=None, deadline=soon(), backoff=FAST, reuse_ids=[pod_id]
    )
    assert [a.pod.id for a in got] == [pod_id] and not got[0].created
    assert emulator.calls("POST", "/pods") == []
    assert len(emulator.calls("POST", "/pods/{podId}/start")) == 1


def test_reuse_bigger_pod_needs_allow_more_capacity(
    emulator: RunpodEmulator, client: RunpodClient
) -> None:
    pod_id = emulator.add_pod({"gpuTypeIds": [H200], "gpuCount": 8}, "EXITED")
    with pytest.raises(NotAuthorised) as e:
        acquire(
            client, SPEC, run_id="r", volume=None, deadline=soon(), backoff=FAST, reuse_ids=[pod_id]
        )
    assert e.value.flag == "--allow-more-capacity"
    assert emulator.pods[pod_id]["desiredStatus"] == "EXITED"  # we started it, so we stopped it


def test_reuse_other_gpu_needs_allow_substitution(
    emulator: RunpodEmulator, client: RunpodClient
) -> None:
    pod_id = emulator.add_pod({"gpuTypeIds": ["NVIDIA A40"], "gpuCount": 2})
    with pytest.raises(NotAuthorised) as e:
        acquire(
            client, SPEC, run_id="r", volume=None, deadline=soon(), backoff=FAST, reuse_ids=[pod_id]
        )
    assert e.value.flag == "--allow-gpu-substitution"
    assert emulator.pods[pod_id]["desiredStatus"] == "RUNNING"  # it ran before us: left as found


def test_terminate_without_flag_is_77_and_sends_no_delete(
    emulator: RunpodEmulator, client: RunpodClient
) -> None:
    pod_id = emulator.add_pod({"gpuTypeIds": [H200]})
    with pytest.raises(NotAuthorised) as e:
        release(client, [pod_id], terminate=True, backoff=FAST)
    assert e.value.exit_code == 77 and e.value.flag == "--allow-terminate"
    assert emulator.calls("DELETE") == [] and emulator.requests == []
    states = release(client, [pod_id], terminate=True, allow_terminate=True, backoff=FAST)
    assert [(s.action, s.verified) for s in states] == [("terminated", True)]
    assert pod_id not in emulator.pods and len(emulator.calls("DELETE")) == 1


def test_keep_leaves_running_verified(emulator: RunpodEmulator, client: RunpodClient) -> None:
    pod_id = emulator.add_pod({"gpuTypeIds": [H200]})
    states = release(client, [pod_id], keep=True, backoff=FAST)
    assert [(s.action, s.desired_status, s.verified) for s in states] == [("kept", "RUNNING", True)]
    assert emulator.calls("POST", "/pods/{podId}/stop") == []


def test_failing_stop_is_reported(emulator: RunpodEmulator, client: RunpodClient) -> None:
    first = emulator.add_pod({"gpuTypeIds": [H200]})
    second = emulator.add_pod({"gpuTypeIds": [H200]})
    emulator.stop_mode = "fail"
    with pytest.raises(CleanupFailed) as e:
        release(client, [first, second], timeout_s=2, backoff=FAST)
    assert e.value.exit_code == ExitCode.UNAVAILABLE
    assert first in e.value.message and second in e.value.message and "500" in e.value.message
    assert "may still be billing" in e.value.message
    assert {s.pod_id: s.verified for s in e.value.states} == {first: False, second: False}
    # the first failure does not skip the second pod; each gives up on the repeated error
    assert len(emulator.calls("POST", "/pods/{podId}/stop")) == 4


def test_stop_that_never_takes_effect_is_reported(
    emulator: RunpodEmulator, client: RunpodClient
) -> None:
    pod_id = emulator.add_pod({"gpuTypeIds": [H200]})
    emulator.stop_mode = "ignore"
    with pytest.raises(CleanupFailed) as e:
        release(client, [pod_id], timeout_s=0.5, backoff=FAST)
    assert "still RUNNING" in e.value.message
    assert e.value.states[0].desired_status == "RUNNING"


def test_transient_stop_error_is_retried(emulator: RunpodEmulator, client: RunpodClient) -> None:
    pod_id = emulator.add_pod({"gpuTypeIds": [H200]})
    emulator.inject("POST", "/pods/{podId}/stop", 503, "try again")
    states = release(client, [pod_id], backoff=FAST)
    assert states[0].verified and len(emulator.calls("POST", "/pods/{podId}/stop")) == 2


def test_create_after_lost_response_adopts_instead_of_renting_twice(
    emulator: RunpodEmulator, client: RunpodClient
) -> None:
    # The API created the pod but the answer was lost (emulated: a 502 after the create).
    real = emulator._handle

    def lossy(op, args, query, body):  # type: ignore[no-untyped-def]
        status, payload = real(op, args, query, body)
        if op.template == "/pods" and op.method == "POST" and len(emulator.pods) == 1:
            return 502, {"error": "gateway timeout"}
        return status, payload

    emulator._handle = lossy  # type: ignore[method-assign]
    got = acquire(client, SPEC, run_id="r", volume=None, deadline=soon(), backoff=FAST)
    assert len(emulator.pods) == 1 and got[0].pod.id in emulator.pods
    assert len(emulator.calls("POST", "/pods")) == 1

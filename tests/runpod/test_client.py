"""RunpodClient against the spec-validating emulator: calls, error mapping, key handling."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from proctor.errors import ExitCode, NotAuthorised, TargetUnavailable, UsageError
from proctor.targets.runpod.client import (
    ApiUnavailable,
    NotFound,
    RunpodClient,
    SoldOut,
    resolve_api_key,
)
from proctor.targets.runpod.models import NetworkVolumeCreateInput, PodCreateInput
from tests.fixtures.runpod_emulator import SOLD_OUT_MESSAGE, RunpodEmulator

H200 = "NVIDIA H200"


def body(**extra: object) -> PodCreateInput:
    fields: dict[str, object] = {
        "name": "t",
        "imageName": "img:1",
        "gpuTypeIds": [H200],
        "gpuCount": 1,
        "ports": ["22/tcp"],
    }
    fields.update(extra)
    return PodCreateInput.model_validate(fields)


def test_pod_lifecycle(emulator: RunpodEmulator, canary_key: str) -> None:
    with RunpodClient(canary_key, emulator.base_url) as client:
        pod = client.create_pod(body(gpuCount=2))
        assert pod.desiredStatus == "RUNNING" and pod.gpu_count == 2
        assert [p.id for p in client.list_pods()] == [pod.id]
        client.stop_pod(pod.id)
        assert client.get_pod(pod.id).desiredStatus == "EXITED"
        assert client.list_pods(desired_status="RUNNING") == []
        client.start_pod(pod.id)
        assert client.get_pod(pod.id).desiredStatus == "RUNNING"
        client.terminate_pod(pod.id, allow_terminate=True)
        with pytest.raises(NotFound):
            client.get_pod(pod.id)
    sent = emulator.calls("POST", "/pods")[0].body
    assert sent["gpuTypeIds"] == [H200] and sent["gpuCount"] == 2
    assert all(r.auth_ok for r in emulator.requests)


def test_terminate_needs_the_word_and_sends_nothing(
    emulator: RunpodEmulator, canary_key: str
) -> None:
    pod_id = emulator.add_pod({"gpuTypeIds": [H200]})
    with RunpodClient(canary_key, emulator.base_url) as client, pytest.raises(NotAuthorised) as e:
        client.terminate_pod(pod_id, allow_terminate=False)
    assert e.value.flag == "--allow-terminate"
    assert emulator.calls("DELETE") == []
    assert emulator.pods[pod_id]["desiredStatus"] == "RUNNING"


def test_volumes(emulator: RunpodEmulator, canary_key: str) -> None:
    with RunpodClient(canary_key, emulator.base_url) as client:
        created = client.create_network_volume(
            NetworkVolumeCreateInput(name="proj", size=50, dataCenterId="EU-RO-1")
        )
        assert [(v.id, v.name) for v in client.list_network_volumes()] == [(created.id, "proj")]


def test_sold_out_is_unavailable_with_the_api_message(
    emulator: RunpodEmulator, canary_key: str
) -> None:
    emulator.sold_out.add(H200)
    with RunpodClient(canary_key, emulator.base_url) as client, pytest.raises(SoldOut) as e:
        client.create_pod(body())
    assert e.value.exit_code == ExitCode.UNAVAILABLE
    assert SOLD_OUT_MESSAGE in e.value.message
    assert emulator.pods == {}


def test_wrong_key_is_a_usage_error_with_hint(emulator: RunpodEmulator) -> None:
    with RunpodClient("rpa_wrong", emulator.base_url) as client, pytest.raises(UsageError) as e:
        client.list_pods()
    assert e.value.exit_code == ExitCode.USAGE
    assert "401" in e.value.message and "RUNPOD_API_KEY" in (e.value.hint or "")


def test_server_error_is_unavailable(emulator: RunpodEmulator, canary_key: str) -> None:
    emulator.inject("GET", "/pods", 502, "bad gateway")
    with RunpodClient(canary_key, emulator.base_url) as client, pytest.raises(ApiUnavailable) as e:
        client.list_pods()
    assert e.value.status == 502 and "bad gateway" in e.value.message


def test_other_client_error_is_usage(emulator: RunpodEmulator, canary_key: str) -> None:
    emulator.inject("POST", "/pods", 400, "imageName is required")
    with RunpodClient(canary_key, emulator.base_url) as client, pytest.raises(UsageError) as e:
        client.create_pod(body())
    assert "imageName is required" in e.value.message


def test_unreachable_api_is_unavailable(canary_key: str) -> None:
    with socket.socket() as s:  # a port that was free a moment ago and has no listener now
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    client = RunpodClient(canary_key, f"http://127.0.0.1:{port}/v1", timeout=2)
    with client, pytest.raises(TargetUnavailable) as e:
        client.list_pods()
    assert e.value.exit_code == ExitCode.UNAVAILABLE
    assert canary_key not in e.value.one_line()


def test_bad_id_never_becomes_another_path(emulator: RunpodEmulator, canary_key: str) -> None:
    with RunpodClient(canary_key, emulator.base_url) as client, pytest.raises(UsageError):
        client.stop_pod("../networkvolumes")
    assert emulator.requests == []


def test_key_never_in_repr_or_messages(emulator: RunpodEmulator, canary_key: str) -> None:
    # The API echoing the key back must not carry it into proctor's message.
    emulator.inject("GET", "/pods", 500, f"token {canary_key} exploded")
    client = RunpodClient(canary_key, emulator.base_url)
    with pytest.raises(ApiUnavailable) as e:
        client.list_pods()
    for text in (
        repr(client),
        str(client),
        repr(client.__dict__),
        e.value.one_line(),
        repr(e.value),
    ):
        assert canary_key not in text
    assert "<redacted>" in e.value.message
    client.close()


def test_api_key_sources(tmp_path: Path, canary_key: str) -> None:
    config = tmp_path / "config.toml"
    config.write_text(f'[default]\napi_key = "{canary_key}"\n')
    assert resolve_api_key(environ={}, config_path=config) == canary_key
    assert resolve_api_key(environ={"RUNPOD_API_KEY": "env"}, config_path=config) == "env"
    assert resolve_api_key("arg", environ={"RUNPOD_API_KEY": "env"}) == "arg"
    with pytest.raises(UsageError) as e:
        resolve_api_key(environ={}, config_path=tmp_path / "missing.toml")
    assert "RUNPOD_API_KEY" in (e.value.hint or "")


def test_broken_config_does_not_quote_the_key(tmp_path: Path, canary_key: str) -> None:
    config = tmp_path / "config.toml"
    config.write_text(f'[default]\napi_key = "{canary_key}\n')  # unterminated string
    with pytest.raises(UsageError) as e:
        resolve_api_key(environ={}, config_path=config)
    assert canary_key not in e.value.one_line()


def test_home_config_is_used_by_default(
    tmp_path: Path, canary_key: str, emulator: RunpodEmulator
) -> None:
    home = Path.home()  # isolated by conftest
    (home / ".runpod").mkdir()
    (home / ".runpod" / "config.toml").write_text(f'[default]\napi_key = "{canary_key}"\n')
    with RunpodClient(base_url=emulator.base_url) as client:
        assert client.list_pods() == []
    assert emulator.requests[0].auth_ok

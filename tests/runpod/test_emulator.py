"""The emulator itself: it must catch requests that break rest-v1-openapi.json."""

from __future__ import annotations

import httpx

from tests.fixtures.runpod_emulator import RunpodEmulator


def test_rejects_body_against_schema(canary_key: str) -> None:
    with RunpodEmulator(api_key=canary_key) as emu, httpx.Client() as http:
        r = http.post(
            emu.base_url + "/pods",
            json={"gpuTypeIds": ["NVIDIA H9000"], "gpuCount": 0, "cloudType": "CHEAP"},
            headers={"Authorization": f"Bearer {canary_key}"},
        )
    assert r.status_code == 400
    text = "\n".join(emu.violations)
    assert "gpuTypeIds/0" in text and "gpuCount" in text and "cloudType" in text
    assert emu.pods == {}


def test_rejects_unknown_route_method_and_query(canary_key: str) -> None:
    auth = {"Authorization": f"Bearer {canary_key}"}
    with RunpodEmulator(api_key=canary_key) as emu, httpx.Client() as http:
        assert http.get(emu.base_url + "/gpuTypes", headers=auth).status_code == 404
        assert http.put(emu.base_url + "/pods", headers=auth).status_code == 405
        r = http.get(emu.base_url + "/pods", params={"includeMachine": "yes"}, headers=auth)
        assert r.status_code == 400
        r = http.get(emu.base_url + "/pods", params={"colour": "red"}, headers=auth)
        assert r.status_code == 400
    assert len(emu.violations) == 4


def test_requires_the_bearer_key(canary_key: str) -> None:
    with RunpodEmulator(api_key=canary_key) as emu, httpx.Client() as http:
        assert http.get(emu.base_url + "/pods").status_code == 401
        r = http.get(emu.base_url + "/pods", headers={"Authorization": "Bearer nope"})
        assert r.status_code == 401
    assert [r.auth_ok for r in emu.requests] == [False, False]


def test_ssh_mapping_appears_after_polls_and_hook_is_used(canary_key: str) -> None:
    auth = {"Authorization": f"Bearer {canary_key}"}
    seen: list[str] = []

    def hook(pod: dict[str, object]) -> tuple[str, int]:
        seen.append(str(pod["id"]))
        return "10.200.0.2", 2222

    with (
        RunpodEmulator(api_key=canary_key, on_create=hook, ssh_after_polls=2) as emu,
        httpx.Client() as http,
    ):
        pod = http.post(emu.base_url + "/pods", json={"imageName": "i"}, headers=auth).json()
        views = [
            http.get(f"{emu.base_url}/pods/{pod['id']}", headers=auth).json() for _ in range(3)
        ]
    assert [v["portMappings"] for v in views] == [{}, {}, {"22": 2222}]
    assert views[-1]["publicIp"] == "10.200.0.2" and seen == [pod["id"]]
    assert emu.violations == []

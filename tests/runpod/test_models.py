"""Models follow rest-v1-openapi.json: field names, enums, tolerance of unknown fields."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from proctor.targets.runpod.models import (
    KNOWN_GPU_TYPE_IDS,
    NetworkVolume,
    NetworkVolumeCreateInput,
    Pod,
    PodCreateInput,
)

SPEC = Path(__file__).with_name("rest-v1-openapi.json")


@pytest.fixture(scope="module")
def schemas() -> dict[str, Any]:
    return json.loads(SPEC.read_text())["components"]["schemas"]  # type: ignore[no-any-return]


def test_spec_copy_is_the_reference_one() -> None:
    digest = hashlib.sha256(SPEC.read_bytes()).hexdigest()
    assert digest == "a8f5aebc4338883270a5d97f8b9a89ba4b7838d1c99f0a8392e117937caba57c"


@pytest.mark.parametrize(
    ("model", "schema"),
    [
        (PodCreateInput, "PodCreateInput"),
        (NetworkVolumeCreateInput, "NetworkVolumeCreateInput"),
        (NetworkVolume, "NetworkVolume"),
    ],
)
def test_field_names_exist_in_spec(
    model: type[BaseModel], schema: str, schemas: dict[str, Any]
) -> None:
    assert set(model.model_fields) <= set(schemas[schema]["properties"])


def test_pod_fields_exist_in_spec_except_documented_extra(schemas: dict[str, Any]) -> None:
    extra = set(Pod.model_fields) - set(schemas["Pod"]["properties"])
    assert extra == {"gpuCount"}  # documented in runpod.md's field list, absent from v1's Pod


def test_known_gpu_types_are_the_spec_enum(schemas: dict[str, Any]) -> None:
    enum = schemas["PodCreateInput"]["properties"]["gpuTypeIds"]["items"]["enum"]
    assert list(KNOWN_GPU_TYPE_IDS) == enum


def test_input_rejects_unknown_field() -> None:
    with pytest.raises(ValidationError):
        PodCreateInput(gpuTypeId="NVIDIA H200")  # type: ignore[call-arg]


def test_body_holds_only_what_was_set() -> None:
    body = PodCreateInput(gpuTypeIds=["NVIDIA H200"], gpuCount=2).body()
    assert body == {"gpuTypeIds": ["NVIDIA H200"], "gpuCount": 2}


def test_pod_tolerates_unknown_fields_and_string_cost() -> None:
    pod = Pod.model_validate(
        {
            "id": "abc",
            "costPerHr": "0.74",
            "brandNewField": {"x": 1},
            "gpu": {"id": "G", "count": 2},
            "portMappings": {"22": 10341},
            "publicIp": "100.65.0.119",
            "desiredStatus": "RUNNING",
        }
    )
    assert pod.costPerHr == pytest.approx(0.74)
    assert (pod.gpu_type_id, pod.gpu_count, pod.ssh_port) == ("G", 2, 10341)
    assert pod.ssh_ready()


def test_pod_not_ready_while_ports_empty() -> None:
    pod = Pod.model_validate({"id": "a", "desiredStatus": "RUNNING", "portMappings": {}})
    assert not pod.ssh_ready()


def test_env_is_never_in_repr_or_record() -> None:
    pod = Pod.model_validate({"id": "a", "env": {"HF_TOKEN": "hf_secretvalue"}})
    assert "hf_secretvalue" not in repr(pod)
    assert "hf_secretvalue" not in json.dumps(pod.to_record())
    body = PodCreateInput(env={"HF_TOKEN": "hf_secretvalue"})
    assert "hf_secretvalue" not in repr(body)


def test_facade_exports_everything_it_lists() -> None:
    import proctor.targets.runpod as facade

    assert sorted(facade.__all__) == sorted(set(facade.__all__))
    for name in facade.__all__:
        assert getattr(facade, name) is not None

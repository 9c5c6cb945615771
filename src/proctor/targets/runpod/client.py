"""A typed, synchronous client for the Runpod REST API v1 (`rest-v1-openapi.json`).

This is the one boundary that sees httpx and the API's HTTP errors; everything leaves it as a
`proctor.errors.ProctorError`:

    httpx.TransportError / timeout      -> TargetUnavailable   (69)
    5xx, 429                            -> TargetUnavailable   (69)
    400 "no longer any instances ..."   -> SoldOut             (69, the API's own message)
    401 / 403                           -> UsageError          (64, with a hint about the key)
    404                                 -> NotFound            (69)
    other 4xx                           -> UsageError          (64, the API's message)
    a response that does not parse      -> TargetUnavailable   (69)

The API key lives only in the Authorization header; it is never in a message, a repr or a log
line, and any echo of it in an API message is redacted.

v1 has no GPU-type or data-center listing (v2 has /v2/catalog/gpus); `KNOWN_GPU_TYPE_IDS` in
models.py is the spec's static enum.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pydantic

from proctor.errors import NotAuthorised, TargetUnavailable, UsageError, validation_problem
from proctor.targets.runpod.models import (
    NetworkVolume,
    NetworkVolumeCreateInput,
    Pod,
    PodCreateInput,
)

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

_M = TypeVar("_M", bound=pydantic.BaseModel)

DEFAULT_BASE_URL = "https://rest.runpod.io/v1"
API_URL_ENV = "PROCTOR_RUNPOD_API_URL"
API_KEY_ENV = "RUNPOD_API_KEY"
KEY_HINT = f"set {API_KEY_ENV} or [default] api_key in ~/.runpod/config.toml"

# Substrings (lower-cased) of the API's answer when the requested GPUs are not free.
_SOLD_OUT_MARKERS = (
    "no longer any instances available",
    "sold out",
    "not enough free gpus",
    "no instances available",
)


class NotFound(TargetUnavailable):
    """The pod or volume does not exist (or no longer does: terminated pods vanish)."""


class SoldOut(TargetUnavailable):
    """No GPU of the requested type is free; the message is the API's own."""


class ApiUnavailable(TargetUnavailable):
    """The API could not be reached or answered with a server error."""

    def __init__(self, message: str, *, status: int | None = None, hint: str | None = None):
        super().__init__(message, hint=hint)
        self.status = status


def default_config_path() -> Path:
    return Path.home() / ".runpod" / "config.toml"


def resolve_api_key(
    explicit: str | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    config_path: Path | None = None,
) -> str:
    """The API key from the argument, then `RUNPOD_API_KEY`, then ~/.runpod/config.toml."""
    if explicit:
        return explicit
    env = os.environ if environ is None else environ
    if env.get(API_KEY_ENV):
        return env[API_KEY_ENV]
    path = config_path or default_config_path()
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        data = {}
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as error:
        # The exception text can quote the file's content (the key): name only the file.
        raise UsageError(
            f"cannot read Runpod config {path} ({type(error).__name__})",
            hint="fix the file's TOML or " + KEY_HINT,
        ) from None
    key = data.get("default", {}).get("api_key") if isinstance(data.get("default"), dict) else None
    if isinstance(key, str) and key:
        return key
    raise UsageError("no Runpod API key found", hint=KEY_HINT)


def resolve_base_url(
    explicit: str | None = None, *, environ: Mapping[str, str] | None = None
) -> str:
    env = os.environ if environ is None else environ
    return (explicit or env.get(API_URL_ENV) or DEFAULT_BASE_URL).rstrip("/")


class _Secret:
    """Holds the key so that no repr, str or traceback local shows it."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "<redacted>"

    __str__ = __repr__


class RunpodClient:
    """Runpod REST v1: pods and network volumes. One instance per API key; close() or use `with`."""

    def __init__(
        self,
        api_key: str | None = None,
        base_url: str | None = None,
        timeout: float = 30.0,
        *,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self._key = _Secret(resolve_api_key(api_key))
        self.base_url = resolve_base_url(base_url)
        self._http = httpx.Client(
            base_url=self.base_url,
            timeout=timeout,
            transport=transport,
            headers={"Authorization": f"Bearer {self._key.reveal()}", "Accept": "application/json"},
            follow_redirects=False,
        )

    def __repr__(self) -> str:
        return f"RunpodClient(base_url={self.base_url!r})"

    def __enter__(self) -> RunpodClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    # --- pods -------------------------------------------------------------------------------

    def list_pods(
        self,
        *,
        desired_status: str | None = None,
        name: str | None = None,
        include_machine: bool = True,
        include_network_volume: bool = True,
    ) -> list[Pod]:
        params: dict[str, str] = {
            "includeMachine": _flag(include_machine),
            "includeNetworkVolume": _flag(include_network_volume),
        }
        if desired_status:
            params["desiredStatus"] = desired_status
        if name:
            params["name"] = name
        data = self._request("GET", "/pods", params=params)
        return _parse_list(Pod, data, "GET /pods")

    def get_pod(self, pod_id: str) -> Pod:
        params = {"includeMachine": "true", "includeNetworkVolume": "true"}
        data = self._request("GET", f"/pods/{_seg(pod_id)}", params=params, what=f"pod {pod_id}")
        return _parse(Pod, data, "GET /pods/{podId}")

    def create_pod(self, spec: PodCreateInput) -> Pod:
        data = self._request("POST", "/pods", json=spec.body())
        return _parse(Pod, data, "POST /pods")

    def start_pod(self, pod_id: str) -> None:
        self._request("POST", f"/pods/{_seg(pod_id)}/start", what=f"pod {pod_id}")

    def stop_pod(self, pod_id: str) -> None:
        self._request("POST", f"/pods/{_seg(pod_id)}/stop", what=f"pod {pod_id}")

    def terminate_pod(self, pod_id: str, *, allow_terminate: bool) -> None:
        """DELETE the pod: destroys everything not on a network volume. Needs the user's word."""
        if not allow_terminate:
            raise NotAuthorised(
                f"terminating pod {pod_id} deletes its disk; proctor stops pods unless told",
                flag="--allow-terminate",
            )
        self._request("DELETE", f"/pods/{_seg(pod_id)}", what=f"pod {pod_id}")

    # --- network volumes --------------------------------------------------------------------

    def list_network_volumes(self) -> list[NetworkVolume]:
        data = self._request("GET", "/networkvolumes")
        return _parse_list(NetworkVolume, data, "GET /networkvolumes")

    def create_network_volume(self, spec: NetworkVolumeCreateInput) -> NetworkVolume:
        data = self._request("POST", "/networkvolumes", json=spec.body())
        return _parse(NetworkVolume, data, "POST /networkvolumes")

    # --- transport --------------------------------------------------------------------------

    def _request(
        self,
        method: str,
        path: str,
        *,
        params: dict[str, str] | None = None,
        json: dict[str, Any] | None = None,
        what: str | None = None,
    ) -> Any:
        where = f"{method} {self.base_url}{path}"
        try:
            response = self._http.request(method, path, params=params, json=json)
        except httpx.TimeoutException:
            raise ApiUnavailable(
                f"Runpod API timed out: {where}", hint="retry later or check the network"
            ) from None
        except httpx.HTTPError as error:
            raise ApiUnavailable(
                f"cannot reach the Runpod API: {where} ({type(error).__name__})",
                hint=f"check the network, or the API URL ({API_URL_ENV} / --api-url)",
            ) from None
        status = response.status_code
        if status < 300:
            if status == 204 or not response.content:
                return None
            try:
                return response.json()
            except ValueError:
                raise ApiUnavailable(
                    f"Runpod API answered {where} with a body that is not JSON", status=status
                ) from None
        message = self._redact(_api_message(response))
        if status in (401, 403):
            raise UsageError(
                f"Runpod API refused the API key ({status}) on {method} {path}: {message}",
                hint=KEY_HINT + " with a valid key that may manage pods",
            )
        if status == 404:
            raise NotFound(f"{what or path} not found in Runpod ({message})")
        if any(marker in message.lower() for marker in _SOLD_OUT_MARKERS):
            raise SoldOut(
                f"Runpod: {message}",
                hint="choose another GPU type, data center or cloud type, or try later",
            )
        if status == 429 or status >= 500:
            raise ApiUnavailable(
                f"Runpod API error {status} on {method} {path}: {message}",
                status=status,
                hint="retry later; see https://uptime.runpod.io",
            )
        raise UsageError(f"Runpod API rejected {method} {path} ({status}): {message}")

    def _redact(self, text: str) -> str:
        key = self._key.reveal()
        return text.replace(key, "<redacted>") if key else text


def _api_message(response: httpx.Response) -> str:
    try:
        data = response.json()
    except ValueError:
        data = None
    if isinstance(data, dict):
        for field in ("error", "message", "detail"):
            if isinstance(data.get(field), str) and data[field]:
                return _one_line(data[field])
    text = response.text.strip()
    return _one_line(text) if text else response.reason_phrase or f"HTTP {response.status_code}"


def _one_line(text: str, limit: int = 300) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def _flag(value: bool) -> str:
    return "true" if value else "false"


def _seg(value: str) -> str:
    """A path segment: ids are plain tokens; anything else is a usage error, not a new path."""
    if not value or any(c in value for c in "/?#%") or value in (".", ".."):
        raise UsageError(
            f"not a Runpod id: {value!r}", hint="pass the id shown by `proctor pod list`"
        )
    return value


def _parse(model: type[_M], data: Any, what: str) -> _M:
    try:
        return model.model_validate(data)
    except pydantic.ValidationError as error:
        raise ApiUnavailable(
            validation_problem(error, what=f"unexpected response to {what}")
        ) from None


def _parse_list(model: type[_M], data: Any, what: str) -> list[_M]:
    if not isinstance(data, list):
        raise ApiUnavailable(f"unexpected response to {what}: expected a JSON array")
    return [_parse(model, item, what) for item in data]

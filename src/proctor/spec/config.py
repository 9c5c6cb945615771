"""proctor.toml: found at the project root, parsed once, validated with the field path in errors.

The file is optional. Tables other than those modelled here (engines, models, flows, targets)
are kept raw in `extra` for the modules that own them.
"""

from __future__ import annotations

import errno
import math
import os
import re
import sys
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from proctor.errors import ConfigError, invalid
from proctor.spec.envnames import EnvTable

# The store's file name, next to the run directories unless [store] path says otherwise.
STORE_NAME = "proctor.sqlite"

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

CONFIG_NAME = "proctor.toml"


class RunDefaults(BaseModel):
    model_config = ConfigDict(extra="forbid")

    runs_dir: str | None = None
    gpu_sample: float | None = Field(default=None, ge=0)
    # Run even when the GPU preflight fails (docs/gpu-health.md).
    allow_unhealthy_gpu: bool | None = None
    grace: str | None = None
    timeout: str | None = None
    env: EnvTable = Field(default_factory=dict)
    secret_names: list[str] = Field(default_factory=list)


class StoreConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str | None = None


class ProjectConfig(BaseModel):
    """proctor.toml, validated: [run] defaults, [store], engine and model profiles, other tables."""

    model_config = ConfigDict(extra="allow")

    run: RunDefaults = Field(default_factory=RunDefaults)
    store: StoreConfig = Field(default_factory=StoreConfig)

    # Where the file was read from; None when there is none.
    source_path: Path | None = Field(default=None, exclude=True)

    def table(self, name: str) -> dict[str, Any]:
        """A raw top-level table owned by another module (engines, models, runpod, ...)."""
        value = (self.model_extra or {}).get(name, {})
        return dict(value) if isinstance(value, dict) else {}


def find_project_root(start: Path | None = None) -> Path:
    """The nearest directory upwards holding proctor.toml or .git; else the start directory."""
    here = (start or Path.cwd()).resolve()
    for candidate in (here, *here.parents):
        # lexists: a proctor.toml that is a directory, a broken link or a link loop is still
        # the project's config, and reading it says what is wrong with it.
        if os.path.lexists(candidate / CONFIG_NAME) or (candidate / ".git").exists():
            return candidate
    return here


def read_toml(path: Path) -> dict[str, Any]:
    """A TOML file as a table; bad bytes or bad TOML are a ConfigError naming file and place.
    FileNotFoundError is left to the caller, which knows what the file was for."""
    try:
        raw = path.read_bytes()
    except IsADirectoryError:
        raise ConfigError(f"{path} is a directory, not a TOML file") from None
    except FileNotFoundError:
        raise
    except OSError as error:  # permission, a loop of symbolic links, an I/O error
        reason = "a loop of symbolic links" if error.errno == errno.ELOOP else error.strerror
        raise ConfigError(f"cannot read {path}: {reason or error}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ConfigError(
            f"{path}: not UTF-8 text: byte 0x{raw[error.start]:02x} at offset {error.start}",
            hint="TOML files must be UTF-8; re-save the file as UTF-8",
        ) from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{path}: invalid TOML: {error}") from None
    where = _non_finite(data)
    if where is not None:
        key, value = where
        raise ConfigError(
            f"{path}: {key} = {value}: not a finite number",
            hint=f"give {key} a number (nan and inf mean nothing in a proctor setting)",
        )
    return data


def _key_text(key: object) -> str:
    """A key of a location as typed, quoted when it holds more than a bare TOML key may."""
    text = str(key)
    return text if re.fullmatch(r"[A-Za-z0-9_-]+", text) else repr(text)


def _non_finite(value: Any, key: str = "") -> tuple[str, float] | None:
    """The first nan/inf float in a TOML document (TOML allows them; no setting means
    anything by them, and they would reach plan.json as tokens that are not JSON)."""
    if isinstance(value, float) and not math.isfinite(value):
        return key, value
    items = (
        value.items()
        if isinstance(value, dict)
        else (enumerate(value) if isinstance(value, list) else ())
    )
    for name, inner in items:
        name_text = _key_text(name)
        found = _non_finite(inner, f"{key}.{name_text}" if key else name_text)
        if found is not None:
            return found
    return None


def load_config(path: Path | None = None, *, start: Path | None = None) -> ProjectConfig:
    """The proctor.toml at `path`, or the nearest one above `start` (or the working directory);
    empty defaults when there is none."""
    found = path is None
    if path is None:
        candidate = find_project_root(start) / CONFIG_NAME
        if not os.path.lexists(candidate):
            return ProjectConfig()
        path = candidate
    try:
        data = read_toml(path)
    except FileNotFoundError:
        if found:  # found by name, yet unreadable: a symbolic link to nothing
            raise ConfigError(
                f"{path} is a symbolic link to a file that does not exist",
                hint=f"fix or remove {path}",
            ) from None
        raise ConfigError(f"config file {path} not found", hint="check the --config path") from None
    try:
        config = ProjectConfig.model_validate(data)
    except ValidationError as error:
        raise invalid(
            error, what=str(path), hint=f"fix it in {path.name}", cls=ConfigError
        ) from None
    config.source_path = path
    return config

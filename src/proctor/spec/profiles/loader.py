"""Load profiles: built-in TOML files first, then the user's proctor.toml tables on top.

Built-ins are ordinary proctor.toml fragments shipped as package data (`*.toml` next to this
module), read through the same `load_profiles` path as a user's file: there is no second
mechanism. A user table for an existing name overrides it key by key (so `[engines.vllm]
python = "/venv/bin/python"` keeps everything else); a new name defines a new profile.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, TypeVar

from pydantic import ValidationError

from proctor.errors import ConfigError, invalid
from proctor.spec.profiles.models import AddonProfile, EngineProfile, FaultSet, ModelProfile

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

SECTIONS = ("engines", "models", "addons", "fault_sets")


def builtin_table() -> dict[str, Any]:
    """The merged table of every built-in profile file, in file-name order."""
    merged: dict[str, Any] = {}
    files = sorted(
        (f for f in resources.files(__package__).iterdir() if f.name.endswith(".toml")),
        key=lambda f: f.name,
    )
    for entry in files:
        try:
            table = tomllib.loads(entry.read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError as exc:  # a packaging bug, but say where
            raise ConfigError(f"built-in profile file {entry.name} is invalid: {exc}") from exc
        merged = merge_tables(merged, table)
    return merged


def merge_tables(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """Merge the `engines`/`models`/`addons` sections; per profile, keys of `override` win."""
    out: dict[str, Any] = {s: {k: dict(v) for k, v in base.get(s, {}).items()} for s in SECTIONS}
    for section in SECTIONS:
        table = override.get(section, {})
        if not isinstance(table, Mapping):
            raise ConfigError(f"[{section}] must be a table of named profiles")
        for name, body in table.items():
            if not isinstance(body, Mapping):
                raise ConfigError(
                    f"{section}.{name} must be a table",
                    hint=f"write it as [{section}.{name}] with keys below it",
                )
            out[section][name] = {**out[section].get(name, {}), **body}
    return out


P = TypeVar("P")


def _known(profiles: dict[str, P], name: str, what: str, table: str) -> P:
    """The profile `name`, or a ConfigError listing the known ones and the table to define."""
    if name not in profiles:
        raise ConfigError(
            f"unknown {what} {name!r}",
            hint=f"known: {', '.join(sorted(profiles))}; or define {table}",
        )
    return profiles[name]


@dataclass
class ProfileSet:
    engines: dict[str, EngineProfile] = field(default_factory=dict)
    models: dict[str, ModelProfile] = field(default_factory=dict)
    addons: dict[str, AddonProfile] = field(default_factory=dict)
    fault_sets: dict[str, FaultSet] = field(default_factory=dict)
    origins: dict[str, str] = field(default_factory=dict)  # "engines.vllm" -> "built-in"/...

    def engine(self, name: str) -> EngineProfile:
        return _known(self.engines, name, "engine profile", f"[engines.{name}]")

    def model(self, name: str) -> ModelProfile:
        return _known(self.models, name, "model profile", f'[models."{name}"]')

    def addon(self, name: str) -> AddonProfile:
        return _known(self.addons, name, "add-on", f"[addons.{name}]")

    def resolve_model(
        self, name: str | None, model_path: str, engine: EngineProfile
    ) -> ModelProfile:
        """Named profile > first profile matching the path > the default > an empty profile.

        Only profiles written for `engine` are matched or defaulted; a named one that is not
        is a config error (its args would be wrong for that engine's CLI).
        """
        if name is not None:
            profile = self.model(name)
            if not profile.supports(engine.name):
                raise ConfigError(
                    f"model profile {name!r} is written for {', '.join(profile.engines or [])},"
                    f" not {engine.name}",
                    hint=f"pick a profile for {engine.name} or add it to `engines` of {name!r}",
                )
            return profile
        candidates = [p for p in self.models.values() if p.supports(engine.name)]
        # Longest matching pattern first: "DeepSeek-R1-0528-MXFP4" beats "DeepSeek-R1".
        best: tuple[int, ModelProfile] | None = None
        for profile in candidates:
            for pattern in profile.match:
                if re.search(pattern, model_path, re.IGNORECASE) and (
                    best is None or len(pattern) > best[0]
                ):
                    best = (len(pattern), profile)
        if best is not None:
            return best[1]
        # A user's default beats a built-in one.
        defaults = sorted(
            (p for p in candidates if p.default),
            key=lambda p: self.origins.get(f"models.{p.name}") == "built-in",
        )
        if defaults:
            return defaults[0]
        return ModelProfile(name="(none)")


def _included(result: ProfileSet, engine: str, body: Mapping[str, Any]) -> list[str]:
    """The patterns of the fault sets an engine names (the loader's to fill, never the user's)."""
    names = body.get("fault_sets", ["gpu"])
    if not isinstance(names, list):
        return []  # the model's validation says what is wrong
    patterns: list[str] = []
    for set_name in names:
        if set_name not in result.fault_sets:
            raise ConfigError(
                f"engines.{engine}.fault_sets: unknown fault set {set_name!r}",
                hint=f"known: {', '.join(sorted(result.fault_sets))};"
                f" or define [fault_sets.{set_name}]",
            )
        patterns.extend(result.fault_sets[set_name].patterns)
    return patterns


def load_profiles(
    user_table: Mapping[str, Any] | None = None, *, origin: str = "proctor.toml"
) -> ProfileSet:
    """Built-in profiles plus `user_table` (the parsed proctor.toml, or any dict of its shape)."""
    builtin = builtin_table()
    merged = merge_tables(builtin, user_table or {})
    result = ProfileSet()
    kinds: dict[
        str, type[FaultSet] | type[EngineProfile] | type[ModelProfile] | type[AddonProfile]
    ] = {
        "fault_sets": FaultSet,  # first: engines include them by name
        "engines": EngineProfile,
        "models": ModelProfile,
        "addons": AddonProfile,
    }
    user = user_table or {}
    for section, model_cls in kinds.items():
        for name, body in merged[section].items():
            try:
                if section == "engines":
                    body = {**body, "included_fault_patterns": _included(result, name, body)}
                profile = model_cls.model_validate({**body, "name": name})
            except ValidationError as exc:
                raise invalid(
                    exc,
                    what="invalid profile",
                    at=f"{section}.{name}",
                    hint=f"fix [{section}.{name}] in {origin}",
                    cls=ConfigError,
                ) from None
            getattr(result, section)[name] = profile
            in_user = name in user.get(section, {})
            in_builtin = name in builtin.get(section, {})
            result.origins[f"{section}.{name}"] = (
                f"built-in, overridden in {origin}"
                if in_user and in_builtin
                else origin
                if in_user
                else "built-in"
            )
    # Two defaults for one engine from the same source is ambiguous; a user's beats a built-in.
    seen: dict[tuple[str, bool], str] = {}
    for model in result.models.values():
        if not model.default:
            continue
        builtin_only = result.origins[f"models.{model.name}"] == "built-in"
        for engine in model.engines or list(result.engines):
            key = (engine, builtin_only)
            if key in seen:
                raise ConfigError(
                    f"two default model profiles for {engine}: {seen[key]!r} and {model.name!r}",
                    hint="set default = false on one of them",
                )
            seen[key] = model.name
    return result

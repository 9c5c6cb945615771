"""Import ATOM's `.github/benchmark/models_accuracy.json` as model profiles.

Each entry becomes a `ModelProfile` for the atom engine: `env_vars` (newline-separated
`K=V`) becomes `env`, `extraArgs` (a shell-quoted string) becomes `args`, with `-tp N` /
`--tensor-parallel-size N` lifted into `tp` so the run's own --tp can override it.
`models_to_toml` writes the result as a proctor.toml fragment the user can keep.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from proctor.errors import ConfigError, invalid
from proctor.spec.profiles.models import ModelProfile

_TP_FLAGS = ("-tp", "--tensor-parallel-size", "--tp")


def _parse_env(text: str, where: str) -> dict[str, str]:
    env: dict[str, str] = {}
    for raw in text.replace("\r", "").split("\n"):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        for item in shlex.split(line):  # tolerate several K=V on one line
            key, sep, value = item.partition("=")
            if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
                raise ConfigError(
                    f"{where}: env_vars entry {item!r} is not NAME=VALUE",
                    hint="write one NAME=VALUE per line",
                )
            env[key] = value
    return env


def _split_tp(args: list[str]) -> tuple[list[str], int | None]:
    out: list[str] = []
    tp: int | None = None
    i = 0
    while i < len(args):
        arg = args[i]
        name, eq, inline = arg.partition("=")
        if name in _TP_FLAGS:
            value = inline if eq else (args[i + 1] if i + 1 < len(args) else "")
            i += 1 if eq else 2
            if value.isdigit():
                tp = int(value)
                continue
            out += [arg] if eq else [arg, value]
            continue
        out.append(arg)
        i += 1
    return out, tp


def import_models_accuracy(source: str | os.PathLike[str] | list[Any]) -> dict[str, ModelProfile]:
    """Model profiles from a models_accuracy.json file (or its already-parsed list)."""
    where = str(source) if not isinstance(source, list) else "models_accuracy.json"
    if isinstance(source, list):
        data: Any = source
    else:
        try:
            data = json.loads(Path(source).read_text(encoding="utf-8"))
        except OSError as exc:
            raise ConfigError(
                f"cannot read {where}: {exc.strerror}", hint="check the path"
            ) from exc
        except ValueError as exc:
            raise ConfigError(f"{where} is not valid JSON: {exc}", hint="fix the file") from exc
    if not isinstance(data, list):
        raise ConfigError(f"{where}: expected a JSON array of model entries")
    profiles: dict[str, ModelProfile] = {}
    for n, entry in enumerate(data):
        at = f"{where}[{n}]"
        if not isinstance(entry, dict) or not isinstance(entry.get("model_name"), str):
            raise ConfigError(f"{at}: each entry needs a string model_name")
        name = entry["model_name"]
        try:
            args = shlex.split(str(entry.get("extraArgs") or ""))
        except ValueError as exc:
            raise ConfigError(f"{at}: extraArgs does not parse: {exc}") from exc
        args, tp = _split_tp(args)
        path = str(entry.get("model_path") or "")
        try:
            profile = ModelProfile(
                name=name,
                description=f"imported from models_accuracy.json ({path})" if path else "",
                engines=["atom"],
                # Exact model_path (its last component) as the match, so imports do not
                # shadow one another by accident.
                match=[re.escape(path.rstrip("/").split("/")[-1])] if path else [],
                env=_parse_env(str(entry.get("env_vars") or ""), at),
                args=args,
                tp=tp,
                accuracy_threshold=entry.get("accuracy_threshold"),
                accuracy_baseline=entry.get("accuracy_baseline"),
                mtp_accept_threshold=entry.get("mtp_accept_threshold"),
            )
        except ValidationError as exc:
            raise invalid(
                exc, what="invalid entry", at=at, hint="fix the entry", cls=ConfigError
            ) from None
        profiles[name] = profile
    return profiles


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string is a valid TOML basic string
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return (
            "{ " + ", ".join(f"{json.dumps(k)} = {_toml_value(v)}" for k, v in value.items()) + " }"
        )
    raise TypeError(f"cannot write {type(value).__name__} as TOML")


def models_to_toml(profiles: dict[str, ModelProfile]) -> str:
    """A proctor.toml fragment with one [models."NAME"] table per profile."""
    out: list[str] = []
    for name, profile in profiles.items():
        out.append(f"[models.{json.dumps(name)}]")
        for key, value in profile.model_dump(exclude={"name"}, exclude_defaults=True).items():
            out.append(f"{key} = {_toml_value(value)}")
        out.append("")
    return "\n".join(out)

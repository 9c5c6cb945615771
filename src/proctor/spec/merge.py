"""The one merge of settings: flag > environment > proctor.toml > default, each with its origin.

Every setting proctor resolves (run plans, targets, Slurm, flows) goes through `Settings.pick`,
so the precedence and the origin strings shown by `proctor plan` are the same everywhere:
"flag", "env:NAME", "config:PATH" (or "flow file:PATH"), "default".
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from proctor.spec.values import Value

Parse = Callable[[Any], Any]


def _given(value: Any) -> bool:
    """A flag counts as given unless it is absent: None, "", [] and () are 'not given'."""
    return value is not None and value != "" and value != [] and value != ()


@dataclass(frozen=True)
class Settings:
    """The layers for one resolution. `flags` and `table` map a setting's name to its value;
    `env_names` maps a setting's name to the environment variable that may hold it."""

    flags: Mapping[str, Any] = field(default_factory=dict)
    table: Mapping[str, Any] = field(default_factory=dict)
    table_origin: str = "config"
    environ: Mapping[str, str] = field(default_factory=lambda: os.environ)
    env_names: Mapping[str, str] = field(default_factory=dict)

    def pick(
        self, name: str, default: Any = None, *, parse: Parse | None = None, key: str | None = None
    ) -> Value:
        """The first layer that gives `name`; `key` is its name in the table when it differs.
        `parse` turns a given value into its typed form (a default is used as it is)."""
        convert = parse or (lambda v: v)
        flag = self.flags.get(name)
        if _given(flag):
            return Value(convert(flag), "flag")
        variable = self.env_names.get(name)
        if variable and self.environ.get(variable):
            return Value(convert(self.environ[variable]), f"env:{variable}")
        conf = self.table.get(key or name)
        if _given(conf):
            return Value(convert(conf), self.table_origin)
        return Value(default, "default")

    def value(
        self, name: str, default: Any = None, *, parse: Parse | None = None, key: str | None = None
    ) -> Any:
        return self.pick(name, default, parse=parse, key=key).value


def config_origin(source_path: object) -> str:
    return f"config:{source_path}" if source_path else "config"


__all__ = ["Settings", "Value", "config_origin"]

"""Environment variables as a process can hold them: one rule for --env flags and every env
table of proctor.toml (run defaults, engine, model and add-on profiles).

A name is a C identifier (letters, digits, `_`, not starting with a digit): a shell cannot set
or read any other, and `=` in a name would be split by the kernel's `NAME=VALUE` form. Neither
name nor value may hold a NUL byte, which the kernel cannot pass at all.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
NAME_RULE = "letters, digits and _, not starting with a digit"


def env_name_problem(name: str) -> str | None:
    """Why `name` cannot be an environment variable's name, or None."""
    if _NAME.fullmatch(name):
        return None
    return f"invalid environment variable name {name!r} ({NAME_RULE})"


def env_value_problem(name: str, value: str) -> str | None:
    """Why `value` cannot be the value of `name`, or None."""
    if "\0" in value:
        return f"the value of {name} holds a NUL byte, which no process environment can carry"
    return None


def _name(name: str) -> str:
    problem = env_name_problem(name)
    if problem:
        raise ValueError(problem)
    return name


def _table(table: dict[str, str]) -> dict[str, str]:
    for name, value in table.items():
        problem = env_value_problem(name, value)
        if problem:
            raise ValueError(problem)
    return table


#: An env table in a pydantic model: names and values checked when the file is read.
EnvTable = Annotated[dict[Annotated[str, AfterValidator(_name)], str], AfterValidator(_table)]

__all__ = ["NAME_RULE", "EnvTable", "env_name_problem", "env_value_problem"]

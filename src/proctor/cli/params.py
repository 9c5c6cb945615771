"""Every float option of every command is finite.

Click's FLOAT takes `nan`, `inf` and `1e309` (which overflows to inf) as numbers, and a range
check lets nan through (every comparison with nan is false). No proctor option means anything
by them (an interval, a timeout, a rate, a budget), and they would reach plan.json as tokens
that are not JSON. So the whole command tree is swept once, before parsing: each float
parameter gets the same type, refusing a non-finite value in one line as bad usage (64).
"""

from __future__ import annotations

import math
from typing import Any

import click

from proctor.errors import UsageError


def _finite(value: Any, out: Any, param: click.Parameter | None) -> Any:
    if isinstance(out, float) and not math.isfinite(out):
        # proctor's own one line (exit 64), as for every other bad number or duration.
        name = max(param.opts, key=len) if param is not None and param.opts else "value"
        raise UsageError(
            f"{name} {value}: not a finite number", hint=f"give {name} a number such as 1.5"
        )
    return out


class FiniteFloat(click.types.FloatParamType):
    def convert(self, value: Any, param: Any, ctx: Any) -> Any:
        return _finite(value, super().convert(value, param, ctx), param)


class FiniteFloatRange(click.FloatRange):
    def convert(self, value: Any, param: Any, ctx: Any) -> Any:
        return _finite(value, super().convert(value, param, ctx), param)


def finite_floats(command: click.Command) -> click.Command:
    """`command` with every float parameter (its subcommands' too) refusing nan and inf."""
    for param in command.params:
        kind = param.type
        if type(kind) is click.types.FloatParamType:
            param.type = FiniteFloat()
        elif type(kind) is click.FloatRange:
            param.type = FiniteFloatRange(
                kind.min,
                kind.max,
                min_open=kind.min_open,
                max_open=kind.max_open,
                clamp=kind.clamp,
            )
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            finite_floats(sub)
    return command

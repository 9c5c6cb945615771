"""`python -m proctor.cli.request`: one proctor command from a JSON CommandRequest on stdin.

The far side of `--target` for serve, drain and inspect (bench, sweep, eval, offline, flow and
sweep --server-grid send a typed Submission instead: `python -m proctor.jobs submit`): the
request names
the command and the values of the parameters the user set; each value is cast through the
command's own parameter type and the command is invoked, with the exit-code mapping of
`proctor` itself. Nothing is rebuilt into a command line and parsed again.
"""

from __future__ import annotations

import sys
from enum import Enum
from typing import Any

import click
import typer
from click.core import ParameterSource

from proctor.cli import output
from proctor.errors import UsageError, invalid
from proctor.targets.remote.requests import CommandRequest, JsonValue

# Options whose meaning is local (where the local runs go, how output is shown): not sent.
LOCAL_ONLY = {"target", "runs_dir", "as_json", "json_out"}


def command_names(ctx: click.Context) -> list[str]:
    """["serve", "start"] for `proctor serve start`."""
    names: list[str] = []
    while ctx.parent is not None:
        names.append(str(ctx.info_name))
        ctx = ctx.parent
    return names[::-1]


def _json(value: Any) -> JsonValue:
    if isinstance(value, (list, tuple)):
        return [
            v if isinstance(v, (str, int, float, bool)) else str(v)
            for v in (_json(x) for x in value)
        ]
    if isinstance(value, Enum):
        return _json(value.value)
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)  # Path and other scalars: their text, cast back on the far side


def request_of(ctx: click.Context, *, as_json: bool = False) -> CommandRequest:
    """The current command as a request: its names and every parameter the user set (defaults
    stay the far side's defaults); its --json flag on where `as_json`."""
    params: dict[str, JsonValue] = {}
    for param in ctx.command.params:
        name = param.name
        if name is None or name in LOCAL_ONLY:
            continue
        value = ctx.params.get(name)
        if ctx.get_parameter_source(name) in (None, ParameterSource.DEFAULT) or value is None:
            continue
        params[name] = _json(value)
    if as_json:
        for param in ctx.command.params:
            if isinstance(param, click.Option) and "--json" in param.opts and param.name:
                params[param.name] = True
    return CommandRequest(command=command_names(ctx), params=params)


def invoke(request: CommandRequest) -> Any:
    """Build the command's context from the request (types cast by the command's parameters)
    and invoke it."""
    from proctor.cli import groups
    from proctor.cli.main import app

    groups.mount(app, list(request.command))
    cmd: click.Command = typer.main.get_command(app)
    ctx = click.Context(cmd, info_name="proctor")
    for name in request.command:
        sub = cmd.get_command(ctx, name) if isinstance(cmd, click.Group) else None
        if sub is None:
            raise UsageError(f"unknown command {request.title()!r}")
        # Resilient: no command line to check; values come from the request below.
        ctx = sub.make_context(name, [], parent=ctx, resilient_parsing=True)
        cmd = sub
    ctx.resilient_parsing = False
    # A request with the command's --json on (the near side's --json, or an answer it keeps):
    # every error here is one JSON object on stdout too (output.print_json_error), which the
    # near side reads back as the far reason and fix.
    output.json_errors(any(request.params.get(name) is True for name in _json_params(cmd)))
    known = {p.name: p for p in cmd.params if p.name}
    for name, value in request.params.items():
        param = known.get(name)
        if param is None:
            raise UsageError(
                f"{request.title()}: no parameter {name!r}",
                hint="the far proctor differs from this one",
            )
        ctx.params[name] = param.type_cast_value(ctx, value)
        ctx.set_parameter_source(name, ParameterSource.COMMANDLINE)
    with ctx:
        return cmd.invoke(ctx)


def _json_params(cmd: click.Command) -> list[str]:
    """The names of the command's --json options."""
    return [
        p.name for p in cmd.params if isinstance(p, click.Option) and "--json" in p.opts and p.name
    ]


def main() -> int:
    from proctor.cli.main import guarded

    raw = sys.stdin.read()

    def go() -> Any:
        from pydantic import ValidationError

        try:
            request = CommandRequest.model_validate_json(raw)
        except ValidationError as error:
            raise invalid(error, what="proctor request") from None
        return invoke(request)

    try:
        return guarded(go, ["proctor", "request"])
    finally:
        output.json_errors(False)


if __name__ == "__main__":
    from proctor.redact import mask_output

    mask_output()
    sys.exit(main())


__all__ = ["LOCAL_ONLY", "command_names", "invoke", "main", "request_of"]

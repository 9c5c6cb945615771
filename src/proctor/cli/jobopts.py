"""A command's options made from a job model's fields (jobs/options.py): each flag, default and
help is declared once, on the field, and the bench, sweep and flow commands take them all.

`job_command(impl, JobGroup(...), ...)` gives typer a function whose signature is the command's
own options (`impl`'s typer parameters) followed by one option per flagged field of each
group's model; `impl` is called with the own options by name and a `JobValues` per group.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import click
import typer
from pydantic import BaseModel

from proctor.jobs import options as jobopts


@dataclass(frozen=True)
class JobValues:
    """What the command line gave for a job's fields: every value (parsed to the field's form)
    and the names the user set (the rest are defaults, which a flow file or profile may fill)."""

    values: dict[str, Any]
    given: frozenset[str]

    def set_by_user(self) -> dict[str, Any]:
        return {k: v for k, v in self.values.items() if k in self.given}


def job_parameters(
    model: type[BaseModel], *, skip: tuple[str, ...] = (), help_prefix: Mapping[str, str] = {}
) -> list[inspect.Parameter]:
    """One typer option per flagged field of `model` (but `skip`), its help the description."""
    params = []
    for name, (info, opt) in jobopts.options(model).items():
        if name in skip:
            continue
        decls = [opt.flag] + ([opt.short] if opt.short else [])
        help_text = help_prefix.get(name, "") + (info.description or "")
        default = typer.Option(
            jobopts.cli_default(info, opt), *decls, help=help_text, metavar=opt.metavar
        )
        annotation = opt.cli_type if opt.cli_type is not None else jobopts.field_type(info)
        if jobopts.field_type(info) is not info.annotation and opt.cli_type is None:
            annotation = annotation | None
        params.append(
            inspect.Parameter(
                name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation
            )
        )
    return params


def job_values(
    model: type[BaseModel], kwargs: dict[str, Any], *, skip: tuple[str, ...] = ()
) -> JobValues:
    """Pops the job's fields out of a command's keyword arguments, parsed to the fields' form."""
    ctx = click.get_current_context()
    values: dict[str, Any] = {}
    given = set()
    for name, (_, opt) in jobopts.options(model).items():
        if name in skip or name not in kwargs:
            continue
        raw = kwargs.pop(name)
        values[name] = jobopts.parsed(opt, raw)
        source = ctx.get_parameter_source(name)
        if source not in (None, click.core.ParameterSource.DEFAULT):
            given.add(name)
    return JobValues(values, frozenset(given))


@dataclass(frozen=True)
class JobGroup:
    """One model whose fields become options, handed to the command as `param` (JobValues)."""

    param: str
    model: type[BaseModel]
    skip: tuple[str, ...] = ()
    help_prefix: Mapping[str, str] = field(default_factory=dict)


def job_command(impl: Callable[..., Any], *groups: JobGroup) -> Callable[..., Any]:
    """A function for typer: the command's own options (`impl`'s signature, typer style), then
    each group's model's; `impl` gets its own options by name and one JobValues per group (the
    parameters of `impl` named by the groups)."""
    mine = inspect.signature(impl, eval_str=True).parameters
    own = [p for name, p in mine.items() if name not in {g.param for g in groups}]
    generated = {
        g.param: job_parameters(g.model, skip=g.skip, help_prefix=g.help_prefix) for g in groups
    }
    names = [p.name for p in own] + [p.name for ps in generated.values() for p in ps]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise TypeError(f"options declared twice: {twice}")

    @functools.wraps(impl)
    def command(**kwargs: Any) -> Any:
        values = {g.param: job_values(g.model, kwargs, skip=g.skip) for g in groups}
        return impl(**values, **kwargs)

    ordered = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own]
    ordered += [p for ps in generated.values() for p in ps]
    command.__signature__ = inspect.Signature(ordered)  # type: ignore[attr-defined]
    command.__annotations__ = {}
    del command.__wrapped__  # typer must read the signature above, not impl's
    command.job_impl = impl  # type: ignore[attr-defined]
    return command


def own_options(command: Callable[..., Any]) -> set[str]:
    """The flags a generated command declares itself (not from a job model)."""
    impl = getattr(command, "job_impl", None)
    found: set[str] = set()
    for p in inspect.signature(impl or command).parameters.values():
        decls = getattr(p.default, "param_decls", None) or ()
        found |= {d for d in decls if d.startswith("--")}
    return found

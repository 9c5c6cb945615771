"""How a job's fields reach the command line and flow files: declared on the field, once.

A field carries `Opt` (its flag, and how a flag's text becomes the field's value) or `NoOpt` (why
it has no flag) in its `Annotated` metadata; its help is the field's description. The CLI builds
each command's options from these (cli/jobopts.py), a flow file's table is read through them
(`fields_from_table`), and tests/jobs/test_options.py fails when a field has neither.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import UnionType
from typing import TYPE_CHECKING, Any, TypeVar, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo

from proctor.errors import UsageError, invalid

if TYPE_CHECKING:
    import argparse  # imported where used: `proctor run`'s lean path reads these fields too

M = TypeVar("M", bound=BaseModel)


@dataclass(frozen=True)
class Opt:
    """The field's flag. `flag` may hold a negation (`--ignore-eos/--no-ignore-eos`); `parse`
    turns the flag's value (of `cli_type`) into the field's; `cli_default` is the flag's default
    where it is not the field's own (a switch standing for a value, a list given as text)."""

    flag: str
    short: str | None = None
    cli_type: Any = None  # None: the field's own type
    parse: Callable[[Any], Any] | None = None
    cli_default: Any = None
    multiple: bool = False  # repeatable (`--goodput A --goodput B`)
    optional_flag: bool = False  # a required field that a flow file may give instead
    metavar: str | None = None

    @property
    def name(self) -> str:
        """The flag's name without dashes or its negation: `--ignore-eos/--no-...` -> ignore-eos."""
        return self.flag.split("/")[0].lstrip("-")


@dataclass(frozen=True)
class NoOpt:
    """A field with no flag of its own, and why (what sets it instead)."""

    why: str


def option_of(info: FieldInfo) -> Opt | NoOpt | None:
    for meta in info.metadata:
        if isinstance(meta, Opt | NoOpt):
            return meta
    return None


def options(model: type[BaseModel]) -> dict[str, tuple[FieldInfo, Opt]]:
    """The fields of `model` that have a flag, in declaration order."""
    out = {}
    for name, info in model.model_fields.items():
        opt = option_of(info)
        if isinstance(opt, Opt):
            out[name] = (info, opt)
    return out


def unflagged(model: type[BaseModel]) -> dict[str, str]:
    """Fields with no flag -> why (`NoOpt`), or "" where the field declares neither."""
    out = {}
    for name, info in model.model_fields.items():
        opt = option_of(info)
        if not isinstance(opt, Opt):
            out[name] = opt.why if isinstance(opt, NoOpt) else ""
    return out


def cli_default(info: FieldInfo, opt: Opt) -> Any:
    """The flag's default as the command line shows and takes it."""
    if opt.cli_default is not None:
        return opt.cli_default
    if info.is_required():
        # A required option (click's and typer's marker), unless another source may give it
        # (a flow file's table): then the command checks it was given somewhere.
        return None if opt.optional_flag else ...
    default = info.get_default(call_default_factory=True)
    if isinstance(default, float) and math.isinf(default):
        return "inf"
    return default


def parsed(opt: Opt, value: Any) -> Any:
    """A flag's (or a flow table's) value as the field takes it."""
    if opt.parse is None or value is None:
        return value
    try:
        return opt.parse(value)
    except (TypeError, ValueError) as e:
        raise UsageError(f"invalid {opt.flag.split('/')[0]} {value!r}: {e}") from None


def lookup(model: type[BaseModel]) -> dict[str, str]:
    """Every name a flow-file key may use for a field -> the field: its own name and its flag's,
    each with `_` or `-`."""
    names: dict[str, str] = {}
    for field, info in model.model_fields.items():
        names[field] = field
        names[field.replace("_", "-")] = field
        opt = option_of(info)
        if isinstance(opt, Opt):
            names[opt.name] = field
            names[opt.name.replace("-", "_")] = field
    return names


def fields_from_table(
    model: type[BaseModel], table: Mapping[str, Any], *, where: str, skip: tuple[str, ...] = ()
) -> dict[str, Any]:
    """A flow file's table (keys: field or flag names, `_` or `-`) as field values, each flag's
    parse applied to text; an unknown key is a UsageError naming what is allowed."""
    names = lookup(model)
    opts = options(model)
    out: dict[str, Any] = {}
    for key, value in table.items():
        if key in skip:
            continue
        field = names.get(key)
        if field is None or isinstance(option_of(model.model_fields[field]), NoOpt):
            allowed = sorted({opt.name for _, opt in opts.values()})
            raise UsageError(
                f"{where}: unknown option {key!r}",
                hint="allowed: " + ", ".join(allowed),
            )
        if field in opts:
            _, opt = opts[field]
            if opt.parse is not None and (isinstance(value, str) or _switch(opt)):
                value = parsed(opt, value)
            elif opt.multiple and isinstance(value, str):
                value = parsed(opt, [value])
            elif opt.parse is not None and isinstance(value, list) and opt.multiple:
                value = parsed(opt, [str(v) for v in value])
        out[field] = value
    return out


def _switch(opt: Opt) -> bool:
    return opt.cli_type is bool


def validated(model: type[M], values: Mapping[str, Any], *, what: str, hint: str | None) -> M:
    """`model` from `values`, a rejection as the one usage error (field, value, what is allowed)."""
    try:
        return model.model_validate(dict(values))
    except ValidationError as e:
        raise invalid(e, what=what, hint=hint) from None


def field_type(info: FieldInfo) -> Any:
    """The field's type without `None` (`int | None` -> int), for the command line."""
    annotation = info.annotation
    if get_origin(annotation) not in (Union, UnionType):
        return annotation  # list[str] stays a list
    args = [a for a in get_args(annotation) if a is not type(None)]
    return args[0] if len(args) == 1 else annotation


def add_arguments(parser: argparse.ArgumentParser, model: type[BaseModel]) -> None:
    """`model`'s flags on an argparse parser (a module's own `python -m` entry), each one's
    value left out unless given (`values_given` reads them back)."""
    import argparse

    for name, (info, opt) in options(model).items():
        flags = [opt.flag.split("/")[0]] + ([opt.short] if opt.short else [])
        common: dict[str, Any] = {"dest": name, "default": argparse.SUPPRESS}
        if info.is_required():
            common["required"] = True
        common["help"] = (info.description or "").replace("%", "%%")
        kind = opt.cli_type if opt.cli_type is not None else field_type(info)
        if "/" in opt.flag:
            parser.add_argument(*flags, action=argparse.BooleanOptionalAction, **common)
        elif kind is bool:
            parser.add_argument(*flags, action="store_true", **common)
        elif opt.multiple:
            parser.add_argument(*flags, action="extend", nargs="+", metavar=opt.metavar, **common)
        else:
            kind = kind if kind in (int, float) else str
            parser.add_argument(*flags, type=kind, metavar=opt.metavar, **common)


def values_given(model: type[BaseModel], namespace: argparse.Namespace) -> dict[str, Any]:
    """The fields whose flags `add_arguments` saw given, parsed to the fields' form."""
    given = vars(namespace)
    return {
        name: parsed(opt, given[name]) for name, (_, opt) in options(model).items() if name in given
    }

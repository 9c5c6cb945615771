"""The eval and offline settings are declared once, on EvalJob and OfflineJob: every field has
its flag (`Opt`) or says why it has none (`NoOpt`), and `proctor eval gsm8k` and `proctor offline`
have exactly those flags plus their own run-control options (the typer parameters of their
implementing functions, other than the job's values).

The second test adds one bare field to a job and shows the check fails: a setting added without
a flag cannot slip through."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import click
import pytest
import typer
from pydantic import BaseModel

from proctor.cli.eval import _gsm8k
from proctor.cli.jobopts import JobGroup, job_command
from proctor.cli.offline import _offline
from proctor.jobs.eval import EvalJob
from proctor.jobs.offline import OfflineJob
from proctor.jobs.options import Opt, options, unflagged


def own_of(impl: Callable[..., Any]) -> list[inspect.Parameter]:
    """The command's own options: its implementing function's parameters but the job's."""
    return [p for p in inspect.signature(impl).parameters.values() if p.name != "job"]


COMMANDS: dict[str, tuple[type[BaseModel], Callable[..., Any], list[inspect.Parameter]]] = {
    "eval gsm8k": (EvalJob, _gsm8k, own_of(_gsm8k)),
    "offline": (OfflineJob, _offline, own_of(_offline)),
}
EVAL_OWN = COMMANDS["eval gsm8k"][2]


def click_command(
    model: type[BaseModel], impl: Callable[..., Any], own: list[inspect.Parameter]
) -> click.Command:
    app = typer.Typer(add_completion=False)
    app.command("c")(job_command(impl, JobGroup("job", model)))
    return typer.main.get_command(app)


def problems(model: type[BaseModel], command: click.Command, own: list[str]) -> list[str]:
    """What breaks "declared once": a field with neither flag nor reason, a flagged field the
    command lacks (or with another flag or help), an option that is neither a field's nor the
    command's own."""
    found = [
        f"{name}: no Opt, and no NoOpt saying why"
        for name, why in unflagged(model).items()
        if not why
    ]
    params = {p.name: p for p in command.params if p.name != "help"}
    flagged = options(model)
    for name, (info, opt) in flagged.items():
        param = params.get(name)
        if not isinstance(param, click.Option):
            found.append(f"{name}: field with {opt.flag} is no option of the command")
            continue
        if opt.flag.split("/")[0] not in param.opts or param.help != info.description:
            found.append(f"{name}: the option is not the field's flag and help")
    for name in sorted(set(params) - set(flagged) - set(own)):
        found.append(f"{name}: option of the command that is neither a field nor its own")
    for name in sorted(set(own) - set(params)):
        found.append(f"{name}: declared own, but not an option of the command")
    for name in sorted(set(own) & set(flagged)):
        found.append(f"{name}: both the command's own and a field")
    return found


@pytest.mark.parametrize("which", sorted(COMMANDS))
def test_every_setting_is_a_field_with_its_flag_or_its_reason(which: str) -> None:
    model, impl, own = COMMANDS[which]
    assert problems(model, click_command(model, impl, own), [p.name for p in own]) == []
    assert all(isinstance(opt, Opt) for _, opt in options(model).values())
    # The real command is the one checked: its options are these, by name.
    from proctor.cli import groups
    from proctor.cli.main import app

    groups.mount(app, which.split()[:1])
    root = typer.main.get_command(app)
    assert isinstance(root, click.Group)
    command: click.Command | None = root
    for word in which.split():
        assert isinstance(command, click.Group)
        command = command.get_command(click.Context(command), word)
    assert command is not None
    assert problems(model, command, [p.name for p in own]) == []


class BareEval(EvalJob):
    """EvalJob with one more setting, added without a flag or a reason."""

    stop_sequence: str | None = None


def test_a_field_added_without_a_flag_fails_the_check() -> None:
    command = click_command(BareEval, _gsm8k, EVAL_OWN)
    found = problems(BareEval, command, [p.name for p in EVAL_OWN])
    assert found == [
        "stop_sequence: no Opt, and no NoOpt saying why",
    ]
    # An option the command has that is neither a field's nor declared its own is caught too.
    command = click_command(EvalJob, _gsm8k, EVAL_OWN)
    undeclared = [p.name for p in EVAL_OWN if p.name != "port"]
    assert problems(EvalJob, command, undeclared) == [
        "port: option of the command that is neither a field nor its own"
    ]

"""Help that says what every command, option and argument takes, whatever the terminal's width.

Two things Click and Typer do not give on their own, fixed once over the whole command tree
(as params.py does for floats):

- Typer (<= 0.24) sets a positional argument's help before calling Click's `Argument.__init__`,
  which since Click 8.5 takes `help` itself and resets it to None: every `REF`, `RUN`, `A`, `B`
  lost its text. It is read back from the command's own signature (`typer.Argument(help=...)`).
  Typer lists arguments in its own "Arguments" section; Click 8.5 would add a second one
  ("Positional arguments") for arguments with help, so Click's is left out.
- Click cuts a command's summary in a group's list to fit the terminal (`Wait for the workload
  to drain: 0 drained; 1 hang; 2 fault; 3...`). Each command's summary is its first sentence,
  set as its short help, so a narrow terminal wraps it rather than cutting it mid-phrase.
  Summaries are written to fit one line at 80 columns (tests/cli/test_help.py).
"""

from __future__ import annotations

import inspect
from typing import Any, get_args

import click
from typer.core import TyperCommand, TyperGroup


def first_sentence(text: str) -> str:
    """The summary Click would make of `text`, uncut: its first paragraph's first sentence."""
    words = text.partition("\n\n")[0].split()
    if words and words[0] == "\b":
        words = words[1:]
    for i, word in enumerate(words):
        # As Click: a period ends the sentence unless a lowercase word follows ("vs.").
        if word.endswith(".") and (i == len(words) - 1 or not words[i + 1][0].islower()):
            return " ".join(words[: i + 1])
    return " ".join(words)


def _declared_help(command: click.Command) -> dict[str, str]:
    """help= of each typer.Argument/Option in the command's Python signature, by name."""
    callback: Any = command.callback
    original = getattr(callback, "__wrapped__", callback)
    if original is None:
        return {}
    try:
        signature = inspect.signature(original)
    except (TypeError, ValueError):
        return {}
    found: dict[str, str] = {}
    for name, param in signature.parameters.items():
        infos = [param.default, *get_args(param.annotation)]  # `= typer.X(...)` or Annotated
        for info in infos:
            text = getattr(info, "help", None)
            if isinstance(text, str) and text:
                found[name] = text
                break
    return found


def _typer_lists_arguments(ctx: click.Context, formatter: click.HelpFormatter) -> None:
    """Click's "Positional arguments" section, left out: Typer's "Arguments" lists them."""


def complete_help(command: click.Command) -> click.Command:
    """`command` (its subcommands too) with argument help restored and whole summaries."""
    if isinstance(command, TyperCommand | TyperGroup) and hasattr(command, "format_arguments"):
        setattr(command, "format_arguments", _typer_lists_arguments)  # noqa: B010
    declared = _declared_help(command)
    for param in command.params:
        if isinstance(param, click.Argument) and not getattr(param, "help", None):
            text = declared.get(param.name or "")
            if text:
                param.help = text
    if command.help and not command.short_help:
        command.short_help = first_sentence(command.help)
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            complete_help(sub)
    return command

"""Every command, option and argument says what it takes, and no summary is cut mid-phrase.

The whole Click tree is walked as the CLI builds it (typer.main.get_command under
proctor.cli.main.command_tree), and each command's help is rendered as a user sees it."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator

import click
import pytest
import typer
from click.testing import CliRunner

from proctor.cli import main
from proctor.cli.helptree import first_sentence

# Positional arguments that name a run: their help must give every form a reference takes.
RUN_REFERENCES = {"ref", "run", "a", "b", "refs"}
REF_FORMS = ("run id", "unique part", "run directory", "'last'", "name")
#: Click's help width at 80 columns or more is 78; a group's summaries get that minus 6 minus
#: the longest subcommand name (click.Group.format_commands).
HELP_WIDTH = 78


def _walk(
    command: click.Command, path: tuple[str, ...]
) -> Iterator[tuple[tuple[str, ...], click.Command]]:
    yield path, command
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            yield from _walk(sub, (*path, name))


@functools.cache
def _root() -> click.Command:
    # Built once (it mounts every group). Without command_tree (older code), the plain tree.
    build = getattr(main, "command_tree", None)
    if build is not None:
        return build([])  # type: ignore[no-any-return]
    from proctor.cli import groups

    groups.mount(main.app, [])
    return typer.main.get_command(main.app)


def _tree() -> list[tuple[tuple[str, ...], click.Command]]:
    return list(_walk(_root(), ("proctor",)))


def _render(path: tuple[str, ...], columns: int) -> str:
    runner = CliRunner(env={"COLUMNS": str(columns)})
    result = runner.invoke(_root(), [*path[1:], "--help"], prog_name="proctor")
    assert result.exit_code == 0, result.output
    return result.output


def test_every_option_and_argument_has_help() -> None:
    missing = [
        f"{' '.join(path)} {param.opts[0] if isinstance(param, click.Option) else param.name}"
        for path, command in _tree()
        for param in command.params
        if param.name != "help" and not getattr(param, "help", None)
    ]
    assert missing == [], f"{len(missing)} without help: {missing}"


def test_every_run_reference_says_its_forms() -> None:
    vague = [
        f"{' '.join(path)} {param.name}: {getattr(param, 'help', '')}"
        for path, command in _tree()
        for param in command.params
        if isinstance(param, click.Argument)
        and param.name in RUN_REFERENCES
        and not all(form in (getattr(param, "help", "") or "") for form in REF_FORMS)
    ]
    assert vague == []


def test_argument_help_is_shown() -> None:
    """Typer <= 0.24 with Click >= 8.5 drops it at construction: it must reach the screen."""
    for path in (("proctor", "runs", "show"), ("proctor", "serve", "ready"), ("proctor", "run")):
        rendered = _render(path, 120)
        # One section lists them (Typer's; Click 8.5 would add "Positional arguments").
        assert rendered.count("Arguments:") == 1 and "Positional arguments" not in rendered
        text = " ".join(rendered.split())
        command = dict(_tree())[path]
        for param in command.params:
            if isinstance(param, click.Argument):
                assert " ".join(str(param.help).split()) in text, (path, param.name, text)


def test_every_summary_fits_one_line_at_80_columns() -> None:
    long = []
    for path, command in _tree():
        if not isinstance(command, click.Group):
            continue
        limit = HELP_WIDTH - 6 - max(len(name) for name in command.commands)
        for name, sub in command.commands.items():
            summary = first_sentence(sub.help or "")
            if not summary or len(summary) > limit:
                long.append(f"{' '.join((*path, name))} ({len(summary)} > {limit}): {summary}")
    assert long == [], long


@pytest.mark.parametrize("columns", [200, 80, 50])
def test_no_summary_is_cut_at_any_width(columns: int) -> None:
    groups = [(path, command) for path, command in _tree() if isinstance(command, click.Group)]
    for path, group in groups:
        text = _render(path, columns)
        listing = text.split("Commands:", 1)[1]
        # Click marks a cut summary with "..." at the end of its (last) line.
        cut = [line for line in listing.splitlines() if re.search(r"\w\.\.\.$", line)]
        assert cut == [], (path, columns, cut)
        for name, sub in group.commands.items():
            words = first_sentence(sub.help or "").split()
            assert " ".join(words) in " ".join(listing.split()), (path, name, columns)


def test_no_help_text_reads_as_a_secret() -> None:
    """Everything proctor prints goes through the redactor, argument help included: a text such
    as "KEY: while a run ..." would print as "KEY: ***"."""
    from proctor.redact import Redactor

    redactor = Redactor()
    for path, command in _tree():
        with click.Context(command, info_name=" ".join(path)) as ctx:
            text = command.get_help(ctx)
        assert redactor.text(text) == text, path

"""The `proctor` command: mounts one Typer app per command group and maps errors to exit codes.

Each command group lives in its own module exposing `app` (a `typer.Typer`). Commands raise
`proctor.errors.ProctorError` subclasses; `main()` prints the one-line message and exits with
the error's code. Nothing here holds logic.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

import click
import typer

from proctor.cli import output
from proctor.cli.helptree import complete_help
from proctor.cli.output import print_error
from proctor.cli.params import finite_floats
from proctor.crash import report_internal
from proctor.errors import EXIT_CODE_MEANINGS, ExitCode, ProctorError, UsageError, exit_code_for
from proctor.redact import mask_output
from proctor.version import __version__

app = typer.Typer(
    name="proctor",
    help="Run GPU benchmark and inference workloads so that their results can be trusted.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # Help text holds literal brackets (ssh://user@host[:port], [slurm] nodes): no markup.
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"proctor {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """Run GPU benchmark and inference workloads so that their results can be trusted."""


def _mount(argv: list[str]) -> None:
    from proctor.cli import groups

    groups.mount(app, argv)


def _check_text(args: list[str]) -> None:
    """Records, plans and the store hold text: an argument of non-UTF-8 bytes is refused here,
    in one line, rather than failing later when the record is written."""
    for index, arg in enumerate(args, start=1):
        try:
            arg.encode("utf-8")
        except UnicodeEncodeError as error:
            shown = arg.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
            raise UsageError(
                f"argument {index} ('{shown[:80]}') is not UTF-8 text: byte"
                f" 0x{ord(arg[error.start]) & 0xFF:02x} at position {error.start}",
                hint="proctor records commands as text; pass the bytes through a file or a script",
            ) from None


def _check_cwd() -> None:
    """Every command resolves paths (proctor.toml, the runs directory) from the current
    directory: one that was deleted under this shell is said in one line, not a crash."""
    try:
        os.getcwd()
    except OSError as error:
        raise UsageError(
            f"the current directory cannot be read: {error.strerror or error}"
            " (it was deleted or moved after this shell entered it)",
            hint="cd to an existing directory and run proctor again",
        ) from None


def command_tree(argv: list[str]) -> click.Command:
    """The Click command that answers `argv`: the groups it needs mounted, every float
    finite, every argument's help and every summary whole."""
    _mount(argv)
    return complete_help(finite_floats(typer.main.get_command(app)))


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)

    def go() -> Any:
        _check_cwd()
        _check_text(args)
        command = command_tree(args)
        output.json_errors(wants_json(command, args))
        return command.main(args=argv, standalone_mode=False)

    try:
        return guarded(go, ["proctor", *args])
    finally:
        output.json_errors(False)


def wants_json(command: click.Command, args: list[str]) -> bool:
    """The command `args` name has a --json option and it was given: its errors are JSON too."""
    words = args[: args.index("--")] if "--" in args else args
    for word in words:
        if not isinstance(command, click.Group) or word not in command.commands:
            break
        command = command.commands[word]
    has = any("--json" in param.opts for param in command.params)
    return has and "--json" in words


def _fix_of_usage(error: click.ClickException) -> str:
    ctx = getattr(error, "ctx", None)
    where = ctx.command_path if ctx is not None else "proctor"
    return f"see `{where} --help`"


def guarded(go: Callable[[], Any], shown: list[str]) -> int:
    """Run `go` (a command) and map what it raises to the exit-code table. Under --json
    (`output.json_errors`) every failure is also one JSON object on stdout: `error` with the
    exit code, the reason and the fix, in the command's own document where it printed one."""
    code, reason, fix = _run(go, shown)
    if output.json_errors_active():
        if code == 0:
            output.end_json()
        else:
            output.print_json_error(
                code, reason or _reason_of(output.held_json(), code), fix, raised=bool(reason)
            )
    return code


def _reason_of(doc: Any, code: int) -> str:
    """Why a command that printed its document ended with `code` and no error of its own: the
    run's status (a command's own status is passed through by `run`: not the table's
    meaning), a flow's first failing step, else the table's meaning of the code."""
    if isinstance(doc, dict) and doc.get("run_id"):
        said = f"run {doc['run_id']} ended {doc.get('outcome') or 'with an error'}, exit {code}"
        exit_ = doc.get("exit")
        if isinstance(exit_, dict) and exit_.get("decided_by") == "command":
            return f"{said}: its command's own exit status"
        steps = doc.get("steps")
        failed = [s for s in steps or [] if isinstance(s, dict) and s.get("exit_code")]
        if failed:
            return f"{said}: step {failed[0].get('step')}: {failed[0].get('message')}"
        return said
    try:
        return EXIT_CODE_MEANINGS[ExitCode(code)]
    except ValueError:
        return f"exit status {code}"


def _run(go: Callable[[], Any], shown: list[str]) -> tuple[int, str | None, str | None]:
    """(exit code, reason, fix) of running `go`; the reason is also printed on stderr."""
    said: list[str] = []

    def say(line: str) -> None:
        said.append(line)
        print_error(line)

    try:
        result = go()
    except ProctorError as error:
        print_error(error.one_line())
        return exit_code_for(error), error.message, error.hint
    except click.exceptions.Exit as exit_:
        return int(exit_.exit_code), None, None
    except click.exceptions.Abort:
        print_error("interrupted")
        return int(ExitCode.INTERRUPTED), "interrupted", None
    except click.ClickException as error:
        error.show()
        return int(ExitCode.USAGE), error.format_message(), _fix_of_usage(error)
    except KeyboardInterrupt:
        print_error("interrupted")
        return int(ExitCode.INTERRUPTED), "interrupted", None
    except SystemExit as exit_:
        if exit_.code is None or isinstance(exit_.code, int):
            return int(exit_.code or 0), None, None
        code = report_internal("proctor", exit_, shown, say)
        return code, said[-1] if said else None, _INTERNAL_FIX
    except Exception as error:
        # Anything else is a bug: one line naming the crash log, and a code of its own.
        code = report_internal("proctor", error, shown, say)
        return code, said[-1] if said else None, _INTERNAL_FIX
    # Without standalone mode, Click returns the code of a typer.Exit instead of raising it.
    return (result if isinstance(result, int) else 0), None, None


_INTERNAL_FIX = "a bug in proctor: report it with the crash log the reason names"


def entry() -> None:
    mask_output()  # every byte proctor prints goes through the one redaction layer
    sys.exit(main())


if __name__ == "__main__":
    entry()

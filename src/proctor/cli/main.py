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

from proctor.cli.helptree import complete_help
from proctor.cli.output import print_error
from proctor.cli.params import finite_floats
from proctor.crash import report_internal
from proctor.errors import ExitCode, ProctorError, UsageError, exit_code_for
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
        return command_tree(args).main(args=argv, standalone_mode=False)

    return guarded(go, ["proctor", *args])


def guarded(go: Callable[[], Any], shown: list[str]) -> int:
    """Run `go` (a command) and map what it raises to the exit-code table."""
    try:
        result = go()
    except ProctorError as error:
        print_error(error.one_line())
        return exit_code_for(error)
    except click.exceptions.Exit as exit_:
        return int(exit_.exit_code)
    except click.exceptions.Abort:
        print_error("interrupted")
        return int(ExitCode.INTERRUPTED)
    except click.ClickException as error:
        error.show()
        return int(ExitCode.USAGE)
    except KeyboardInterrupt:
        print_error("interrupted")
        return int(ExitCode.INTERRUPTED)
    except SystemExit as exit_:
        if exit_.code is None or isinstance(exit_.code, int):
            return int(exit_.code or 0)
        return report_internal("proctor", exit_, shown, print_error)
    except Exception as error:
        # Anything else is a bug: one line naming the crash log, and a code of its own.
        return report_internal("proctor", error, shown, print_error)
    # Without standalone mode, Click returns the code of a typer.Exit instead of raising it.
    return result if isinstance(result, int) else 0


def entry() -> None:
    mask_output()  # every byte proctor prints goes through the one redaction layer
    sys.exit(main())


if __name__ == "__main__":
    entry()

"""The `proctor` command: mounts one Typer app per command group and maps errors to exit codes.

Each command group lives in its own module exposing `app` (a `typer.Typer`). Commands raise
`proctor.errors.ProctorError` subclasses; `main()` prints the one-line message and exits with
the error's code. Nothing here holds logic.
"""

from __future__ import annotations

import sys

import click
import typer

from proctor import __version__
from proctor.cli.output import print_error
from proctor.errors import ExitCode, ProctorError, exit_code_for
from proctor.redact import mask_output

app = typer.Typer(
    name="proctor",
    help="Run GPU benchmark and inference workloads so that their results can be trusted.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
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


def main(argv: list[str] | None = None) -> int:
    _mount(list(sys.argv[1:] if argv is None else argv))
    try:
        result = app(args=argv, standalone_mode=False)
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
    # Without standalone mode, Click returns the code of a typer.Exit instead of raising it.
    return result if isinstance(result, int) else 0


def entry() -> None:
    mask_output()  # every byte proctor prints goes through the one redaction layer
    sys.exit(main())


if __name__ == "__main__":
    entry()

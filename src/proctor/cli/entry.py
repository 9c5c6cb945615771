"""The `proctor` console script: answers `--version` and the root `--help` before anything heavy.

Mounting the command groups imports typer, rich, pydantic, aiohttp and most of proctor (over a
second on a loaded machine), which a user pays for `proctor --help`. The root help is the text
Click renders for the full app, kept in root_help.txt (regenerate with
`python -m proctor.cli.entry --write-help`; tests/cli/test_startup.py fails when it is stale).
Everything else goes to proctor.cli.main.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

HELP_FILE = Path(__file__).with_name("root_help.txt")
#: Stands for the program name in root_help.txt (Click prints the name it was invoked as).
PROG = "@PROG@"
#: Click wraps help at min(terminal columns, 80) - 2: the stored text is right from 80 columns.
MIN_COLUMNS = 80


def fast_answer(argv: list[str], prog: str) -> str | None:
    """The output for `--version` or the root `--help`, or None when the full CLI must answer."""
    if argv == ["--version"]:
        from proctor.version import __version__

        return f"proctor {__version__}\n"
    if argv in (["--help"], ["-h"]) and shutil.get_terminal_size().columns >= MIN_COLUMNS:
        try:
            return HELP_FILE.read_text(encoding="utf-8").replace(PROG, prog)
        except OSError:
            return None
    return None


def render_root_help(prog: str = PROG) -> str:
    """The root help as the full CLI prints it at 80 columns or more."""
    import contextlib
    import io

    from proctor.cli import main

    command = main.command_tree([])
    out = io.StringIO()
    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "200"
    try:
        with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
            command.main(args=["--help"], prog_name=prog, standalone_mode=False)
    finally:
        if old is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = old
    return out.getvalue()


def entry() -> None:
    answer = fast_answer(sys.argv[1:], os.path.basename(sys.argv[0]))
    if answer is not None:
        sys.stdout.write(answer)
        sys.exit(0)
    from proctor.cli.main import entry as full

    full()


if __name__ == "__main__":
    if sys.argv[1:] == ["--write-help"]:
        HELP_FILE.write_text(render_root_help(), encoding="utf-8")
        print(f"wrote {HELP_FILE}")
    else:
        entry()

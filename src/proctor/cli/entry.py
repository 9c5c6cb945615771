"""The `proctor` console script: answers `--version` and the root `--help` before anything heavy.

Mounting the command groups imports typer, rich, pydantic, aiohttp and most of proctor (over a
second on a loaded machine), which a user pays for `proctor --help`. The root help is the text
Click renders for the full app, kept in root_help.txt (regenerate with
`python -m proctor.cli.entry --write-help`; tests/cli/test_startup.py fails when it is stale).
`proctor run [OPTIONS] -- CMD` with the job's options (CommandJob's fields, jobs/command.py, read
from the same declaration as the full CLI's) and --runs-dir, --config, --detach is answered here
too (`lean_run`), through cli/run.py's `run_here`, without typer, click or rich (about a sixth
of what `run -- true` costs, bench/startup.py). Everything else goes to proctor.cli.main, and so
does any `run` this reads differently from Click: an option it does not take, a form it does
not read (`-nNAME`, a value that starts with `-`), --help, --json, --target, --dry-run.
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


#: `proctor run`'s run-control options lean_run reads (the job's are CommandJob's fields).
_RUN_CONTROL = {"--runs-dir": "runs_dir", "--config": "config"}
_RUN_CONTROL_SWITCHES = {"--detach": "detach", "-d": "detach"}


def run_options() -> tuple[dict[str, tuple[str, type | None]], dict[str, str]]:
    """The `proctor run` options lean_run reads: (long or short name -> (field, its type: int,
    float, list for a repeatable one, else None)), (switch -> field). The job's options come
    from CommandJob's fields (jobs/command.py), as the full CLI's do."""
    from proctor.jobs.command import CommandJob
    from proctor.jobs.options import field_type, options

    values: dict[str, tuple[str, type | None]] = {k: (v, None) for k, v in _RUN_CONTROL.items()}
    switches = dict(_RUN_CONTROL_SWITCHES)
    for field, (info, opt) in options(CommandJob).items():
        kind = opt.cli_type if opt.cli_type is not None else field_type(info)
        for name in [opt.flag, *([opt.short] if opt.short else [])]:
            if kind is bool:
                switches[name] = field
            else:
                number = kind if kind in (int, float) else None
                values[name] = (field, list if opt.multiple else number)
    return values, switches


def parse_run(args: list[str]) -> tuple[dict[str, object], list[str]] | None:
    """(options, command) of `proctor run ARGS` as Click reads them (options up to the first
    argument or `--`; the last of a repeated option wins, a repeatable one adds up), or None
    for anything else (the full CLI answers it, errors included)."""
    values, switches = run_options()
    options: dict[str, object] = {}
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            i += 1
            break
        if not arg.startswith("-") or arg == "-":
            break  # the command: Click stops reading options here (no interspersed args)
        name, eq, inline = arg.partition("=")
        if name in switches and not eq:
            options[switches[name]] = True
            i += 1
            continue
        if name not in values or (eq and not name.startswith("--")):
            return None
        field, kind = values[name]
        if eq:
            value, i = inline, i + 1
        elif i + 1 < len(args) and not args[i + 1].startswith("-"):
            value, i = args[i + 1], i + 2
        else:
            return None
        if kind is list:
            options.setdefault(field, [])
            options[field].append(value)  # type: ignore[attr-defined]
        elif kind is not None:
            try:
                options[field] = kind(value)
            except ValueError:
                return None  # said as Click says it, by the full CLI
        else:
            options[field] = value
    command = args[i:]
    return (options, command) if command else None


def lean_run(args: list[str]) -> int | None:
    """`proctor run ARGS` on the local target, its exit code; None: the full CLI answers."""
    parsed = parse_run(args)
    if parsed is None:
        return None
    try:
        os.getcwd()
        for arg in args:
            arg.encode("utf-8")
    except (OSError, UnicodeEncodeError):
        return None  # said in one line by the full CLI
    options, command = parsed
    from proctor.redact import mask_output

    mask_output()  # every byte proctor prints goes through the one redaction layer
    try:
        from proctor.cli.run import command_job, run_here
        from proctor.jobs.command import run_flags
        from proctor.spec.config import load_config
        from proctor.targets.registry import target_options

        config = options.get("config")
        runs_dir = options.get("runs_dir")
        flags = run_flags(
            command_job(command, options),
            runs_dir=None if runs_dir is None else str(runs_dir),
            detach=bool(options.get("detach")),
        )
        project = load_config(Path(str(config)) if config is not None else None)
        return run_here(flags, project, target_options(None, project))
    except BaseException as error:  # mapped to an exit code as the full CLI maps it
        from proctor.cli.main import guarded

        caught = error

        def again() -> None:
            raise caught

        return guarded(again, ["proctor", "run", *args])


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
    if sys.argv[1:2] == ["run"]:
        code = lean_run(sys.argv[2:])
        if code is not None:
            sys.exit(code)
    from proctor.cli.main import entry as full

    full()


if __name__ == "__main__":
    if sys.argv[1:] == ["--write-help"]:
        HELP_FILE.write_text(render_root_help(), encoding="utf-8")
        print(f"wrote {HELP_FILE}")
    else:
        entry()

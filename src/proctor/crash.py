"""Unexpected errors: one line on stderr, the traceback in a log file, exit code 70.

A bug in proctor must never look like an outcome (exit 1 is "hang detected") nor spill a
traceback over the terminal. Every entry point (the CLI and the helper processes: wrapper,
trackers, node and step runners) goes through `guarded`, which maps proctor's own errors to
their codes and anything else to `ExitCode.INTERNAL` with the path of a crash log.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path

from proctor.errors import ExitCode, ProctorError, exit_code_for


def crash_dir() -> Path:
    """$PROCTOR_STATE_DIR, else $XDG_STATE_HOME/proctor, else ~/.local/state/proctor; + crashes."""
    base = os.environ.get("PROCTOR_STATE_DIR")
    if not base:
        xdg = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
        base = str(Path(xdg) / "proctor")
    return Path(base) / "crashes"


def _redacted(text: str) -> str:
    try:
        from proctor import redact

        # The process redactor knows this process's environment and command line, so URL
        # credentials and header values in an exception's text are masked too.
        return redact.line(text)
    except Exception:  # the crash log must be written even if redaction itself is broken
        return text


def write_crash_log(prog: str, error: BaseException, argv: Sequence[str]) -> Path | None:
    """The traceback, the command and proctor's version, in a new file; None if nowhere works."""
    from proctor.version import __version__

    stamp = time.strftime("%Y%m%dT%H%M%S")
    when = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    body = (
        f"proctor {__version__} ({prog}), pid {os.getpid()}, {when}\n"
        f"argv: {list(argv)!r}\n\n"
        + "".join(traceback.format_exception(type(error), error, error.__traceback__))
    )
    for directory in (crash_dir(), Path(tempfile.gettempdir())):
        try:
            directory.mkdir(parents=True, exist_ok=True)
            path = directory / f"proctor-crash-{stamp}-{os.getpid()}.log"
            path.write_text(_redacted(body), encoding="utf-8")
            return path
        except OSError:
            continue
    return None


def internal_error_line(prog: str, error: BaseException, log: Path | None) -> str:
    name = type(error).__name__
    what = f"{name}: {error}".splitlines()[0] if str(error) else name
    where = f"traceback in {log}" if log else "no crash log could be written"
    return f"internal error (a bug in proctor, exit 70) in {prog}: {what[:300]}; {where}"


def report_internal(
    prog: str, error: BaseException, argv: Sequence[str], say: Callable[[str], None]
) -> int:
    say(_redacted(internal_error_line(prog, error, write_crash_log(prog, error, argv))))
    return int(ExitCode.INTERNAL)


def _stderr(line: str) -> None:
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def guarded(prog: str, main: Callable[[], int], argv: Sequence[str] | None = None) -> int:
    """Run a helper process's `main`: proctor errors -> one line and their code; any other
    exception -> one line, a crash log and 70. Never a traceback, never exit 1 by accident."""
    args = list(sys.argv if argv is None else argv)
    try:
        return main()
    except ProctorError as error:
        _stderr(f"{prog}: {error.one_line()}")
        return exit_code_for(error)
    except KeyboardInterrupt:
        _stderr(f"{prog}: interrupted")
        return int(ExitCode.INTERRUPTED)
    except SystemExit as exit_:
        if exit_.code is None or isinstance(exit_.code, int):
            return int(exit_.code or 0)
        return report_internal(prog, exit_, args, _stderr)
    except Exception as error:
        return report_internal(prog, error, args, _stderr)

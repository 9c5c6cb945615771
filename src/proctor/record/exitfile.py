"""What a run directory's name and its `exit_code` file say, readable from below the record
layer (the store reads them for a run whose record.json cannot be read).

`exit_code` holds `CODE [SIGNAME]` when the command decided, or `CODE REASON [CMDCODE
[CMDSIG]]` when proctor did (record/finish.py writes it).
"""

from __future__ import annotations

import contextlib
import re
from pathlib import Path

from proctor.record.schema import CommandStatus, ExitStatus

#: Why proctor, not the command, decided a run's status: the word after the code.
REASONS = ("timeout", "stopped")

_RUN_ID = re.compile(r"^\d{8}-\d{6}-[0-9a-f]{6}$")


def is_run_id(text: str) -> bool:
    return bool(_RUN_ID.match(text))


def parse_exit_text(text: str) -> ExitStatus | None:
    """The `exit_code` file's words. A status outside 0-255 is no exit status (no process
    ends with one), so it reads as none: unknown, never success."""
    words = text.split()
    if not words:
        return None
    try:
        code = int(words[0])
    except ValueError:
        return None
    if not 0 <= code <= 255:
        return None
    rest = words[1:]
    if rest and rest[0] in REASONS:
        command = None
        if len(rest) > 1:
            with contextlib.suppress(ValueError):
                signal_ = rest[2] if len(rest) > 2 else None
                command = CommandStatus(code=int(rest[1]), signal=signal_)
        return ExitStatus(code=code, decided_by="proctor", reason=rest[0], command=command)
    return ExitStatus(code=code, signal=rest[0] if rest else None)


def read_exit_file(path: Path) -> ExitStatus | None:
    """The status in the `exit_code` file at `path`; None where there is none or it is garbage."""
    try:
        text = path.read_text(encoding="utf-8")
    except (FileNotFoundError, NotADirectoryError, UnicodeDecodeError):
        return None
    return parse_exit_text(text)

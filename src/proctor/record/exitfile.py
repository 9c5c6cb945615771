"""What a run directory's `exit_code` file says, readable from below the record layer (the
store reads it for a run whose record.json cannot be read).

`exit_code` holds `CODE [SIGNAME]` when the command decided, or `CODE REASON [CMDCODE
[CMDSIG]]` when proctor did (record/finish.py writes it).
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the far sides' writers import REASONS from here, without pydantic
    from proctor.record.schema import ExitStatus

#: Why proctor, not the command, decided a run's status: the word after the code.
REASONS = ("timeout", "stopped")


def parse_exit_text(text: str) -> ExitStatus | None:
    """The `exit_code` file's words. A status outside 0-255 is no exit status (no process
    ends with one), so it reads as none: unknown, never success."""
    # Here, not above: see the import note.
    from proctor.record.schema import CommandStatus
    from proctor.record.schema import ExitStatus as Status

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
        return Status(code=code, decided_by="proctor", reason=rest[0], command=command)
    return Status(code=code, signal=rest[0] if rest else None)


def read_exit_file(path: Path) -> ExitStatus | None:
    """The status in the `exit_code` file at `path`; None where there is none or it is garbage."""
    try:
        text = path.read_text(encoding="utf-8")
    except (FileNotFoundError, NotADirectoryError, UnicodeDecodeError):
        return None
    return parse_exit_text(text)

"""Durations as people write them on a command line: 90, 90s, 15m, 1h30m, 2.5s, 500ms."""

from __future__ import annotations

import math
import re

from proctor.errors import UsageError

#: No time limit, grace or interval beyond this: anything longer is a typo, and timers overflow.
MAX_DURATION_S = 366 * 86400.0

_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(text: str, *, option: str = "duration") -> float:
    """Seconds in `text` (a bare number is seconds); a UsageError names the accepted forms."""
    cleaned = text.strip().lower().replace(" ", "")
    try:
        seconds = float(cleaned)
    except ValueError:
        pos = 0
        seconds = 0.0
        for match in _PART.finditer(cleaned):
            if match.start() != pos:
                break
            seconds += float(match.group(1)) * _UNIT_S[match.group(2)]
            pos = match.end()
        if pos != len(cleaned) or not cleaned:
            raise UsageError(
                f"invalid {option} {text!r}",
                hint="write seconds (90) or a duration such as 500ms, 30s, 15m, 1h30m",
            ) from None
    if not math.isfinite(seconds):
        raise UsageError(f"invalid {option} {text!r}: not a finite duration")
    if seconds > MAX_DURATION_S:
        raise UsageError(
            f"invalid {option} {text!r}: longer than the limit of 366 days",
            hint="give a duration of at most 366d (8784h)",
        )
    if seconds < 0:
        raise UsageError(f"invalid {option} {text!r}: must not be negative")
    return seconds


def format_duration(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "?"
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    if seconds < 120:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(round(seconds), 60)
    if minutes < 120:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"

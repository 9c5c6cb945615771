"""The form of a run id (`YYYYMMDD-HHMMSS-xxxxxx`), with no import beyond the standard
library: the far sides' writers and the store read it."""

from __future__ import annotations

import re

_RUN_ID = re.compile(r"^\d{8}-\d{6}-[0-9a-f]{6}$")


def is_run_id(text: str) -> bool:
    return bool(_RUN_ID.match(text))

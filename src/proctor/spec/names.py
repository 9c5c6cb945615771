"""Run names: derived from the command or given by the user, safe as a directory name part."""

from __future__ import annotations

import os
import re

from proctor import redact
from proctor.errors import UsageError

_UNSAFE = re.compile(r"[^a-z0-9._]+")


def derive_name(argv: list[str], limit: int = 60) -> str:
    """`cargo bench --release` -> cargo-bench-release (secrets already masked by the caller)."""
    words: list[str] = []
    for i, arg in enumerate(argv):
        word = os.path.basename(arg) if i == 0 else arg
        word = _UNSAFE.sub("-", word.lower().lstrip("-")).strip("-.")
        if word:
            words.append(word)
    name = "-".join(words)[:limit].strip("-.")
    return name or "run"


def safe_name(name: str) -> str:
    cleaned = _UNSAFE.sub("-", redact.text(name).lower()).strip("-.")
    if not cleaned:
        raise UsageError(f"invalid run name {name!r}", hint="use letters, digits, '.', '_' or '-'")
    return cleaned[:80]

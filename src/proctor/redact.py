"""Secrets: which names are secret, and masking of their values in anything proctor writes."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping

MASK = "***"
# Shorter values would mask ordinary text ("1", "on"); such secrets are still masked by name.
_MIN_VALUE_LEN = 4


_SPLIT = re.compile(r"[^A-Z0-9]+")
# A flag of the command itself that carries a secret: --api-key X, --hf-token=X (not --max-tokens).
_SECRET_FLAG = re.compile(
    r"^--?(?:[a-z0-9]+[-_])*(?:api[-_]?key|key|token|secret|password|passwd|credentials?|auth)$",
    re.IGNORECASE,
)


def is_secret_name(name: str, extra_names: Iterable[str] = ()) -> bool:
    """True for HF_TOKEN, RUNPOD_API_KEY, APIKEY, DB_PASSWORD, AUTHORIZATION; not MAX_TOKENS."""
    upper = name.upper()
    if any(upper == extra.upper() for extra in extra_names):
        return True
    for part in _SPLIT.split(upper):
        if not part:
            continue
        if part.endswith(("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD")):
            return True
        if part.startswith(("AUTH", "CREDENTIAL", "SECRET", "PASSWORD")):
            return True
    return False


class Redactor:
    """Masks known secret values wherever they occur, and secret-named entries of mappings."""

    def __init__(self, values: Iterable[str] = (), extra_names: Iterable[str] = ()) -> None:
        self.extra_names = tuple(extra_names)
        unique = {v for v in values if v and len(v) >= _MIN_VALUE_LEN}
        # Longest first so that a secret containing another is masked whole.
        self._values = sorted(unique, key=len, reverse=True)
        self._pattern = (
            re.compile("|".join(re.escape(v) for v in self._values)) if self._values else None
        )

    @classmethod
    def from_environment(
        cls,
        overrides: Mapping[str, str] = {},
        extra_names: Iterable[str] = (),
        environ: Mapping[str, str] | None = None,
    ) -> Redactor:
        """Secrets are the secret-named values among the overrides and proctor's own environment."""
        env = os.environ if environ is None else environ
        extra = tuple(extra_names)
        values = [v for k, v in overrides.items() if is_secret_name(k, extra)]
        values += [v for k, v in env.items() if is_secret_name(k, extra)]
        return cls(values, extra)

    def text(self, value: str) -> str:
        if self._pattern is None:
            return value
        return self._pattern.sub(MASK, value)

    def env(self, mapping: Mapping[str, str]) -> dict[str, str]:
        return {
            k: (MASK if is_secret_name(k, self.extra_names) else self.text(v))
            for k, v in mapping.items()
        }

    def argv(self, argv: Iterable[str]) -> list[str]:
        out: list[str] = []
        hide_next = False
        for arg in argv:
            if hide_next:
                out.append(MASK)
                hide_next = False
                continue
            name, sep, _ = arg.partition("=")
            if _SECRET_FLAG.match(name):
                if sep:
                    out.append(f"{name}={MASK}")
                else:
                    out.append(arg)
                    hide_next = True
                continue
            out.append(self.text(arg))
        return out

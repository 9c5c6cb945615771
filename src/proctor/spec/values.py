"""A resolved setting and where it came from (flag, env:NAME, config:PATH, default)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Value:
    value: Any
    origin: str

    def as_dict(self) -> dict[str, Any]:
        return {"value": self.value, "origin": self.origin}


__all__ = ["Value"]

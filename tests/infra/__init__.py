"""Real infrastructure for tests: SSH hosts in network namespaces, a Slurm cluster, engines."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TypeVar

import pytest

T = TypeVar("T")


def started(what: str, reason: str | None, make: Callable[[], AbstractContextManager[T]]) -> T:
    """`make()` entered (so started), or pytest.skip naming `what` and why it cannot run here;
    the caller stops it."""
    if reason:
        pytest.skip(f"{what}: {reason}")
    return make().__enter__()

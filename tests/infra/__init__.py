"""Real infrastructure for tests: SSH hosts in network namespaces, a Slurm cluster, engines."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Self, TypeVar

import pytest

T = TypeVar("T")


def started(what: str, reason: str | None, make: Callable[[], AbstractContextManager[T]]) -> T:
    """`make()` entered (so started), or pytest.skip naming `what` and why it cannot run here;
    the caller stops it."""
    if reason:
        pytest.skip(f"{what}: {reason}")
    return make().__enter__()


class Lifecycle:
    """Started on `with` entry, stopped on exit."""

    def start(self) -> object:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

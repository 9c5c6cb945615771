"""Bounded retries and polls: back off within a deadline, stop on a repeat without new evidence.

Both helpers take their clock and sleep as parameters so tests replay histories without waiting.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from proctor.errors import ProctorError, TargetUnavailable

T = TypeVar("T")

Clock = Callable[[], float]
Sleep = Callable[[float], None]


@dataclass(frozen=True)
class Backoff:
    """Delays between attempts: initial, multiplied by factor, capped at maximum."""

    initial: float = 2.0
    factor: float = 2.0
    maximum: float = 30.0

    def delays(self) -> _Delays:
        return _Delays(self)


class _Delays:
    def __init__(self, backoff: Backoff) -> None:
        self._next = backoff.initial
        self._backoff = backoff

    def next(self) -> float:
        delay = self._next
        self._next = min(self._next * self._backoff.factor, self._backoff.maximum)
        return delay


def _gave_up(error: ProctorError, why: str) -> ProctorError:
    error.message = f"{error.message} [{why}]"
    error.args = (error.message,)
    return error


def retry(
    attempt: Callable[[], T],
    *,
    deadline: float,
    backoff: Backoff = Backoff(),
    retry_on: tuple[type[ProctorError], ...] = (TargetUnavailable,),
    evidence: Callable[[], object] | None = None,
    clock: Clock = time.time,
    sleep: Sleep = time.sleep,
) -> T:
    """Call `attempt` until it returns, retrying only errors in `retry_on`.

    Gives up (re-raising the last error, annotated) when the deadline would pass before the next
    attempt, or when an attempt fails with the same error as the one before while `evidence()`
    (e.g. the pod's state) has not changed either: a repeat without new evidence.
    """
    delays = backoff.delays()
    last: tuple[type[BaseException], str, object] | None = None
    attempts = 0
    while True:
        attempts += 1
        try:
            return attempt()
        except retry_on as error:
            seen = evidence() if evidence is not None else None
            signature = (type(error), error.message, seen)
            if signature == last:
                raise _gave_up(
                    error, f"same error twice without new evidence; {attempts} attempts"
                ) from None
            last = signature
            delay = delays.next()
            if clock() + delay > deadline:
                raise _gave_up(error, f"budget spent after {attempts} attempt(s)") from None
            sleep(delay)


def poll(
    check: Callable[[], T | None],
    *,
    deadline: float,
    backoff: Backoff = Backoff(initial=1.0, factor=1.5, maximum=10.0),
    clock: Clock = time.time,
    sleep: Sleep = time.sleep,
) -> T | None:
    """Call `check` until it returns something other than None or the deadline passes (None)."""
    delays = backoff.delays()
    while True:
        result = check()
        if result is not None:
            return result
        now = clock()
        if now >= deadline:
            return None
        sleep(min(delays.next(), max(0.0, deadline - now)))

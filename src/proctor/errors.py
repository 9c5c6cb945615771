"""proctor's one exception tree, and the exit-code table that goes with it.

    ProctorError                      (exit code lives on the class)
    ├── UsageError                    64  bad flag, invalid config, unknown profile, no command
    │   └── RecordError               64  a record.json that cannot be read: corrupt, wrong
    │                                      shape, or written by a newer proctor
    ├── TargetUnavailable             69  host unreachable, binary missing, port in use, sold out
    ├── NotAuthorised                 77  needs an explicit flag (names it)
    ├── InternalError                 70  a bug in proctor (any unexpected exception; the
    │                                      message names a crash log with the traceback)
    ├── Interrupted                  130  Ctrl-C / SIGTERM of proctor itself
    └── Outcome errors: what a supervised thing ended as
        ├── HangDetected               1
        ├── FaultDetected              2
        ├── WorkloadFailed             3
        ├── TimeLimitReached           4
        ├── NotReady                   5
        ├── ResultUnknown              6
        └── Regression                 7

Lower-level errors (OSError, asyncssh, httpx, pydantic) are mapped into this tree at the
boundary that sees them; the CLI maps the tree to exit codes through `exit_code_for`.
"""

from __future__ import annotations

import enum
from typing import Any, TypeVar


class ExitCode(enum.IntEnum):
    """proctor's exit codes: the one table (docs and --help quote it)."""

    OK = 0
    HANG = 1
    FAULT = 2
    WORKLOAD_FAILED = 3
    TIME_LIMIT = 4
    NOT_READY = 5
    UNKNOWN = 6
    REGRESSION = 7
    USAGE = 64
    UNAVAILABLE = 69
    INTERNAL = 70
    NOT_AUTHORISED = 77
    INTERRUPTED = 130


#: The documented meaning of each code; the README's table is generated from this.
EXIT_CODE_MEANINGS: dict[ExitCode, str] = {
    ExitCode.OK: "success: ready, drained, run finished with status 0",
    ExitCode.HANG: "hang detected",
    ExitCode.FAULT: (
        "fault detected (fault pattern, GPU fault, crashed server,"
        " server alive but answering generation requests with errors)"
    ),
    ExitCode.WORKLOAD_FAILED: (
        "workload failed (non-zero exit without a known fault;"
        " a bench or eval whose requests failed beyond `--max-error-rate`,"
        " or a bench in which no request succeeded)"
    ),
    ExitCode.TIME_LIMIT: "time limit reached",
    ExitCode.NOT_READY: "server not ready in time",
    ExitCode.UNKNOWN: "result unknown (no exit status could be established)",
    ExitCode.REGRESSION: "regression against a baseline",
    ExitCode.USAGE: "usage or configuration error",
    ExitCode.UNAVAILABLE: "resource or target unavailable",
    ExitCode.INTERNAL: "internal error: a bug in proctor (one line names a log with the details)",
    ExitCode.NOT_AUTHORISED: "not authorised: needs an explicit flag",
    ExitCode.INTERRUPTED: "interrupted",
}


class ProctorError(Exception):
    """Base of every error proctor raises on purpose. `hint` says how to fix it."""

    exit_code: ExitCode = ExitCode.USAGE

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def one_line(self) -> str:
        return f"{self.message} ({self.hint})" if self.hint else self.message


class UsageError(ProctorError):
    exit_code = ExitCode.USAGE


class ConfigError(UsageError):
    """Invalid proctor.toml, flow file, profile or baseline file."""


class RecordError(UsageError, ValueError):
    """A record.json this proctor cannot read: not JSON, not an object, a shape its kind's
    model rejects, or a schema version it does not know (a newer proctor wrote it)."""


class TargetUnavailable(ProctorError):
    exit_code = ExitCode.UNAVAILABLE


class NotAuthorised(ProctorError):
    exit_code = ExitCode.NOT_AUTHORISED

    def __init__(self, message: str, *, flag: str) -> None:
        super().__init__(message, hint=f"pass {flag} to authorise it")
        self.flag = flag


class InternalError(ProctorError):
    """Something proctor did not expect; the CLI maps any stray exception to this code."""

    exit_code = ExitCode.INTERNAL


class Interrupted(ProctorError):
    exit_code = ExitCode.INTERRUPTED


class OutcomeError(ProctorError):
    """A supervised thing ended in a way that is not success."""


class HangDetected(OutcomeError):
    exit_code = ExitCode.HANG


class FaultDetected(OutcomeError):
    exit_code = ExitCode.FAULT


class WorkloadFailed(OutcomeError):
    exit_code = ExitCode.WORKLOAD_FAILED


class TimeLimitReached(OutcomeError):
    exit_code = ExitCode.TIME_LIMIT


class NotReady(OutcomeError):
    exit_code = ExitCode.NOT_READY


class ResultUnknown(OutcomeError):
    exit_code = ExitCode.UNKNOWN


class Regression(OutcomeError):
    exit_code = ExitCode.REGRESSION


def error_for_code(code: int, message: str, *, hint: str | None = None) -> ProctorError:
    """The error of the class that owns exit code `code` (a run's status, reported as proctor's
    own error): a code outside the table is a workload failure that keeps its code."""
    for cls in (
        HangDetected,
        FaultDetected,
        WorkloadFailed,
        TimeLimitReached,
        NotReady,
        ResultUnknown,
        Regression,
        UsageError,
        TargetUnavailable,
        InternalError,
        Interrupted,
    ):
        if int(cls.exit_code) == code:
            return cls(message, hint=hint)
    error = WorkloadFailed(message, hint=hint)
    error.exit_code = code  # type: ignore[assignment]  # the run's own status, passed through
    return error


def exit_code_for(error: BaseException) -> int:
    """The process exit code for any error reaching the CLI boundary."""
    if isinstance(error, ProctorError):
        return int(error.exit_code)
    if isinstance(error, KeyboardInterrupt):
        return int(ExitCode.INTERRUPTED)
    return int(ExitCode.INTERNAL)


# ---- a pydantic ValidationError as one line -----------------------------------------------
# Every model proctor validates user input with (config tables, profiles, flow files, bench
# options, requests, records, baselines) reports a rejection through these two functions, so
# the wording is one: `WHAT: FIELD.PATH: why (got VALUE)`, the other problems counted.
# Duck-typed on `.errors()` so this foundation module never imports pydantic.

_SECRET_WORDS = ("key", "token", "secret", "password", "passwd", "auth", "credential")
_VALUE_WIDTH = 60


def _field_path(loc: tuple[object, ...]) -> str:
    parts = []
    for part in loc:
        if part == "[key]":
            continue  # pydantic's marker for a dict key's own error
        if isinstance(part, int):
            parts.append(f"[{part}]")
        else:
            text = str(part)
            parts.append(f".{text!r}" if (" " in text or "." in text) else f".{text}")
    return "".join(parts).lstrip(".")


def _shown_value(path: str, value: object) -> str:
    """The rejected value, short, where showing it is safe and helps."""
    if any(word in path.lower() for word in _SECRET_WORDS):
        return ""  # never echo what may be a credential
    if not isinstance(value, (str, int, float, bool)) or value is None:
        return ""  # a whole table (missing field) or an object: the path says enough
    text = repr(value)
    if len(text) > _VALUE_WIDTH:
        text = text[: _VALUE_WIDTH - 1] + "…"
    return f" (got {text})"


def validation_problem(error: Any, *, what: str = "", at: str = "", limit: int = 3) -> str:
    """`error` (a pydantic ValidationError) as one line: each problem's field path (below the
    table `at`, where the model was validated), why, and the value given, the first `limit` of
    them, then how many more."""
    problems = []
    for item in error.errors():
        path = ".".join(p for p in (at, _field_path(tuple(item.get("loc", ())))) if p)
        why = str(item.get("msg", "invalid")).removeprefix("Value error, ")
        shown = _shown_value(path, item.get("input"))
        problems.append(f"{path}: {why}{shown}" if path else f"{why}{shown}")
    more = f" (+{len(problems) - limit} more)" if len(problems) > limit else ""
    body = "; ".join(problems[:limit]) + more
    return f"{what}: {body}" if what else body


E = TypeVar("E", bound=ProctorError)


def invalid(
    error: Any,
    *,
    what: str,
    at: str = "",
    hint: str | None = None,
    cls: type[E] = UsageError,  # type: ignore[assignment]
) -> E:
    """The one usage error for a rejected model: raise it `from None` at the boundary."""
    return cls(validation_problem(error, what=what, at=at), hint=hint)

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

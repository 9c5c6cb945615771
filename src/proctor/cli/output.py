"""Printing for the CLI: one console for people, plain JSON for automation.

Both consoles print text as it is: Rich markup is off, because what proctor prints is mostly
the user's own text (commands, names, paths, log lines, error messages) and `[x]` in it must
neither vanish nor crash. Styling goes through `Text` objects (`styled`, `print_error`).
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from proctor import redact

if TYPE_CHECKING:
    from rich.console import Console
    from rich.text import Text

    #: The consoles (made on first use: importing rich is tens of ms that `proctor run`,
    #: which prints plain lines, does not pay; see __getattr__).
    console: Console
    err_console: Console

# C0 controls but tab and newline, DEL, and C1 controls: shown as Unicode control pictures
# (ESC as U+241B) or U+FFFD, one character for one, so a record's name or a user's argument
# cannot move the cursor, clear the screen or retitle the terminal, and styles keep their place.
_CONTROLS = {c: 0x2400 + c for c in range(0x20) if c not in (0x09, 0x0A)}
_CONTROLS.update({0x7F: 0x2421, **{c: 0xFFFD for c in range(0x80, 0xA0)}})


def printable(text: str) -> str:
    """`text` with its control characters made visible (tab and newline kept)."""
    return text.translate(_CONTROLS)


def _safe_console(**kwargs: Any) -> Console:
    """A Console that never sends a control character it was given as text to the terminal
    (its own styling codes are not text, and pass)."""
    from rich.console import Console
    from rich.text import Text

    class _SafeConsole(Console):
        def render_str(self, text: str, **kwargs: Any) -> Text:  # print(str), table cells
            return super().render_str(printable(text), **kwargs)

        def print(self, *objects: Any, **kwargs: Any) -> None:
            safe = []
            for obj in objects:
                if isinstance(obj, Text) and printable(obj.plain) != obj.plain:
                    obj = obj.copy()
                    obj.plain = printable(obj.plain)
                safe.append(obj)
            super().print(*safe, **kwargs)

    return _SafeConsole(**kwargs)


_CONSOLE_ARGS: dict[str, dict[str, Any]] = {
    "console": {"highlight": False, "markup": False},
    "err_console": {"stderr": True, "highlight": False, "soft_wrap": True, "markup": False},
}


def __getattr__(name: str) -> Any:
    """`console` and `err_console`, made on first use (PEP 562)."""
    if name in _CONSOLE_ARGS:
        made = globals()[name] = _safe_console(**_CONSOLE_ARGS[name])
        return made
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _err() -> Console:
    made: Console | None = globals().get("err_console")
    return __getattr__("err_console") if made is None else made


def styled(label: str, style: str, rest: str = "") -> Text:
    """`label` in `style`, then `rest` verbatim (never parsed as markup)."""
    from rich.text import Text

    return Text.assemble((label, style), rest)


def print_error(message: str) -> None:
    _err().print(styled("proctor:", "bold red", f" {message}"), soft_wrap=True)


def say(text: str) -> None:
    """One plain line on stderr, as err_console prints text (no markup, no wrap, controls
    made visible), without importing rich: for `proctor run`'s own lines."""
    sys.stderr.write(printable(text) + "\n")
    sys.stderr.flush()


def print_evidence(faults: Sequence[object], tails: Mapping[str, Sequence[str]] | None) -> None:
    """A ready gate's or a drain's evidence on stderr: the fault lines, then each log's tail."""
    err_console = _err()
    for match in faults[:10]:
        err_console.print(styled("fault:", "red", f" {match}"), highlight=False)
    for path, lines in (tails or {}).items():
        err_console.print(f"--- last lines of {path} ---", highlight=False)
        for line in lines:
            err_console.print(line, highlight=False, markup=False)


class _JsonMode:
    """Under `--json` the command's document is held until the command ends, so that an error
    after it (a bench that failed, a regression found) goes into the same one object."""

    active = False
    pending: ClassVar[list[Any]] = []
    #: (reason, fix) of a failure the command returned as an exit code without raising it
    #: (a far command's own error, across --target): said in place of the code's meaning.
    told: ClassVar[tuple[str, str | None] | None] = None


def json_errors(active: bool) -> None:
    """Turn on (the CLI's error handler, for a command run with --json) or off the holding of
    the command's JSON document until `end_json` or `print_json_error`."""
    _JsonMode.active = active
    _JsonMode.pending = []
    _JsonMode.told = None


def tell_json_error(reason: str, fix: str | None) -> None:
    """Why the command is about to end with a failing exit code it did not raise (the error a
    far proctor answered with): the reason and fix of its JSON error, where no error raised
    here says otherwise."""
    _JsonMode.told = (reason, fix)


def json_errors_active() -> bool:
    return _JsonMode.active


def held_json() -> Any:
    """The document the command printed under --json, not yet written (None: none)."""
    return _JsonMode.pending[-1] if _JsonMode.pending else None


def end_json() -> None:
    """The command succeeded: print the document it held."""
    for doc in _JsonMode.pending:
        _write_json(doc)
    _JsonMode.pending = []


def print_json_error(exit_code: int, reason: str, fix: str | None, *, raised: bool = True) -> None:
    """The one JSON object of a failed command on stdout: its document (run_id, outcome, what
    it had found) with `error` added, or `error` alone when it printed none. A document that
    is not an object (a list of rows) goes under `result`. Where the command did not raise
    (`raised` False: the reason is the code's meaning), what it told (tell_json_error) is
    said instead."""
    if _JsonMode.told is not None and not raised:
        reason, fix = _JsonMode.told
    error = {"error": {"exit_code": exit_code, "reason": reason, "fix": fix}}
    held, _JsonMode.pending, _JsonMode.told = _JsonMode.pending, [], None
    for doc in held[:-1]:
        _write_json(doc)
    if not held:
        _write_json(error)
    elif isinstance(held[-1], dict):
        _write_json({**held[-1], **error})
    else:
        _write_json({"result": held[-1], **error})


def print_json(data: Any) -> None:
    """Strict JSON (RFC 8259): a float that is nan or infinite prints as null, never as the
    `NaN` / `Infinity` tokens that jq and other parsers refuse. Masked as a document, field by
    field (`redact.data`), not as a line: a secret `failed` masks the user's words, never an
    `"outcome": "failed"`. Under the CLI's --json error handling, held until the command ends
    (`end_json`, `print_json_error`); a second document prints the first."""
    if _JsonMode.active:
        # Copied through JSON now: the caller may change its dict after printing it.
        copy = json.loads(json.dumps(_finite(data), default=str))
        for doc in _JsonMode.pending:
            _write_json(doc)
        _JsonMode.pending = [copy]
        return
    _write_json(data)


def _write_json(data: Any) -> None:
    # Through JSON first, so that what `default=str` writes (paths, times) is masked too.
    masked = redact.data(json.loads(json.dumps(_finite(data), default=str)))
    text = json.dumps(masked, indent=2, sort_keys=False, default=str, allow_nan=False)
    stream = redact.unmasked(sys.stdout)
    stream.write(text + "\n")
    stream.flush()


def _finite(data: Any) -> Any:
    if isinstance(data, float):
        return data if math.isfinite(data) else None
    if isinstance(data, dict):
        return {k: _finite(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [_finite(v) for v in data]
    return data

"""Load a file to import: bounded, UTF-8, JSON (or YAML for a Benchmark Report), one line
saying what is wrong otherwise (UsageError, exit 64).

The read is results/reading.py's: a regular file over PROCTOR_RESULTS_MAX_BYTES (64 MiB) is
refused, a pipe or device is read until the cap or 30 s; whatever was not read refuses the
import (half a result is not imported).
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any

from proctor.errors import UsageError
from proctor.results.reading import read_bounded

_HINT = "give the file the tool wrote, unedited"


def read_all(path: Path) -> bytes:
    """Every byte of `path`, within the bound; UsageError where it is more."""
    read = read_bounded(path)
    if read.cut:
        raise UsageError(
            f"{path}: {read.cut}",
            hint="a result file is one finished document; set PROCTOR_RESULTS_MAX_BYTES "
            "for a larger one",
        )
    return read.data


def load_document(path: Path) -> Any:
    """The JSON (or YAML) document in `path`."""
    if path.is_dir():
        raise UsageError(f"{path} is a directory", hint="give the result file itself")
    raw = read_all(path)
    try:
        body = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise UsageError(
            f"{path}: not UTF-8 text (byte {error.start} is 0x{raw[error.start]:02x})",
            hint=_HINT,
        ) from None
    body = body.removeprefix("\ufeff")
    if not body.strip():
        raise UsageError(f"{path} is empty", hint=_HINT)
    if "\x00" in body:
        raise UsageError(f"{path}: holds a NUL byte, not a text result", hint=_HINT)
    try:
        return json.loads(body)
    except RecursionError:
        raise UsageError(f"{path}: nested too deeply to read", hint=_HINT) from None
    except json.JSONDecodeError as error:
        if body.lstrip()[:1] in ("{", "["):
            raise UsageError(
                f"{path}: not JSON ({error.msg}, line {error.lineno} column {error.colno})",
                hint=_HINT,
            ) from None
        json_error = f"{error.msg}, line {error.lineno}"
    return _yaml(path, body, json_error)


def _yaml(path: Path, body: str, json_error: str) -> Any:
    """A Benchmark Report in YAML (llm-d-benchmark writes YAML); PyYAML where installed."""
    try:  # imported by name: PyYAML is optional, and has no type stubs here
        yaml: Any = importlib.import_module("yaml")
    except ImportError:
        raise UsageError(
            f"{path}: not JSON ({json_error}); a YAML Benchmark Report needs PyYAML",
            hint="pip install pyyaml, or convert the report to JSON",
        ) from None
    try:
        obj = yaml.safe_load(body)
    except RecursionError:
        raise UsageError(f"{path}: nested too deeply to read", hint=_HINT) from None
    except yaml.YAMLError as error:
        where = getattr(error, "problem_mark", None)
        line = f", line {where.line + 1}" if where is not None else ""
        raise UsageError(
            f"{path}: neither JSON nor YAML ({json_error}{line})", hint=_HINT
        ) from None
    if not isinstance(obj, dict):
        raise UsageError(f"{path}: not JSON ({json_error}), and no YAML mapping", hint=_HINT)
    return _plain(obj)


def _plain(obj: Any) -> Any:
    """YAML's dates and times as ISO text, as JSON would have them."""
    import datetime

    if isinstance(obj, dict):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_plain(v) for v in obj]
    if isinstance(obj, (datetime.date, datetime.datetime)):
        return obj.isoformat()
    return obj


__all__ = ["load_document", "read_all"]

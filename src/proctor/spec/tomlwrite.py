"""A table written back as TOML (a flow file whose file paths were rewritten to name the far
copies, targets/remote/shipfiles.py): the standard library reads TOML but does not write it.

Every value is written inline (strings as JSON-escaped basic strings, tables as inline tables),
and the text is read back and compared before it is used: a table this writer cannot express
exactly is an error, never a different file.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import re
import sys
from typing import Any

from proctor.errors import ConfigError, InternalError

_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def _key(name: str) -> str:
    return name if _BARE_KEY.match(name) else _string(name)


def _string(text: str) -> str:
    # JSON escapes are TOML escapes; DEL must be escaped in TOML, not in JSON.
    return json.dumps(text, ensure_ascii=False).replace("\x7f", "\\u007f")


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    if isinstance(value, dict):
        body = ", ".join(f"{_key(str(k))} = {_value(v)}" for k, v in value.items())
        return "{ " + body + " }" if body else "{}"
    raise ConfigError(f"cannot write a {type(value).__name__} as TOML")


def dump_toml(tables: dict[str, dict[str, Any]]) -> str:
    """`tables` ({"flow": {...}}) as TOML text, one `[name]` section each; checked by reading
    it back."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    lines: list[str] = []
    for name, table in tables.items():
        lines.append(f"[{_key(name)}]")
        lines += [f"{_key(str(k))} = {_value(v)}" for k, v in table.items()]
    text = "\n".join(lines) + "\n"
    if tomllib.loads(text) != tables:
        raise InternalError("the rewritten TOML does not read back as the same table",
                            hint="report this with the flow file")  # fmt: skip
    return text


__all__ = ["dump_toml"]

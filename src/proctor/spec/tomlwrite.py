"""A table written back as TOML (a flow file whose file paths were rewritten to name the far
copies, targets/remote/shipfiles.py): the standard library reads TOML but does not write it,
so tomli-w (the writer of tomllib's own lineage) writes it.

The text is read back and compared before it is used: a table that does not come back the
same is an error, never a different file.
"""

from __future__ import annotations

import sys
from typing import Any

from proctor.errors import ConfigError, InternalError


def dump_toml(tables: dict[str, dict[str, Any]]) -> str:
    """`tables` ({"flow": {...}}) as TOML text; checked by reading it back."""
    import tomli_w

    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    try:
        text = tomli_w.dumps(tables)
    except (TypeError, ValueError) as error:
        raise ConfigError(
            f"cannot write the table as TOML: {error}", hint="a flow file holds only TOML values"
        ) from None
    if tomllib.loads(text) != tables:
        raise InternalError(
            "the rewritten TOML does not read back as the same table",
            hint="report this with the flow file",
        )
    return text


__all__ = ["dump_toml"]

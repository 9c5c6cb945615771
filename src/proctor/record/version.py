"""The record schema's identity and version, without pydantic (the wrapper and the store
read them; the models in record/schema.py use them).

Versions:
    1  the first records: `command`/`server`/workload kinds under "proctor.run", flows under
       "proctor.flow", sweeps under "proctor.sweep", remote placeholders without a version.
    2  one schema id ("proctor.run") and one shared core for every kind (record/schema.py);
       version-1 records are read by upgrading them (`schema.upgrade`).
"""

from __future__ import annotations

SCHEMA_ID = "proctor.run"
SCHEMA_VERSION = 2
#: Versions this proctor reads (and the store indexes).
KNOWN_VERSIONS: frozenset[int] = frozenset({1, 2})

__all__ = ["KNOWN_VERSIONS", "SCHEMA_ID", "SCHEMA_VERSION"]

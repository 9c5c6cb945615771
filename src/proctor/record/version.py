"""The record schema's identity and version, without pydantic (the wrapper and the store
read them; the models in record/schema.py use them).

Versions:
    1  the first records: `command`/`server`/workload kinds under "proctor.run", flows under
       "proctor.flow", sweeps under "proctor.sweep", remote placeholders without a version.
    2  one schema id ("proctor.run") and one shared core for every kind (record/schema.py);
       version-1 records are read by upgrading them (`schema.upgrade`).
"""

from __future__ import annotations

from proctor.version import KNOWN_RECORD_VERSIONS as KNOWN_VERSIONS
from proctor.version import RECORD_SCHEMA_ID as SCHEMA_ID
from proctor.version import RECORD_SCHEMA_VERSION as SCHEMA_VERSION

__all__ = ["KNOWN_VERSIONS", "SCHEMA_ID", "SCHEMA_VERSION"]

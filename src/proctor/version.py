"""proctor's version and where its package lives (foundation: imports nothing of proctor)."""

from __future__ import annotations

from pathlib import Path

__version__ = "0.1.0"

# The installed package directory: shipped to far hosts, and recorded by the far-side agent.
PACKAGE_DIR = Path(__file__).resolve().parent

# The run record's schema id and the versions this proctor reads (history in record/version.py).
# Here, in the foundation, because the store (below record in the layers) checks them too.
RECORD_SCHEMA_ID = "proctor.run"
RECORD_SCHEMA_VERSION = 2
KNOWN_RECORD_VERSIONS: frozenset[int] = frozenset({1, 2})

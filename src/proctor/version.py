"""proctor's version and where its package lives (foundation: imports nothing of proctor)."""

from __future__ import annotations

from pathlib import Path

__version__ = "0.1.0"

# The installed package directory: shipped to far hosts, and recorded by the far-side agent.
PACKAGE_DIR = Path(__file__).resolve().parent

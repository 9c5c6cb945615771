"""proctor: run GPU benchmark and LLM-inference workloads so that their results can be trusted."""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]

"""The bench's settings: `BenchConfig` is the typed job `proctor.jobs.bench.BenchJob` (declared
there, once); the names here are kept for the load generator's modules that read it."""

from __future__ import annotations

from proctor.jobs.bench import (
    SLO_KEYS,
    BenchJob,
    Endpoint,
    TokenizerMode,
    parse_goodput,
    parse_rate,
)

BenchConfig = BenchJob

__all__ = ["SLO_KEYS", "BenchConfig", "Endpoint", "TokenizerMode", "parse_goodput", "parse_rate"]

"""The dataset kinds a bench takes (`--dataset KIND[:PATH]`), declared once: the load generator
reads them, and a far target's shipping reads which of them name a file (docs/bench.md#datasets)."""

from __future__ import annotations

DATASET_KINDS = ("random", "jsonl", "sharegpt", "shared-prefix", "multi-turn", "trace")
# The kinds that name a file: read strictly by the bench, shipped with a command to a far target.
FILE_DATASETS = ("jsonl", "sharegpt", "multi-turn", "trace")
DATASET_SPECS = "random | jsonl:PATH | sharegpt:PATH | shared-prefix | multi-turn:PATH | trace:PATH"


def split_dataset(spec: str) -> tuple[str, str]:
    """`jsonl:data/p.jsonl` -> ("jsonl", "data/p.jsonl"); `random` -> ("random", "")."""
    kind, _, path = spec.partition(":")
    return kind.strip().lower(), path

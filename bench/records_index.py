"""Cost of typed records where many are read: indexing run directories into the store, which
`runs list` does over every run when there is no store file (and `runs reindex` always).

Anchor: the indexer as it was, reading each record as a dict (kept here as `index_dict`). New:
`Store.index_run_dir`, which builds each row from the typed record (record/schema.py). Both
index the same N run directories (one record of each kind, in turn) into a fresh in-memory
store; the median of the repeats is printed for each, with the ratio new / old. Also printed:
the wall time of `proctor runs list --json --limit 0` over those runs without a store file
(the listing indexes them into memory), and the one-off import of the record models in a fresh
interpreter: what the run wrapper, which imports no pydantic at start-up, pays when it writes
its store row.

Run: .venv/bin/python bench/records_index.py [--n 1000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))

from tests.store.test_ingest import RECORDS, dict_row  # noqa: E402

from proctor.store.db import (  # noqa: E402
    Store,
    metrics_of_run_dir,
    read_record,
    record_problem,
)

KINDS = ("command", "server", "bench", "slurm", "flow", "sweep", "remote", "v1-command")


def make_runs(runs: Path, n: int) -> list[Path]:
    dirs = []
    for i in range(n):
        kind = KINDS[i % len(KINDS)]
        path = runs / f"20260101-{i:06d}-{kind}"
        path.mkdir(parents=True)
        (path / "record.json").write_text(json.dumps({"run_id": path.name, **RECORDS[kind]}))
        dirs.append(path)
    return dirs


def index_dict(store: Store, run_dir: Path) -> bool:
    """The indexer before typed records: the row from the record as a dict."""
    record: dict[str, Any] | None = read_record(run_dir)
    if record is None or record_problem(record) is not None:
        return False
    store.upsert_run(dict_row(record, run_dir))
    store.set_metrics(record["run_id"], list(metrics_of_run_dir(run_dir)))
    return True


def timed_index(dirs: list[Path], typed: bool, repeats: int) -> float:
    samples = []
    for _ in range(repeats):
        with Store.in_memory() as store:
            t0 = time.perf_counter()
            for d in dirs:
                assert store.index_run_dir(d) if typed else index_dict(store, d)
            samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def cli_list(runs: Path, repeats: int) -> float:
    env = {**os.environ, "PROCTOR_RUNS_DIR": str(runs)}
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        subprocess.run(
            [
                sys.executable,
                "-m",
                "proctor.cli.main",
                "runs",
                "list",
                "--json",
                "--limit",
                "0",
                "--runs-dir",
                str(runs),
            ],
            env=env,
            check=True,
            capture_output=True,
        )
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def import_cost(repeats: int) -> float:
    code = (
        "import time, proctor.store.db; t = time.perf_counter(); import proctor.record.schema;"
        " print(time.perf_counter() - t)"
    )
    argv = [sys.executable, "-c", code]
    out = [
        float(subprocess.run(argv, check=True, capture_output=True, text=True).stdout)
        for _ in range(repeats)
    ]
    return statistics.median(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        runs = Path(tmp) / "runs"
        dirs = make_runs(runs, args.n)
        timed_index(dirs, True, 1)  # warm: the models' import and the page cache
        old = timed_index(dirs, False, args.repeats)
        new = timed_index(dirs, True, args.repeats)
        listing = cli_list(runs, max(1, args.repeats // 2))
    per = 1e6 / args.n
    print(f"index {args.n} records into memory (median of {args.repeats}):")
    print(f"  dict rows (anchor)   {old * 1e3:8.1f} ms  ({old * per:.0f} us/record)")
    print(f"  typed rows (now)     {new * 1e3:8.1f} ms  ({new * per:.0f} us/record)")
    print(f"  ratio typed / dict   {new / old:8.2f}x")
    print(f"proctor runs list --json over {args.n} runs, no store file: {listing:.2f} s wall")
    print(
        f"record models' import in a fresh interpreter: {import_cost(3) * 1e3:.0f} ms "
        "(paid once by the wrapper when it writes its store row)"
    )


if __name__ == "__main__":
    main()

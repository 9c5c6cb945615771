"""`runs list` and `runs show last` over 10,000 and 100,000 runs (issue 20, "At scale").

Makes N real run directories (record.json of a finished command run, exit_code 0; ids one
second apart) and their store, whose rows are written straight into SQLite (indexing 100,000
records through the typed models would take minutes and is not what is measured). Then times
each command as a user runs it (a fresh `python -m proctor.cli.main`, median of the repeats)
against two anchors: `python -c pass` and `proctor runs list` over an empty runs directory
(the CLI's own start-up). "over start-up" is a command's time less that second anchor: what
the runs cost. Also timed, in this process: the library's part of a listing (open the store,
bring it up to date, read the newest 50 rows of the index).

"first" is the first listing after the runs appeared (the store then checks the names in the
runs directory against its rows once); "steady" is any later one while those names are
unchanged (the store is current: one listing of the runs directory's names, no walk of the
run directories, the newest rows read from the index).

Run: .venv/bin/python bench/store_scale.py [--n 10000 100000] [--repeats 3] [--src DIR]
(--src: the `src` of another checkout, to time an older proctor over the same runs.)

Measured 2026-12-04 on the shared 2-core machine, loaded by other jobs (load average 10-13):
the CLI's own start-up there was 1.7-1.9 s and moved by +-0.5 s between runs, so the CLI
lines below are dominated by it; the in-process lines (median of 5, fresh interpreter, the same
runs for the old and the new code) are the ones to compare. Before: main at 208559a
(`--src build/before/src`, from `git archive 208559a src`); after: this branch.

    in-process, median of 5          10,000 runs        100,000 runs
                                     before   after     before    after
    runs list (newest 50)            276 ms   69 ms     3316 ms   142 ms
    last (`runs show last`'s lookup)  82 ms   34 ms      927 ms   111 ms

    .venv/bin/python bench/store_scale.py --n 10000 100000 --repeats 5 --inproc-only
    .venv/bin/python bench/store_scale.py --n 10000 100000 --repeats 5 --inproc-only \
        --src build/before/src

CLI wall time, after (python -c pass 95 ms; `runs list` of an empty runs dir 1940 ms):
10,000 runs: runs list 1757 ms (first, checking the names once: 3441), --json 2532,
runs show last 2503, --limit 0 --json 8100, reindex 11363, no store 7554; 100,000 runs:
runs list 1704 ms (first: 11816), --json 1810, runs show last 1704. Before, 10,000 runs
(python -c pass 45 ms, empty listing 1671 ms): runs list 1492-1545, runs show last 1161,
--limit 0 --json 4612, reindex 28063 (one commit per row then; one transaction now),
no store 9754. (.venv/bin/python bench/store_scale.py --n 10000 100000 --repeats 3 [--src
build/before/src]). On this machine listing 100,000 names (os.listdir) alone took 100-280 ms,
which is most of what is left of the 142 ms; `--limit 0`, the no-store listing and reindex
still read every record (pydantic, about 1 ms each) and were not the target here.
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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from proctor.record.schema import parse_record  # noqa: E402
from proctor.store.db import RUN_COLUMNS, Store, row_from_record  # noqa: E402

BASE = 1_767_225_600  # 2026-01-01T00:00:00Z
TEMPLATE = {
    "schema": "proctor.run",
    "schema_version": 2,
    "kind": "command",
    "name": "job",
    "cwd": "/w",
    "log": "job.log",
    "proctor_version": "0.2.0",
    "argv": ["true"],
    "outcome": "ok",
    "exit": {"code": 0, "signal": None, "decided_by": "command"},
    "duration_s": 0.5,
    "source": {"commit": "abc1234", "dirty": False},
}


def make_runs(runs: Path, n: int) -> None:
    """N run directories and a store holding a row for each."""
    runs.mkdir(parents=True)
    row = row_from_record(parse_record({"run_id": "x", "created_at": "", **TEMPLATE}), runs)
    rows = []
    for i in range(n):
        stamp = time.gmtime(BASE + i)
        run_id = time.strftime("%Y%m%d-%H%M%S", stamp) + f"-{i % 0xFFFFFF:06x}"
        created = time.strftime("%Y-%m-%dT%H:%M:%S.000+00:00", stamp)
        path = runs / run_id
        path.mkdir()
        record = {"run_id": run_id, **TEMPLATE, "created_at": created}
        (path / "record.json").write_text(json.dumps(record))
        (path / "exit_code").write_text("0\n")
        rows.append({**row, "id": run_id, "dir": str(path), "created_at": created})
    with Store(runs / "proctor.sqlite") as store, store.transaction():
        marks = ", ".join("?" for _ in RUN_COLUMNS)
        store.conn.executemany(
            f"INSERT INTO runs ({', '.join(RUN_COLUMNS)}) VALUES ({marks})",
            [[r.get(c) for c in RUN_COLUMNS] for r in rows],
        )


def timed(argv: list[str], env: dict[str, str], repeats: int) -> float:
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        subprocess.run(argv, env=env, check=True, capture_output=True)
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


# The library's part of `runs list` (default 50) and of 'last', timed inside a fresh
# interpreter that imports proctor from --src: the same runs, old or new code, without the
# CLI's start-up (seconds, and noisy, on a loaded machine).
INPROC = """
import statistics, sys, time
from pathlib import Path
from proctor.store.db import open_up_to_date
runs = Path(sys.argv[1]); repeats = int(sys.argv[2])
try:
    from proctor.store.sync import newest_run_dir
    last = lambda: newest_run_dir(runs / "proctor.sqlite", runs)
except ImportError:  # before the store said which run is the newest
    from proctor.supervise.launch import resolve_run
    last = lambda: resolve_run(runs, "last").path
def listing():
    store, _ = open_up_to_date(runs / "proctor.sqlite", runs)
    with store:
        assert len(store.runs(limit=50)) == 50
for name, call in (("list", listing), ("last", last)):
    call()  # the first: a store met for the first time is checked against the runs once
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter(); call(); samples.append(time.perf_counter() - t0)
    print(name, statistics.median(samples))
"""


def inproc(runs: Path, env: dict[str, str], repeats: int) -> dict[str, float]:
    argv = [sys.executable, "-c", INPROC, str(runs), str(repeats)]
    out = subprocess.run(argv, env=env, check=True, capture_output=True, text=True).stdout
    return {name: float(value) for name, value in (line.split() for line in out.splitlines())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--src", type=Path, default=ROOT / "src")
    parser.add_argument(
        "--all-max",
        type=int,
        default=10_000,
        help="time --limit 0, reindex, no-store listing up to this N",
    )
    parser.add_argument("--inproc-only", action="store_true", help="skip the CLI timings")
    args = parser.parse_args()
    path = os.pathsep.join([str(args.src.resolve()), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": path, "COLUMNS": "200"}
    cli = [sys.executable, "-m", "proctor.cli.main"]
    with tempfile.TemporaryDirectory() as tmp:
        empty = Path(tmp) / "empty"
        empty.mkdir()
        anchor = timed([sys.executable, "-c", "pass"], env, args.repeats)
        if args.inproc_only:
            cli = [sys.executable, "-c", "pass"]
        start = timed([*cli, "runs", "list", "--runs-dir", str(empty)], env, args.repeats)
        print(
            f"src {args.src}; anchors: python -c pass {anchor * 1e3:.0f} ms; "
            f"runs list, empty runs dir {start * 1e3:.0f} ms (start-up)"
        )
        for n in args.n:
            runs = Path(tmp) / f"runs{n}"
            t0 = time.perf_counter()
            make_runs(runs, n)
            print(f"\n{n} runs (made in {time.perf_counter() - t0:.0f} s):")
            d = ["--runs-dir", str(runs)]
            r = args.repeats
            cases = [
                ("runs list (first)", [*cli, "runs", "list", *d], 1),
                ("runs list (steady)", [*cli, "runs", "list", *d], r),
                ("runs list --json", [*cli, "runs", "list", "--json", *d], r),
                ("runs show last", [*cli, "runs", "show", "last", *d], r),
            ]
            if n <= args.all_max:
                cases += [
                    (
                        "runs list --limit 0 --json",
                        [*cli, "runs", "list", "--limit", "0", "--json", *d],
                        1,
                    ),
                    ("runs reindex", [*cli, "runs", "reindex", *d], 1),
                ]
            for label, argv, repeats in cases if not args.inproc_only else []:
                took = timed(argv, env, repeats)
                print(
                    f"  {label:28} {took * 1e3:8.0f} ms  {took / anchor:6.1f}x python"
                    f"  over start-up {(took - start) * 1e3:+7.0f} ms"
                )
            for name, took in inproc(runs, env, args.repeats).items():
                label = f"in-process: {'list 50' if name == 'list' else 'last'}"
                print(f"  {label:28} {took * 1e3:8.1f} ms")
            if n <= args.all_max and not args.inproc_only:
                for path in runs.glob("proctor.sqlite*"):
                    path.unlink()
                took = timed([*cli, "runs", "list", *d], env, 1)
                print(
                    f"  {'runs list, no store':28} {took * 1e3:8.0f} ms  "
                    f"{took / anchor:6.1f}x python"
                )


if __name__ == "__main__":
    main()

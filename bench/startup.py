"""Start-up time of the `proctor` console script, next to `python -c pass` in the same run.

Each command runs --n times (interleaved, so load drifts hit them alike); the median wall time
is printed in ms, as a ratio to `python -c pass`, and against the goal of issue 22:
`--help` and `--version` <= 150 ms, `runs list` and `runs show last` <= 250 ms, `proctor run
-- true` <= 300 ms over `true`. The goals are for a lightly loaded machine: read the ratios
too, and the `python -c pass` figure for how loaded this one is.

Run: .venv/bin/python bench/startup.py [--n 15] [--baseline-src DIR]

Measured 2026-12-06, `--n 21 --baseline-src` the source before issue 22's changes (5648173),
interleaved in one run, the 2-core machine quiet (python -c pass 9 ms, true 0.8 ms):
  --help 22 ms (before 24), --version 22 (24), runs list 199 (193), runs show last 185 (182),
  run -- true 275 ms over true (before 468): every goal met (bench/NOTES.md, "Start-up").

Every command runs through the venv's `proctor` console script with this checkout's src/ first
on PYTHONPATH (so a worktree measures its own code, whatever the editable install points at).
--baseline-src DIR also runs every command from another checkout's source (DIR/src first on
PYTHONPATH, the same console script), in the same interleaved loop: a before/after on the same
load, e.g. `git archive BASE src | tar -x -C /tmp/base` then `--baseline-src /tmp/base`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE_SRC = Path(__file__).resolve().parent.parent / "src"

# (label, argv after the script, goal in ms or None, goal is over `true` rather than absolute)
CASES: list[tuple[str, list[str], float | None, bool]] = [
    ("proctor --help", ["--help"], 150, False),
    ("proctor --version", ["--version"], 150, False),
    ("proctor runs list", ["runs", "list"], 250, False),
    ("proctor runs show last", ["runs", "show", "last"], 250, False),
    ("proctor run -- true", ["run", "--", "true"], 300, True),
]


def _time(argv: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return (time.perf_counter() - t0) * 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=15, help="runs of each command (median)")
    parser.add_argument("--baseline-src", type=Path, help="a checkout to compare with (DIR/src)")
    args = parser.parse_args()
    script = Path(sys.executable).parent / "proctor"
    if not script.exists():
        sys.exit(f"no console script at {script}: pip install -e . into this interpreter's venv")
    true = shutil.which("true") or "/bin/true"
    with tempfile.TemporaryDirectory() as tmp:
        # Compiled modules as a user has them: the warm-up writes each checkout's .pyc files
        # (a shell with PYTHONDONTWRITEBYTECODE=1 would have every call compile every module).
        env = {
            **{k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"},
            "PROCTOR_RUNS_DIR": str(Path(tmp) / "runs"),
            "COLUMNS": "120",
            "PROCTOR_STATE_DIR": str(Path(tmp) / "state"),
        }
        subprocess.run(
            [str(script), "run", "--", "true"],
            env=_env_for("", env, None),
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        anchors = {"python -c pass": [sys.executable, "-c", "pass"], "true": [true]}
        commands = {label: [str(script), *argv] for label, argv, _, _ in CASES}
        every = {**anchors, **commands}
        if args.baseline_src is not None:
            every.update(
                {f"baseline: {label}": [str(script), *argv] for label, argv, _, _ in CASES}
            )
        baseline = None if args.baseline_src is None else args.baseline_src.resolve() / "src"
        times: dict[str, list[float]] = {label: [] for label in every}
        for label, argv in every.items():  # one warm-up each (page cache, .pyc)
            _time(argv, _env_for(label, env, baseline))
        for _ in range(args.n):
            for label, argv in every.items():
                times[label].append(_time(argv, _env_for(label, env, baseline)))
    med = {label: statistics.median(values) for label, values in times.items()}
    base, true_ms = med["python -c pass"], med["true"]
    print(f"medians of {args.n} runs; python -c pass {base:.0f} ms, true {true_ms:.1f} ms")
    print(f"{'command':<26}{'ms':>8}{'x pass':>8}  goal")
    for label, _argv, goal, over_true in CASES:
        ms = med[label]
        shown = ms - true_ms if over_true else ms
        what = f"{shown:.0f} ms over true" if over_true else f"{shown:.0f} ms"
        verdict = "" if goal is None else ("met" if shown <= goal else "NOT met")
        print(f"{label:<26}{ms:>8.0f}{ms / base:>8.1f}  <= {goal:.0f}: {what}, {verdict}")
        if f"baseline: {label}" in med:
            was = med[f"baseline: {label}"]
            print(f"{'  baseline':<26}{was:>8.0f}{was / base:>8.1f}")
    return 0


def _env_for(label: str, env: dict[str, str], baseline: Path | None) -> dict[str, str]:
    """The baseline's commands get its src first on PYTHONPATH; proctor's commands this
    checkout's (PYTHONPATH comes before the editable install's path), each before what the
    caller's PYTHONPATH held (a directory of packages where none are installed); anchors
    none."""
    clean = {k: v for k, v in env.items() if k != "PYTHONPATH"}
    rest = [env["PYTHONPATH"]] if env.get("PYTHONPATH") else []
    if label.startswith("baseline: "):
        assert baseline is not None
        return {**clean, "PYTHONPATH": os.pathsep.join([str(baseline), *rest])}
    if label.startswith("proctor") or not label:
        return {**clean, "PYTHONPATH": os.pathsep.join([str(HERE_SRC), *rest])}
    return clean


if __name__ == "__main__":
    sys.exit(main())

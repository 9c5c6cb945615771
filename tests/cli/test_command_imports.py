"""What the commands people run most import: `runs list`, `runs show last` and `run -- true`
load none of the load generator, the report, the far targets or their HTTP clients, `run --
true` not even typer, click or rich, and the run wrapper (a process every run starts) loads no pydantic, rich, typer or click, even while
it indexes its run. The time is measured by bench/startup.py; this guards the cause.

The command's imports are its sys.modules at exit; the wrapper's are read from
`python -X importtime` (PYTHONPROFILEIMPORTTIME=1, which every process proctor starts
inherits), written to its stderr file in the run directory.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

# The console script's code path, as `proctor ARGS`; at exit it writes every module it
# imported (straight to fd 2: proctor masks sys.stderr, which -X importtime writes through).
SCRIPT = """
import atexit, json, os, sys
atexit.register(lambda: os.write(2, ("MODULES " + json.dumps(sorted(sys.modules)) + "\\n").encode()))
sys.argv[0] = "proctor"
from proctor.cli.entry import entry
entry()
"""

NEVER = (
    "aiohttp",
    "httpx",
    "asyncssh",
    "plotly",
    "numpy",
    "prometheus_client",
    "proctor.workloads",
    "proctor.report",
    "proctor.results",
    "proctor.flow",
    "proctor.serve",
    "proctor.targets.ssh",
    "proctor.targets.runpod",
    "proctor.targets.slurm",
    "proctor.targets.remote",
)
NEVER_IN_THE_WRAPPER = (*NEVER, "pydantic", "rich", "typer", "click", "proctor.record.schema")


def imported(importtime: str) -> set[str]:
    """Module names from `-X importtime` output ("import time: self | cumulative | name")."""
    names = set()
    for line in importtime.splitlines():
        if line.startswith("import time:") and line.count("|") == 2:
            name = line.rsplit("|", 1)[1].strip()
            if name != "imported package":
                names.add(name)
    return names


def modules_at_exit(stderr: str) -> set[str]:
    line = next(x for x in stderr.splitlines() if x.startswith("MODULES "))
    return set(json.loads(line[len("MODULES ") :]))


def forbidden(names: set[str], never: tuple[str, ...]) -> list[str]:
    return sorted(n for n in names if any(n == m or n.startswith(m + ".") for m in never))


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("imports")
    return {
        **os.environ,
        "PROCTOR_RUNS_DIR": str(root / "runs"),
        "PROCTOR_STATE_DIR": str(root / "state"),
        "COLUMNS": "120",
    }


def _run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", SCRIPT, *args],
        env={**env, "PYTHONPROFILEIMPORTTIME": "1"},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_run_and_its_wrapper_import_only_what_a_run_needs(env: dict[str, str]) -> None:
    done = _run(env, "run", "--", "true")
    assert done.returncode == 0, done.stderr[-2000:]
    names = modules_at_exit(done.stderr)
    assert "proctor.cli.run" in names  # the reading works
    assert forbidden(names, NEVER) == []
    # The console script answers `run -- CMD` without the CLI framework (cli/entry.py).
    assert forbidden(names, ("typer", "click", "rich", "proctor.cli.main")) == []
    runs = sorted(Path(env["PROCTOR_RUNS_DIR"]).glob("*/.wrapper.err"))
    assert len(runs) == 1
    wrapper = imported(runs[0].read_text())
    assert "proctor.record.recorder" in wrapper and "proctor.store.db" in wrapper
    assert forbidden(wrapper, NEVER_IN_THE_WRAPPER) == []


def test_runs_list_and_show_import_no_workload_report_or_far_target(
    env: dict[str, str],
) -> None:
    if not list(Path(env["PROCTOR_RUNS_DIR"]).glob("*/record.json")):
        assert _run(env, "run", "--", "true").returncode == 0
    for args in (["runs", "list"], ["runs", "show", "last"]):
        done = _run(env, *args)
        assert done.returncode == 0, (args, done.stderr[-2000:])
        names = modules_at_exit(done.stderr)
        assert "proctor.cli.runs" in names and "proctor.store.db" in names
        assert forbidden(names, NEVER) == [], args


def test_the_reading_sees_a_forbidden_import() -> None:
    """The guard can fail: a command that loads the report is caught."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import proctor.report"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "proctor.report" in forbidden(imported(done.stderr), NEVER)
    assert "aiohttp" in forbidden(imported(done.stderr), NEVER)

"""`proctor --help` and `--version` answer without importing the command groups, and say exactly
what the full CLI says (bench/startup.py measures the time)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from proctor.cli import entry
from proctor.version import __version__

# The console script's code path, run as `proctor ARGS`; prints what it imported last.
SCRIPT = """
import atexit, json, sys
sys.argv[0] = "proctor"
heavy = ("typer", "click", "rich", "pydantic", "aiohttp", "httpx", "proctor.cli.main")
atexit.register(lambda: sys.stderr.write("MODULES " + json.dumps(
    sorted(m for m in sys.modules if m in heavy)) + "\\n"))
from proctor.cli.entry import entry
entry()
"""


def _console(*args: str, columns: str = "120") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": columns}
    return subprocess.run(
        [sys.executable, "-c", SCRIPT, *args], capture_output=True, text=True, env=env, timeout=120
    )


def _rendered(prog: str) -> str:
    """The full CLI's root help, rendered in a fresh process (mounting changes main.app)."""
    code = f"from proctor.cli.entry import render_root_help as r; print(r({prog!r}), end='')"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    return out.stdout


def _imported(result: subprocess.CompletedProcess[str]) -> list[str]:
    line = next(x for x in result.stderr.splitlines() if x.startswith("MODULES "))
    return list(json.loads(line[len("MODULES ") :]))


def test_stored_root_help_is_what_the_cli_renders() -> None:
    stored = entry.HELP_FILE.read_text(encoding="utf-8")
    assert stored == _rendered(entry.PROG), "regenerate: python -m proctor.cli.entry --write-help"


def test_root_help_and_version_import_nothing_heavy_and_match_the_full_cli() -> None:
    full = _rendered("proctor")
    for flag in ("--help", "-h"):
        fast = _console(flag)
        assert fast.returncode == 0, fast.stderr
        assert _imported(fast) == []
        assert fast.stdout == full
    version = _console("--version")
    assert version.returncode == 0
    assert version.stdout == f"proctor {__version__}\n"
    assert _imported(version) == []


def test_narrow_terminal_and_commands_go_to_the_full_cli() -> None:
    narrow = _console("--help", columns="60")
    assert narrow.returncode == 0
    assert "proctor.cli.main" in _imported(narrow)
    assert "Commands:" in narrow.stdout
    sub = _console("runs", "--help")
    assert sub.returncode == 0 and "proctor.cli.main" in _imported(sub)
    assert "Usage: proctor runs" in sub.stdout

"""docs/agents.md, the document for coding agents, says only what proctor does: the skill file
shipped in the package is the same text, its exit-code table is errors.py's, and every command
in its `bash` blocks runs, in order, against a real (fake OpenAI) server with the exit code the
document writes after it and the `--json` keys its table names."""

from __future__ import annotations

import importlib.resources
import json
import os
import re
import shlex
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from proctor.errors import EXIT_CODE_MEANINGS, ExitCode
from tests.fixtures.fake_openai_server import free_port
from tests.helpers import FAKE_ENGINE_TOML, GSM8K_DATA, REPO

DOC = REPO / "docs" / "agents.md"
SKILL = REPO / "src" / "proctor" / "skills" / "proctor.md"

#: `# exit 0` or `# exit 0 or 6` at the end of a command line.
EXIT_NOTE = re.compile(r"\s+#\s*exit\s+(\d+(?:\s+or\s+\d+)*)\s*$")
#: A setting the agent fills in: `NAME=value  # comment` (not `NAME=$(...)`).
SETTING = re.compile(r"^([A-Z][A-Z0-9_]*)=(?!\$\()\S*")
ASSIGN = re.compile(r"^([A-Z][A-Z0-9_]*)=\$\((.*)\)$")
REDIRECT = re.compile(r"\s>\s*(\S+)$")


def _doc() -> str:
    return DOC.read_text(encoding="utf-8")


def _section(text: str, heading: str) -> str:
    start = text.index(heading)
    end = text.find("\n## ", start + len(heading))
    return text[start : end if end >= 0 else len(text)]


def _table_rows(section: str) -> list[list[str]]:
    rows = []
    for line in section.splitlines():
        if line.startswith("| ") and not line.startswith("| ---"):
            rows.append([cell.strip() for cell in line.strip().strip("|").split(" | ")])
    return rows[1:]  # without the header


@dataclass
class Command:
    line: str  # as written, without the exit note
    codes: tuple[int, ...]


def _bash_lines(text: str) -> list[str]:
    lines = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        lines += [ln for ln in block.splitlines() if ln.strip() and not ln.startswith("#")]
    return lines


def _commands(text: str) -> tuple[list[str], list[Command]]:
    settings, commands = [], []
    for line in _bash_lines(text):
        if setting := SETTING.match(line):
            settings.append(setting.group(1))
            continue
        note = EXIT_NOTE.search(line)
        assert note, f"a command in docs/agents.md says no exit code: {line}"
        codes = tuple(int(c) for c in re.findall(r"\d+", note.group(1)))
        commands.append(Command(line[: note.start()].rstrip(), codes))
    return settings, commands


# ---- one text, one table ------------------------------------------------------------------


def test_the_skill_file_in_the_package_is_the_document() -> None:
    assert SKILL.read_bytes() == DOC.read_bytes(), (
        "src/proctor/skills/proctor.md differs from docs/agents.md: cp docs/agents.md "
        "src/proctor/skills/proctor.md"
    )
    shipped = importlib.resources.files("proctor").joinpath("skills/proctor.md")
    assert shipped.read_bytes() == DOC.read_bytes()
    package_data = re.search(r"^proctor = \[.*\]$", (REPO / "pyproject.toml").read_text(), re.M)
    assert package_data and '"skills/*.md"' in package_data.group(0)


def test_the_exit_code_table_is_the_one_in_errors_py() -> None:
    rows = _table_rows(_section(_doc(), "## Exit codes"))
    codes = [int(row[0]) for row in rows]
    assert sorted(codes) == sorted(int(c) for c in ExitCode), codes
    for row in rows:
        code = ExitCode(int(row[0]))
        assert row[1] == EXIT_CODE_MEANINGS[code], (code, row[1])
        assert len(row[2]) > 20, f"exit {int(code)} says nothing about what to do next"


def test_every_command_names_its_exit_code_and_the_steps_are_all_there() -> None:
    settings, commands = _commands(_doc())
    assert settings == ["ENGINE", "MODEL", "PY", "PORT", "KEY", "GSM8K", "BASELINES"]
    words = {" ".join(shlex.split(c.line.split("$(")[-1])[:3]) for c in commands}
    for step in ("run", "serve start", "serve ready", "bench", "eval gsm8k", "drain"):
        assert any(w.startswith(f"proctor {step}") for w in words), step
    for step in ("serve stop", "report", "runs compare", "check", "runs wait", "flow"):
        assert any(w.startswith(f"proctor {step}") for w in words), step
    for code in (0, 69):
        assert any(code in c.codes for c in commands)


# ---- every command, run -------------------------------------------------------------------


def _slow_fake_engine() -> str:
    """The fake engine of the CLI tests, answering at a known pace: 100 requests of 32 tokens
    at concurrency 4 take over 10 s, so the bench's window is long enough to be VALID."""
    toml = FAKE_ENGINE_TOML.replace(
        '.py"], model_arg', '.py", "--ttft", "0.02", "--itl", "0.02"], model_arg'
    )
    assert toml != FAKE_ENGINE_TOML
    return toml


def _json_out(stdout: str) -> Any:
    return json.loads(stdout)


def _has(doc: Any, path: str) -> bool:
    for part in re.findall(r"\[\d+\]|[^.\[\]]+", path):
        if part.startswith("["):
            index = int(part[1:-1])
            if not isinstance(doc, list) or len(doc) <= index:
                return False
            doc = doc[index]
        else:
            if not isinstance(doc, dict) or part not in doc:
                return False
            doc = doc[part]
    return True


@pytest.mark.slow  # about 3 min on 2 cores: two 17 s benches, lm-eval, a flow
@pytest.mark.timeout(900)
def test_every_command_runs_with_the_exit_code_the_document_claims(tmp_path: Path) -> None:
    text = _doc()
    _, commands = _commands(text)
    work = tmp_path / "agent"  # the agent's working directory
    work.mkdir()
    (work / "proctor.toml").write_text(_slow_fake_engine())
    (work / "baseline.toml").write_text("[metrics.output_throughput]\nvalue = 1.0\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "proctor"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m proctor.cli.main "$@"\n')
    shim.chmod(0o755)
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "PROCTOR_RUNS_DIR": str(tmp_path / "runs"),
        "PROCTOR_STATE_DIR": str(tmp_path / "state"),
        "COLUMNS": "200",
        # The settings block, filled in for the fake engine.
        "ENGINE": "fake",
        "MODEL": "m",
        "PY": sys.executable,
        "PORT": str(free_port()),
        "KEY": f"agents-doc-{uuid.uuid4().hex[:8]}",
        "GSM8K": str(GSM8K_DATA),
        "BASELINES": "baseline.toml",
    }
    outputs: dict[str, str] = {}  # command line -> its stdout (or the file it wrote)
    server = None
    try:
        for cmd in commands:
            assigned = ASSIGN.match(cmd.line)
            script = assigned.group(2) if assigned else cmd.line
            result = subprocess.run(
                ["bash", "-c", script],
                capture_output=True,
                text=True,
                env=env,
                cwd=work,
                timeout=600,
            )
            assert result.returncode in cmd.codes, (
                f"{cmd.line}\nexited {result.returncode}, the document says {cmd.codes}\n"
                f"stdout: {result.stdout[-2000:]}\nstderr: {result.stderr[-3000:]}"
            )
            out = result.stdout
            if redirect := REDIRECT.search(cmd.line):
                out = (work / redirect.group(1)).read_text()
            outputs[cmd.line] = out
            if assigned:
                value = out.strip()
                assert value and "\n" not in value, (cmd.line, out)
                env[assigned.group(1)] = value
                if assigned.group(1) == "RUN":
                    server = value
            if cmd.line.startswith("proctor check") and result.returncode == 6:
                # The one reason the document gives for 6 here: the bench is INVALID.
                assert _json_out(out)["validity"]["verdict"] == "INVALID", out
    finally:
        if server:  # the document stops it; this only covers a failed assertion above
            subprocess.run(
                [sys.executable, "-m", "proctor.cli.main", "serve", "stop", server],
                env=env,
                cwd=work,
                capture_output=True,
                timeout=120,
            )
    _check_json_shapes(text, outputs)
    _check_run_directory_table(tmp_path / "runs")
    # Nothing the document started is left running.
    listed = subprocess.run(
        [sys.executable, "-m", "proctor.cli.main", "runs", "list", "--json"],
        env=env,
        cwd=work,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    running = [r["id"] for r in json.loads(listed.stdout) if r["outcome"] == "running"]
    assert running == [], running


def _check_json_shapes(text: str, outputs: dict[str, str]) -> None:
    rows = _table_rows(_section(text, "## `--json` shapes"))
    assert rows
    for row in rows:
        name = row[0].strip("`")
        keys = re.findall(r"`([^`]+)`", row[-1])
        line = next(
            (
                line
                for line in outputs
                if re.match(rf"(\w+=\$\()?proctor {re.escape(name)}\b", line)
                and "--json" in line
                and "--detach" not in line
            ),
            None,
        )
        assert line is not None, f"no command of docs/agents.md runs `{name} --json`"
        doc = _json_out(outputs[line])
        missing = [key for key in keys if not _has(doc, key)]
        assert not missing, f"`proctor {name} --json` has no {missing}: {outputs[line][:1500]}"


def _check_run_directory_table(runs_dir: Path) -> None:
    """The README's run-directory table names every file these runs left (server, bench,
    eval, flow, command runs), and what lies beside them."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    table = _section(readme, "A run directory (")
    names = set()
    for row in _table_rows(table):
        names |= {name.rstrip("/") for name in re.findall(r"`([^`]+)`", row[0])}
    beside = readme[readme.index("Beside the run directories") :].split("\n\n")[0]
    names |= {name.rstrip("/") for name in re.findall(r"`([^`]+)`", beside)}
    kinds, unnamed = set(), []
    for entry in sorted(runs_dir.iterdir()):
        if not entry.is_dir() or entry.name.startswith("."):
            if entry.name not in names:
                unnamed.append(entry.name)
            continue
        kinds.add(json.loads((entry / "record.json").read_text())["kind"])
        for item in entry.iterdir():
            if item.name not in names and not (item.suffix == ".log" and "<name>.log" in names):
                unnamed.append(f"{entry.name}/{item.name}")
    assert {"command", "server", "bench", "eval", "flow"} <= kinds, kinds
    assert not unnamed, f"the README's run-directory table does not name: {unnamed}"

"""`proctor run [OPTIONS] -- CMD` through the console script's lean path (cli/entry.py,
`lean_run`): it reads the arguments exactly as Click does, hands the rest to the full CLI, and
behaves as the full CLI: exit status, output, errors in one line with their code."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import click
import pytest
import typer

from proctor.cli import groups
from proctor.cli.entry import parse_run
from proctor.cli.main import app

ENTRY = "import sys; sys.argv[0] = 'proctor'; from proctor.cli.entry import entry; entry()"


def click_reads(args: list[str]) -> dict[str, object]:
    """What the full CLI's `run` command reads from `args`: the values given, by name."""
    groups.mount(app, ["run"])
    root = typer.main.get_command(app)
    assert isinstance(root, click.Group)
    ctx = click.Context(root, info_name="proctor")
    run = root.get_command(ctx, "run")
    assert run is not None
    params = run.make_context("run", list(args), parent=ctx).params
    return {k: v for k, v in params.items() if v not in (None, False, ())}


READ_ALIKE = [
    ["--", "true"],
    ["true"],
    ["echo", "--name", "not-an-option"],
    ["-n", "x", "--env", "A=1", "-e", "B=2", "--", "a", "--", "b"],
    ["--name=z", "-d", "--", "x"],
    ["--name", "a", "--name", "b", "--", "x"],  # the last one wins
    ["--runs-dir", "r", "--timeout", "5s", "--grace", "1", "--key", "k", "--cwd", "/", "x"],
    ["--allow-unhealthy-gpu", "--detach", "--config", "p.toml", "--", "x", "-n"],
    ["--gpu-sample", "0.5", "--gpu-sample=2", "--", "true"],  # every CommandJob option
]
LEFT_TO_THE_FULL_CLI = [
    [],
    ["--"],
    ["--help"],
    ["--json", "--", "true"],
    ["--dry-run", "--", "true"],
    ["--target", "ssh://h", "--", "true"],
    ["--gpu-sample", "often", "--", "true"],  # Click's own error
    ["-nx", "--", "true"],
    ["-n=x", "--", "true"],
    ["--name"],
    ["--name", "-x", "--", "true"],
    ["--nam", "x", "--", "true"],
]


@pytest.mark.parametrize("args", READ_ALIKE)
def test_reads_what_click_reads(args: list[str]) -> None:
    parsed = parse_run(args)
    assert parsed is not None, args
    options, command = parsed
    mine: dict[str, object] = {k: v for k, v in options.items() if v not in (None, False, [])}
    if "env" in mine:
        mine["env"] = tuple(mine["env"])  # type: ignore[arg-type]
    assert {**mine, "command": tuple(command)} == click_reads(args)


@pytest.mark.parametrize("args", LEFT_TO_THE_FULL_CLI)
def test_anything_else_goes_to_the_full_cli(args: list[str]) -> None:
    assert parse_run(args) is None


def proctor(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", ENTRY, *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=120,
    )


def test_the_lean_path_behaves_as_the_full_cli(isolated_runs: Path, tmp_path: Path) -> None:
    work = Path.cwd()
    done = proctor("run", "-e", "WORD=hi", "--", "sh", "-c", "echo $WORD; exit 3", cwd=work)
    assert done.returncode == 3, done.stderr
    assert done.stdout == "hi\n"
    lines = done.stderr.splitlines()
    assert lines[0].startswith("proctor: run ") and "failed, exit 3" in lines[-1], lines
    (run,) = [p for p in isolated_runs.iterdir() if (p / "record.json").is_file()]
    record = json.loads((run / "record.json").read_text())
    assert record["outcome"] == "failed" and record["exit"]["code"] == 3

    detached = proctor("run", "--detach", "--name", "bg", "--", "true", cwd=work)
    assert detached.returncode == 0, detached.stderr
    assert (isolated_runs / detached.stdout.strip() / "bg.log").is_file()

    # An error: one line, the code of the table (the full CLI's handler maps it).
    missing = proctor("run", "--config", str(tmp_path / "nope.toml"), "--", "true", cwd=work)
    assert missing.returncode == 64
    assert missing.stderr.startswith("proctor: config file ") and "Traceback" not in (
        missing.stderr
    )
    assert missing.stdout == ""

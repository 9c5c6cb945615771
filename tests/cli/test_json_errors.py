"""Under --json every error is exactly one JSON object on stdout: `error` with the exit code,
the reason and the fix, inside the command's own document (run_id, outcome) where it has one."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import click
import pytest
import typer

from proctor.cli import groups
from proctor.cli import main as cli_main
from tests.fixtures.fake_openai_server import free_port
from tests.helpers import proctor


def one_object(stdout: str) -> dict[str, object]:
    """stdout parses as exactly one JSON object (json.loads refuses anything after it)."""
    data = json.loads(stdout)
    assert isinstance(data, dict), stdout
    return data


def the_error(result: subprocess.CompletedProcess[str]) -> dict[str, object]:
    data = one_object(result.stdout)
    error = data["error"]
    assert isinstance(error, dict), data
    assert error["exit_code"] == result.returncode, (data, result.stderr)
    assert isinstance(error["reason"], str) and error["reason"], data
    assert "fix" in error
    return data


# (arguments, the documented exit code, a word of the reason)
CASES = [
    (("check", "--json"), 64, "Missing argument"),
    (("runs", "show", "nope", "--json"), 64, "no runs in"),
    (("runs", "list", "--outcome", "bogus", "--json"), 64, "unknown --outcome"),
    (("runs", "list", "--bogus", "--json"), 64, "No such option"),
    (("runs", "wait", "last", "--json"), 64, "no runs"),
    (("serve", "ready", "--json"), 64, "no server run"),
    (("serve", "start", "--engine", "nope", "--model", "m", "--json"), 64, "nope"),
    (("plan", "--json", "--timeout", "soon", "--", "true"), 64, "--timeout"),
    (("report", "nope", "--json"), 64, "no runs"),
    (("bench", "--json", "--concurrency", "x", "--model", "m"), 64, "concurrency"),
    (("results", "parse", "missing.json", "--json"), 64, "missing.json"),
]


@pytest.mark.parametrize(("args", "code", "said"), CASES, ids=[" ".join(c[0]) for c in CASES])
def test_bad_input_under_json_is_one_json_error(
    args: tuple[str, ...], code: int, said: str
) -> None:
    result = proctor(*args)
    assert result.returncode == code, (result.stdout, result.stderr)
    error = the_error(result)["error"]
    assert said in str(error["reason"]), error  # type: ignore[index]


def test_a_bench_that_cannot_reach_its_server_says_why_in_its_json() -> None:
    port = free_port()  # nothing listens on it
    result = proctor("bench", "--port", str(port), "--model", "m", "--json", "--num-prompts", "2")
    assert result.returncode == 69, result.stderr
    data = the_error(result)
    assert data["outcome"] == "failed" and data["run_id"]
    error = data["error"]
    assert "cannot reach the server" in error["reason"]  # type: ignore[index]
    assert str(data["run_id"]) in error["fix"]  # type: ignore[index]  # its log


@pytest.mark.parametrize("status", [1, 3])
def test_a_failed_command_under_run_json_is_one_object_with_its_code(status: int) -> None:
    result = proctor("run", "--json", "--", sys.executable, "-c", f"raise SystemExit({status})")
    assert result.returncode == status, result.stderr
    data = the_error(result)
    assert data["run_id"] and data["outcome"] == "failed"
    # `run` passes its command's status through: 1 is the command's, not "hang detected".
    reason = str(data["error"]["reason"])  # type: ignore[index]
    assert "its command's own exit status" in reason and "hang" not in reason, reason


def test_success_under_json_prints_the_document_alone() -> None:
    result = proctor("runs", "list", "--json")
    assert result.returncode == 0 and json.loads(result.stdout) == []


def _json_commands() -> list[list[str]]:
    groups.mount(cli_main.app, [])
    root = typer.main.get_command(cli_main.app)

    def walk(command: click.Command, path: list[str]) -> list[list[str]]:
        if isinstance(command, click.Group):
            return [p for name, sub in command.commands.items() for p in walk(sub, [*path, name])]
        has = any("--json" in param.opts for param in command.params)
        return [path] if has else []

    return walk(root, [])


def test_every_command_with_json_answers_a_usage_error_in_json(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Every command that has --json, given an option it does not know: one JSON object, 64."""
    commands = _json_commands()
    assert len(commands) > 20  # the walk found the command tree
    for path in commands:
        code = cli_main.main([*path, "--json", "--no-such-option"])
        out = capsys.readouterr().out
        assert code == 64, path
        error = one_object(out)["error"]
        assert isinstance(error, dict) and error["exit_code"] == 64, (path, error)
        assert str(error["reason"]).startswith("No such option '--no-such-option'"), path
        assert str(error["fix"]).endswith(f"{' '.join(path)} --help`"), (path, error)


def test_without_json_an_error_prints_nothing_on_stdout(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert cli_main.main(["runs", "show", "nope"]) == 64
    captured = capsys.readouterr()
    assert captured.out == "" and "no runs in" in captured.err


def test_a_bug_under_json_is_one_json_error_with_70(tmp_path: Path) -> None:
    """A real process whose store read raises what proctor never expected: exit 70, and the
    JSON names the crash log as the stderr line does."""
    script = (
        "import sys\n"
        "import proctor.store.db as db\n"
        "def boom(self, **kw):\n"
        "    raise RuntimeError('boom')\n"
        "db.Store.runs = db.Store.iter_runs = boom\n"
        "from proctor.cli.main import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    proctor("run", "--", "true", check=True)  # a store to read
    result = subprocess.run(
        [sys.executable, "-c", script, "runs", "list", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 70, result.stderr
    error = the_error(result)["error"]
    assert "internal error" in error["reason"] and "crash" in error["fix"]  # type: ignore[index]
    assert "Traceback" not in result.stdout + result.stderr

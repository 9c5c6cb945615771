"""Bad input gets one clear line and a documented code; a bug gets one line, a log and 70."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from proctor.errors import EXIT_CODE_MEANINGS, ExitCode
from tests.helpers import REPO, proctor


def _one_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr
    return lines[0]


def test_exit_code_70_is_in_the_one_table_and_the_readme() -> None:
    assert ExitCode.INTERNAL == 70
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    for code, meaning in EXIT_CODE_MEANINGS.items():
        assert f"| {int(code)} | {meaning} |" in readme


def test_an_unexpected_error_is_one_line_a_crash_log_and_exit_70(tmp_path: Path) -> None:
    # A real process whose store read raises something proctor never expected.
    script = (
        "import sys\n"
        "import proctor.store.db as db\n"
        "def boom(self, **kw):\n"
        "    raise RuntimeError('boom [/x] ' + 'line two\\nof the message')\n"
        "db.Store.runs = db.Store.iter_runs = boom\n"
        "from proctor.cli.main import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    state = tmp_path / "state"
    env = {**os.environ, "PROCTOR_STATE_DIR": str(state), "HF_TOKEN": "hf_canary_secret_123"}
    result = subprocess.run(
        [sys.executable, "-c", script, "runs", "list", "--name", "hf_canary_secret_123"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert result.returncode == 70, result.stderr
    line = _one_line(result.stderr)
    assert "internal error" in line and "RuntimeError: boom [/x] line two" in line
    logs = list((state / "crashes").glob("proctor-crash-*.log"))
    assert len(logs) == 1 and str(logs[0]) in line
    text = logs[0].read_text(encoding="utf-8")
    assert "Traceback (most recent call last)" in text and "RuntimeError: boom" in text
    assert "hf_canary_secret_123" not in text + result.stderr  # the argv is masked


def test_non_utf8_config_is_a_usage_error_naming_file_and_offset() -> None:
    Path("proctor.toml").write_bytes(b'[run]\nruns_dir = "r\xff\xfe"\n')
    result = proctor("runs", "list", env={"PROCTOR_RUNS_DIR": ""})
    assert result.returncode == 64
    line = _one_line(result.stderr)
    assert "proctor.toml: not UTF-8 text: byte 0xff at offset 19" in line


def test_runs_dir_that_is_a_file_is_a_usage_error(tmp_path: Path) -> None:
    blocker = tmp_path / "afile"
    blocker.write_text("x")
    for args in (["runs", "list"], ["run", "--", "true"], ["runs", "reindex"]):
        result = proctor(*args, env={"PROCTOR_RUNS_DIR": str(blocker)})
        assert result.returncode == 64, (args, result.stderr)
        assert f"{blocker} is not a directory" in _one_line(result.stderr)
    result = proctor("run", "--runs-dir", str(blocker / "sub"), "--", "true")
    assert result.returncode == 64 and "is not a directory" in _one_line(result.stderr)


@pytest.mark.parametrize("value", ["99999999h", "inf", "nan"])
def test_absurd_timeout_is_a_usage_error_before_anything_runs(
    value: str, isolated_runs: Path
) -> None:
    result = proctor("run", "--timeout", value, "--", "true")
    assert result.returncode == 64, result.stderr
    assert "--timeout" in _one_line(result.stderr)
    assert not isolated_runs.exists() or not any(isolated_runs.iterdir())


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("serve", "ready", "--port", "99999"), "less than or equal to 65535 (got 99999)"),
        (("serve", "stop", "--port", "70000"), "less than or equal to 65535 (got 70000)"),
        (("drain", "--port", "0"), "greater than or equal to 1 (got 0)"),
    ],
)
def test_ports_out_of_range_are_usage_errors(args: tuple[str, ...], said: str) -> None:
    """The step's field refuses it (jobs/steps.py), as one usage error naming it."""
    result = proctor(*args, timeout=30)
    assert result.returncode == 64, result.stderr
    line = _one_line(result.stderr)
    assert f"port: Input should be {said}" in line and "Traceback" not in result.stderr


TRICKY = ["[bold]x[/bold]", "[/x]", "a[b]c"]


def test_user_text_with_brackets_is_printed_verbatim() -> None:
    proctor("run", "--", "echo", *TRICKY, check=True)
    # Errors (and their hints) carry the user's text as typed.
    for ref in TRICKY:
        result = proctor("runs", "show", ref)
        assert result.returncode == 64
        assert f"no run '{ref}'" in _one_line(result.stderr)
    # runs show prints the argv as it was.
    shown = proctor("runs", "show", "last", check=True).stdout
    assert str(["echo", *TRICKY]) in shown
    # --help keeps literal brackets of the help text.
    help_text = proctor("run", "--help", check=True).stdout
    assert "ssh://user@host[:port]" in help_text and "[slurm] nodes" in help_text


@pytest.mark.parametrize(
    ("module", "prog"),
    [
        ("proctor.supervise.wrapper", "proctor wrapper"),
        ("proctor.targets.slurm.tracker", "proctor slurm tracker"),
        ("proctor.targets.slurm.node", "proctor node"),
    ],
)
def test_helper_entry_points_say_one_line_and_exit_64(
    module: str, prog: str, tmp_path: Path
) -> None:
    result = subprocess.run(
        [sys.executable, "-m", module, str(tmp_path / "nowhere")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 64
    assert _one_line(result.stderr).startswith(f"{prog}: no ")


def test_step_entry_point_rejects_an_unknown_option_with_64() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "proctor.targets.remote.step", "--bogus"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 64
    assert (
        _one_line(result.stderr)
        == "proctor step: unknown option '--bogus' (known: --steps X, --answer)"
    )


def test_a_record_that_is_not_utf8_reads_as_missing_not_as_a_bug(isolated_runs: Path) -> None:
    proctor("run", "--", "true", check=True)
    run_dir = next(p for p in isolated_runs.iterdir() if p.is_dir())
    (run_dir / "record.json").write_bytes(b"\xff\xfe{garbage")
    for args in (
        ("runs", "show", run_dir.name),
        ("runs", "wait", run_dir.name),
        ("report", run_dir.name, "-o", str(isolated_runs.parent / "r.html")),
    ):
        result = proctor(*args)
        assert result.returncode not in (1, 70), (args, result.stderr)
        assert "Traceback" not in result.stderr and "internal error" not in result.stderr


@pytest.mark.parametrize(
    ("name", "args", "code"),
    [
        ("metrics.json", ("runs", "reindex"), 0),
        ("manifest.sha256", ("runs", "verify", "{id}"), 2),
        ("exit_code", ("runs", "wait", "{id}"), 6),
    ],
)
def test_evidence_files_of_garbage_bytes_are_evidence_not_bugs(
    name: str, args: tuple[str, ...], code: int, isolated_runs: Path
) -> None:
    proctor("run", "--", "true", check=True)
    run_dir = next(p for p in isolated_runs.iterdir() if p.is_dir())
    (run_dir / name).write_bytes(b"\xff\xfe garbage\n")
    result = proctor(*(a.format(id=run_dir.name) for a in args))
    assert result.returncode == code, result.stderr
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr


def test_an_argument_of_non_utf8_bytes_is_a_usage_error(isolated_runs: Path) -> None:
    result = subprocess.run(
        [sys.executable.encode(), b"-m", b"proctor.cli.main", b"run", b"--", b"echo", b"ab\xff"],
        capture_output=True,
        timeout=60,
    )
    assert result.returncode == 64, result.stderr
    line = _one_line(result.stderr.decode())
    assert "argument 4 ('ab\\xff') is not UTF-8 text: byte 0xff at position 2" in line
    assert not isolated_runs.exists() or not any(isolated_runs.iterdir())


def test_no_help_text_is_masked_as_a_secret() -> None:
    # Everything proctor prints goes through the redactor, its own --help too: prose such as
    # "Attach key: a second bench" read as `key: <secret>` and printed "Attach key: *** second".
    import click
    import typer

    from proctor.cli import groups
    from proctor.cli.main import app
    from proctor.redact import Redactor

    Found = list[tuple[tuple[str, ...], click.Command]]

    def commands(cmd: click.Command, path: tuple[str, ...]) -> Found:
        found = [(path, cmd)]
        if isinstance(cmd, click.Group):
            for name, sub in cmd.commands.items():
                found += commands(sub, (*path, name))
        return found

    groups.mount(app)  # every command group, as `proctor --help` mounts them
    root = typer.main.get_command(app)
    every = commands(root, ("proctor",))
    assert len(every) > 30
    redactor = Redactor()
    for path, cmd in every:
        with click.Context(cmd, info_name=" ".join(path)) as ctx:
            help_text = cmd.get_help(ctx)
        assert redactor.text(help_text) == help_text, path


def test_a_flow_file_given_without_file_is_refused_with_the_fix(tmp_path: Path) -> None:
    # `proctor flow f.toml` took the file as an engine argument and said "flow needs --engine".
    flow = tmp_path / "f.toml"
    flow.write_text('[flow]\nengine = "vllm"\nmodel = "m"\nworkload_cmd = "true"\n')
    r = proctor("flow", str(flow), cwd=tmp_path)
    assert r.returncode == 64
    assert f"--file {flow}" in _one_line(r.stderr)

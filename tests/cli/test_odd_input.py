"""Issue 20: bad or odd input gets one line and 64 (or the right answer), never a crash (70)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from proctor.errors import UsageError
from proctor.record.rundir import RunDir
from tests.helpers import only_run, proctor


def _one_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr and "internal error" not in stderr
    return lines[0]


# ---- NaN and infinity are never numbers proctor takes or writes ----------------------------


@pytest.mark.parametrize("value", ["nan", "1e309", "inf", "-inf"])
def test_gpu_sample_flag_that_is_not_finite_is_refused(value: str, isolated_runs: Path) -> None:
    result = proctor("run", "--gpu-sample", value, "--", "true")
    assert result.returncode == 64, result.stderr
    assert f"--gpu-sample {value}: not a finite number" in _one_line(result.stderr)
    assert not isolated_runs.exists() or not any(isolated_runs.iterdir())


def test_every_float_option_of_every_command_refuses_nan() -> None:
    import click
    import typer

    from proctor.cli import groups
    from proctor.cli.params import finite_floats

    app = typer.Typer()  # every command group, mounted on a tree of this test's own
    groups.mount(app, [])
    floats: list[str] = []

    def walk(command: click.Command, path: str) -> None:
        for param in command.params:
            if isinstance(param.type, click.types.FloatParamType):
                floats.append(f"{path} {param.name}")
                for value in ("nan", "1e309", "-inf"):
                    with pytest.raises(UsageError, match=f"{value}: not a finite number"):
                        param.type.convert(value, param, None)
        if isinstance(command, click.Group):
            for name, sub in command.commands.items():
                walk(sub, f"{path} {name}")

    walk(finite_floats(typer.main.get_command(app)), "proctor")
    assert len(floats) >= 20, floats  # bench, sweep, serve, offline, eval, slurm, run ...
    for args, said in (
        (
            ["bench", "--max-error-rate", "nan", "--base-url", "http://127.0.0.1:9"],
            "--max-error-rate nan",
        ),
        (
            ["serve", "start", "--min-free-disk", "inf", "--engine", "x", "--model", "m"],
            "--min-free-disk inf",
        ),
    ):
        result = proctor(*args)
        assert result.returncode == 64, result.stderr
        assert f"{said}: not a finite number" in _one_line(result.stderr)


@pytest.mark.parametrize("value", ["inf", "nan", "-inf"])
def test_gpu_sample_in_proctor_toml_that_is_not_finite_is_refused(value: str) -> None:
    Path("proctor.toml").write_text(f"[run]\ngpu_sample = {value}\n")
    line = _one_line(proctor("run", "--", "true").stderr)
    assert proctor("run", "--", "true").returncode == 64
    assert f"run.gpu_sample = {value}: not a finite number" in line


def test_plan_json_is_strict_json(isolated_runs: Path) -> None:
    result = proctor("run", "--gpu-sample", "0.5", "--", "true")
    assert result.returncode == 0, result.stderr

    def refuse(token: str) -> object:
        raise AssertionError(f"{token} in plan.json")

    for name in ("plan.json", "record.json"):
        text = (only_run(isolated_runs) / name).read_text()
        json.loads(text, parse_constant=refuse)


def test_a_nan_reaching_a_json_writer_fails_loudly(tmp_path: Path) -> None:
    run = RunDir(tmp_path / "r")
    run.path.mkdir()
    with pytest.raises(ValueError):
        run.write_json("plan.json", {"gpu_sample_s": math.nan})
    assert not (run.path / "plan.json").exists()


def test_runs_wait_on_a_record_with_a_nan_duration(isolated_runs: Path) -> None:
    assert proctor("run", "--", "true").returncode == 0
    run_dir = only_run(isolated_runs)
    path = run_dir / "record.json"
    data = json.loads(path.read_text())
    data["duration_s"] = math.nan
    path.write_text(json.dumps(data))  # Python writes NaN; proctor never does
    result = proctor("runs", "wait", run_dir.name)
    assert result.returncode == 0, result.stderr  # the run's own status, as recorded
    line = _one_line(result.stderr)
    assert f"run {run_dir.name}: ok, exit 0;" in line
    shown = proctor("runs", "show", "--json", run_dir.name)
    assert shown.returncode == 0 and json.loads(shown.stdout)["duration_s"] is None


# ---- environment tables ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("table", "said"),
    [
        ('{ "A B" = "1" }', "invalid environment variable name 'A B'"),
        ('{ "A\\u0000" = "1" }', "invalid environment variable name 'A\\x00'"),
        ('{ "A" = "x\\u0000y" }', "the value of A holds a NUL byte"),
        ('{ "1A" = "1" }', "invalid environment variable name '1A'"),
    ],
)
def test_bad_env_in_proctor_toml_is_one_line_and_64(table: str, said: str) -> None:
    Path("proctor.toml").write_text(f"[run]\nenv = {table}\n")
    result = proctor("run", "--", "true")
    assert result.returncode == 64, result.stderr
    line = _one_line(result.stderr)
    assert said in line and "proctor.toml" in line
    assert "\0" not in result.stderr


def test_bad_env_in_an_engine_profile_is_refused() -> None:
    Path("proctor.toml").write_text(
        '[engines.x]\nlaunchers = [{ command = ["true"] }]\nenv = { "A B" = "1" }\n'
    )
    result = proctor("serve", "start", "--engine", "x", "--model", "m")
    assert result.returncode == 64, result.stderr
    assert "invalid environment variable name 'A B'" in _one_line(result.stderr)


def test_env_flag_says_the_same() -> None:
    result = proctor("run", "--env", "A B=1", "--", "true")
    assert result.returncode == 64
    assert "invalid --env 'A B'" in _one_line(result.stderr)


# ---- paths: the runs directory, the current directory, proctor.toml -------------------------


def test_runs_dir_that_is_a_symlink_loop(tmp_path: Path) -> None:
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    for args in (
        ["run", "--runs-dir", str(loop), "--", "true"],
        ["run", "--runs-dir", str(loop / "sub"), "--", "true"],
        ["runs", "list", "--runs-dir", str(loop)],
    ):
        result = proctor(*args)
        assert result.returncode == 64, result.stderr
        assert "a symbolic link loop" in _one_line(result.stderr)


def test_runs_dir_with_a_component_over_255_bytes(tmp_path: Path) -> None:
    long = tmp_path / ("a" * 300)
    for args in (
        ["run", "--runs-dir", str(long), "--", "true"],
        ["runs", "list", "--runs-dir", str(long)],
    ):
        result = proctor(*args)
        assert result.returncode == 64, result.stderr
        assert "file name too long" in _one_line(result.stderr)


def test_running_from_a_deleted_directory(tmp_path: Path) -> None:
    gone = tmp_path / "gone"
    # A child whose working directory is removed before it runs proctor.
    script = (
        "import os, subprocess, sys\n"
        f"os.chdir({str(gone)!r}); os.rmdir({str(gone)!r})\n"
        "r = subprocess.run([sys.executable, '-m', 'proctor.cli.main', *sys.argv[1:]],"
        " capture_output=True, text=True)\n"
        "sys.stderr.write(r.stderr); sys.exit(r.returncode)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    for args in (["run", "--", "true"], ["runs", "list"]):
        gone.mkdir()
        result = subprocess.run(
            [sys.executable, "-c", script, *args],
            capture_output=True,
            text=True,
            env=env,
            cwd=tmp_path,
            timeout=120,
        )
        assert result.returncode == 64, result.stderr
        assert "current directory" in _one_line(result.stderr)


@pytest.mark.parametrize("kind", ["directory", "loop", "dangling"])
def test_proctor_toml_that_cannot_be_read_is_not_ignored(kind: str) -> None:
    config = Path("proctor.toml")
    if kind == "directory":
        config.mkdir()
    elif kind == "loop":
        config.symlink_to("proctor.toml")
    else:
        config.symlink_to("nowhere.toml")
    for args in (["run", "--", "true"], ["runs", "list"]):
        result = proctor(*args)
        assert result.returncode == 64, result.stderr
        assert "proctor.toml" in _one_line(result.stderr)


# ---- what is printed from a record ----------------------------------------------------------


def test_runs_show_never_prints_control_characters_from_a_record(isolated_runs: Path) -> None:
    assert proctor("run", "--", "true").returncode == 0
    run_dir = only_run(isolated_runs)
    path = run_dir / "record.json"
    data = json.loads(path.read_text())
    data["name"] = "ev\x1b[2J\x1b]0;pwned\x07il\r"
    data["argv_display"] = ["echo", "\x1b[31mred"]
    path.write_text(json.dumps(data))
    for args in (["runs", "show", run_dir.name], ["runs", "list"], ["runs", "wait", run_dir.name]):
        result = proctor(*args)
        assert result.returncode == 0, result.stderr
        for stream in (result.stdout, result.stderr):
            assert not any(ord(c) < 32 and c not in "\n\t" for c in stream), (args, stream)
    assert "ev␛[2J␛]0;pwned" in proctor("runs", "show", run_dir.name).stdout


# ---- proctor's own outputs in a repository ---------------------------------------------------


def test_store_path_inside_the_repository_is_not_untracked(tmp_path: Path) -> None:
    from tests.helpers import git_project

    config = '[run]\nruns_dir = "out/runs"\n\n[store]\npath = "state/index.sqlite"\n'
    repo = git_project(tmp_path / "repo", {"README.md": "x\n", "proctor.toml": config})
    env = {k: v for k, v in os.environ.items() if k != "PROCTOR_RUNS_DIR"}
    result = proctor("run", "--", "true", cwd=repo, env=env)
    assert result.returncode == 0, result.stderr
    assert (repo / "state" / "index.sqlite").exists()
    status = subprocess.run(
        ["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=all"],
        capture_output=True,
        text=True,
    )
    assert status.stdout == "", status.stdout
    # A store directory that also holds the user's files is left alone (no .gitignore there).
    (repo / "data").mkdir()
    (repo / "data" / "notes.txt").write_text("mine\n")
    (repo / "proctor.toml").write_text('[store]\npath = "data/index.sqlite"\n')
    assert proctor("run", "--", "true", cwd=repo, env=env).returncode == 0
    assert not (repo / "data" / ".gitignore").exists()


def test_a_sweeps_summary_line_names_no_log_it_does_not_have(isolated_runs: Path) -> None:
    from tests.fixtures.fake_openai_server import FakeServer

    with FakeServer() as srv:
        result = proctor(
            "sweep",
            "--base-url",
            srv.base_url,
            "--concurrency",
            "1",
            "--osl",
            "4",
            "--num-prompts",
            "2",
            "--json",
        )
    assert result.returncode == 0, result.stderr
    sweep_id = json.loads(result.stdout)["sweep"]
    for command in ("wait", "attach"):
        done = proctor("runs", command, sweep_id)
        assert done.returncode == 0, done.stderr
        line = [x for x in done.stderr.splitlines() if sweep_id in x][-1]
        assert "run.log" not in line and f"evidence in {isolated_runs / sweep_id}" in line, line


def test_schema_version_as_text_is_not_called_an_unknown_version(isolated_runs: Path) -> None:
    from tests.record.test_records import V1_FLOW

    run = isolated_runs / str(V1_FLOW["run_id"])
    run.mkdir(parents=True)
    (run / "record.json").write_text(json.dumps({**V1_FLOW, "schema_version": "2"}))
    result = proctor("flow", "--resume", run.name)
    assert result.returncode == 64, result.stderr
    line = _one_line(result.stderr)
    assert 'schema_version "2" is not a whole number' in line
    assert "unknown record schema version" not in line and "upgrade proctor" not in line

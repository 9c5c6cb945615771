"""Redaction masks what proctor copies from the user, never proctor's own data.

Secrets that are common words and numbers (`2026`, `failed`, `command`, `proctor`, `python`)
must leave the run id, its path, the outcome, the kind, the schema and the record's keys intact,
the run listed and reindexed; a run named `bearer` is no credential. And every secret form of
issue 20 (`-HAuthorization:X`, a JSON argument, `curl -u`, `mysql -pX` / `-p X`, `--db-pass X`,
`GITHUB_PAT=X`, a bare `user:X@host`) is absent from every file under the runs directory (the
store included), from every file name, and from everything printed, case-insensitively.
"""

from __future__ import annotations

import json
import sqlite3
import stat
from pathlib import Path

import pytest

from tests.helpers import proctor

COMMON_WORDS = ["2026", "failed", "command", "proctor", "python"]


def _record(run_dir: Path) -> dict[str, object]:
    return json.loads((run_dir / "record.json").read_text())


@pytest.mark.parametrize("secret", COMMON_WORDS)
def test_a_secret_that_is_a_common_word_leaves_proctors_own_data_alone(
    isolated_runs: Path, secret: str
) -> None:
    env = {"X_TOKEN": secret, "DB_PASSWORD": secret}
    reference = proctor("run", "--name", "reference", "--", "true")
    assert reference.returncode == 0, reference.stderr
    result = proctor("run", "--", "sh", "-c", f"echo {secret}; exit 1", env=env)
    assert result.returncode == 1, result.stderr
    runs = sorted(p for p in isolated_runs.iterdir() if p.is_dir() and not p.name.startswith("."))
    assert len(runs) == 2
    ref_dir = next(p for p in runs if _record(p)["name"] == "reference")
    run_dir = next(p for p in runs if p != ref_dir)
    record = _record(run_dir)

    assert record["run_id"] == run_dir.name
    assert record["outcome"] == "failed" and record["kind"] == "command"
    assert record["schema"] == "proctor.run"
    assert record["created_at"] == _record(run_dir)["created_at"]
    assert str(record["created_at"]).startswith("20")  # a timestamp, not ***
    # Same keys as a run without the secret: no key renamed (`python` in the host facts).
    assert set(record) == set(_record(ref_dir))
    assert set(record["host"]) == set(_record(ref_dir)["host"])  # type: ignore[arg-type]
    # The user's own words are still masked.
    assert record["argv"] == ["sh", "-c", "echo ***; exit 1"]

    # The terminal: the printed path exists, the outcome is named.
    assert f"run {run_dir.name}: failed, exit 1" in result.stderr
    assert str(run_dir) in result.stderr and "proctor: run" in result.stderr

    listed = proctor("runs", "list", "--json", env=env)
    assert listed.returncode == 0, listed.stderr
    rows = {row["id"]: row for row in json.loads(listed.stdout)}
    assert set(rows) == {ref_dir.name, run_dir.name}
    assert rows[run_dir.name]["outcome"] == "failed" and rows[run_dir.name]["kind"] == "command"
    table = proctor("runs", "list", env=env)
    line = next(ln for ln in table.stdout.splitlines() if ln.startswith(run_dir.name))
    assert " failed " in line

    shown = proctor("runs", "show", run_dir.name, "--json", env=env)
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["outcome"] == "failed"

    (isolated_runs / "proctor.sqlite").unlink()
    reindexed = proctor("runs", "reindex", env=env)
    assert reindexed.returncode == 0, reindexed.stderr
    assert "indexed 2 runs" in reindexed.stdout + reindexed.stderr
    with sqlite3.connect(isolated_runs / "proctor.sqlite") as db:
        stored = dict(db.execute("SELECT id, outcome FROM runs").fetchall())
    assert stored == {ref_dir.name: "ok", run_dir.name: "failed"}


def test_a_run_named_bearer_is_not_a_credential(isolated_runs: Path) -> None:
    assert proctor("run", "--name", "bearer", "--", "true").returncode == 0
    table = proctor("runs", "list")
    assert table.returncode == 0, table.stderr
    line = next(ln for ln in table.stdout.splitlines() if " bearer " in ln)
    assert " ok " in line and "***" not in line


def test_a_config_typo_of_a_key_name_keeps_its_message(isolated_runs: Path) -> None:
    Path("proctor.toml").write_text("[run]\nbogus_key = 1\n")
    result = proctor("run", "--", "true")
    assert result.returncode == 64
    assert "run.bogus_key: Extra inputs are not permitted" in result.stderr, result.stderr


CANARIES = {
    "curl joined -HAuthorization:Bearer": "CnryJoinedBearer1",
    "curl joined -HAuthorization:": "CnryJoinedHdr2",
    "JSON argument api_key": "CnryJsonKey3",
    "curl -u admin:X": "CnryCurlUser4",
    "mysql -pX": "CnryMysqlJoined5",
    "mysql -p X": "CnryMysqlSpaced6",
    "--db-pass X": "CnryDbPass7",
    "GITHUB_PAT=X": "CnryGithubPat8",
    "bare user:X@host": "CnryBareCreds9",
}
C = CANARIES


def test_no_secret_form_escapes_into_any_file_name_or_output(
    isolated_runs: Path, tmp_path: Path
) -> None:
    mysql = tmp_path / "work" / "mysql"  # a stand-in: proctor only sees its name and words
    mysql.write_text("#!/bin/sh\nexit 0\n")
    mysql.chmod(mysql.stat().st_mode | stat.S_IXUSR)
    printed: list[str] = []

    def run(*args: str) -> None:
        result = proctor(*args)
        printed.extend([result.stdout, result.stderr])
        assert result.returncode == 0, result.stderr

    words = [
        f"-HAuthorization:Bearer {C['curl joined -HAuthorization:Bearer']}",
        f"-HAuthorization:{C['curl joined -HAuthorization:']}",
        f'{{"api_key": "{C["JSON argument api_key"]}"}}',
        "-u",
        f"admin:{C['curl -u admin:X']}",
        "--db-pass",
        C["--db-pass X"],
        f"GITHUB_PAT={C['GITHUB_PAT=X']}",
        f"user:{C['bare user:X@host']}@db.example.com",
    ]
    run("run", "--", "true", *words)
    run("run", "--dry-run", "--json", "--", "true", *words)
    run("run", "--", str(mysql), f"-p{C['mysql -pX']}")
    run("run", "--", str(mysql), "-p", C["mysql -p X"], "db")
    run("runs", "list")
    run("runs", "list", "--json")
    for run_dir in (
        p for p in isolated_runs.iterdir() if p.is_dir() and not p.name.startswith(".")
    ):
        run("runs", "show", run_dir.name)
        run("runs", "show", run_dir.name, "--json")

    leaks: list[str] = []
    for label, canary in CANARIES.items():
        needle = canary.lower()
        leaks += [f"{label} printed" for text in printed if needle in text.lower()]
        for path in isolated_runs.rglob("*"):
            if needle in str(path).lower():
                leaks.append(f"{label} in file name {path}")
            elif path.is_file() and needle.encode() in path.read_bytes().lower():
                leaks.append(f"{label} in {path.relative_to(isolated_runs)}")
    assert not leaks, "\n".join(leaks)

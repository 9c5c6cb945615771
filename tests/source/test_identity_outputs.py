"""Point 5 of issue 11: proctor's own outputs never change the source identity."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from proctor.source import source_identity
from tests.helpers import proctor
from tests.source.conftest import MakeRepo, git, write


def _run_source(repo: Path, *args: str) -> dict[str, object]:
    env = {k: v for k, v in os.environ.items() if k != "PROCTOR_RUNS_DIR"}
    result = proctor("run", "--json", *args, "--", "true", cwd=repo, env=env)
    assert result.returncode == 0, result.stderr
    run_dir = Path(json.loads(result.stdout)["dir"])
    return dict(json.loads((run_dir / "record.json").read_text())["source"])


def test_runs_in_a_clean_repo_keep_it_clean_and_keep_one_id(
    make_repo: MakeRepo, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PROCTOR_RUNS_DIR", raising=False)
    repo = make_repo()
    head = git(repo, "rev-parse", "HEAD")
    # Default runs dir (./logs at the project root, with the store inside it), twice.
    first = _run_source(repo)
    second = _run_source(repo)
    for source in (first, second):
        assert source["dirty"] is False, source
        assert source["untracked"] == []
        assert source["source_id"] == head[:12]
    assert (repo / "logs" / "proctor.sqlite").exists()
    # git itself sees a clean tree too: the runs directory ignores itself.
    assert git(repo, "status", "--porcelain", "--untracked-files=all") == ""


def test_configured_runs_dir_and_store_inside_the_repo_are_left_out(
    make_repo: MakeRepo, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PROCTOR_RUNS_DIR", raising=False)
    config = '[run]\nruns_dir = "out/runs"\n\n[store]\npath = "state/index.sqlite"\n'
    repo = make_repo(files={"README.md": "x\n", "proctor.toml": config})
    ids = {str(_run_source(repo)["source_id"]) for _ in range(2)}
    assert (repo / "state" / "index.sqlite").exists()
    assert ids == {git(repo, "rev-parse", "HEAD")[:12]}
    # A real change is still seen, with or without proctor's outputs around.
    write(repo / "new.py", "print(2)\n")
    changed = _run_source(repo)
    assert changed["dirty"] is True and changed["untracked"] == ["new.py"]


def test_exclude_leaves_out_a_directory_that_holds_other_files(make_repo: MakeRepo) -> None:
    repo = make_repo()
    write(repo / "results/notes.txt", "user file\n")  # not proctor's: no .gitignore is written
    write(repo / "results/20240101-000000-abcdef/record.json", "{}\n")
    assert source_identity(repo).dirty
    ident = source_identity(repo, exclude=[repo / "results"])
    assert not ident.dirty and ident.untracked == []
    assert ident.source_id == git(repo, "rev-parse", "HEAD")[:12]

"""Issue 20: source changes `git status` does not show still change the source id.

A nested repository (git lists it whole and never looks inside) and files marked
`--assume-unchanged` / `--skip-worktree` (git trusts the flag): proctor hashes what would be
shipped and run, so an edit there is a new source id, and the archive carries the edit.
"""

from __future__ import annotations

import json
import os
import tarfile
from pathlib import Path

import pytest

from proctor.source import make_source_archive, source_identity
from tests.helpers import proctor
from tests.source.conftest import MakeRepo, git, write


def _nested(repo: Path) -> Path:
    inner = repo / "vendor/tool"
    inner.mkdir(parents=True)
    git(inner, "init", "-q")
    write(inner / "tool.py", "print('v1')\n")
    write(inner / ".gitignore", "*.pyc\n")
    git(inner, "add", "-A")
    git(inner, "commit", "-q", "-m", "v1")
    return inner


def test_edit_inside_a_nested_repository_changes_the_source_id(make_repo: MakeRepo) -> None:
    repo = make_repo()
    inner = _nested(repo)
    first = source_identity(repo)
    assert first.dirty and first.untracked == ["vendor/tool/"]
    write(inner / "tool.py", "print('v2')\n")  # an uncommitted edit inside it
    edited = source_identity(repo)
    assert edited.source_id != first.source_id
    git(inner, "commit", "-q", "-am", "v2")  # the same bytes, committed: what runs is the same
    assert source_identity(repo).source_id == edited.source_id
    write(inner / "new.py", "x = 1\n")
    git(inner, "add", "new.py")
    git(inner, "commit", "-q", "-m", "new file")
    assert source_identity(repo).source_id != edited.source_id


def test_nested_repository_ignored_files_and_git_dir_do_not_count(make_repo: MakeRepo) -> None:
    repo = make_repo()
    inner = _nested(repo)
    first = source_identity(repo).source_id
    write(inner / "cache.pyc", "bytecode")  # ignored by the nested repository itself
    git(inner, "tag", "v1")  # only .git changes
    assert source_identity(repo).source_id == first


def test_archive_ships_the_nested_repository_as_hashed(make_repo: MakeRepo, tmp_path: Path) -> None:
    repo = make_repo()
    inner = _nested(repo)
    write(inner / "cache.pyc", "bytecode")
    info = make_source_archive(source_identity(repo), tmp_path)
    with tarfile.open(info.path) as tar:
        names = {m.name for m in tar.getmembers()}
    assert {"vendor/tool/tool.py", "vendor/tool/.gitignore"} <= names
    assert "vendor/tool/cache.pyc" not in names
    assert not any("/.git/" in n or n.endswith("/.git") for n in names)


@pytest.mark.parametrize("flag", ["--assume-unchanged", "--skip-worktree"])
def test_edited_file_git_is_told_to_ignore_makes_the_tree_dirty(
    make_repo: MakeRepo, tmp_path: Path, flag: str
) -> None:
    repo = make_repo()
    head = git(repo, "rev-parse", "HEAD")
    git(repo, "update-index", flag, "src/app.py")
    assert source_identity(repo).source_id == head[:12]  # flagged but unchanged: still clean
    write(repo / "src/app.py", "print('edited')\n")
    assert git(repo, "status", "--porcelain") == ""  # git itself says clean
    ident = source_identity(repo)
    assert ident.dirty and ident.source_id != head[:12]
    assert ident.modified == ["src/app.py"] and ident.hidden_from_git == ["src/app.py"]
    assert "hidden from git status" in ident.summary()
    write(repo / "src/app.py", "print('edited again')\n")
    assert source_identity(repo).source_id != ident.source_id
    # The archive ships the working copy, not the commit.
    info = make_source_archive(source_identity(repo), tmp_path)
    with tarfile.open(info.path) as tar:
        member = tar.extractfile("src/app.py")
        assert member is not None and member.read() == b"print('edited again')\n"


def test_deleted_assume_unchanged_file_counts_as_deleted(make_repo: MakeRepo) -> None:
    repo = make_repo()
    git(repo, "update-index", "--assume-unchanged", "README.md")
    (repo / "README.md").unlink()
    ident = source_identity(repo)
    assert ident.dirty and ident.deleted == ["README.md"]


def test_sparse_checkout_absent_file_is_not_a_change(make_repo: MakeRepo) -> None:
    repo = make_repo()
    git(repo, "update-index", "--skip-worktree", "README.md")
    (repo / "README.md").unlink()  # what a sparse checkout does to a file outside its cone
    assert not source_identity(repo).dirty


def test_run_records_the_hidden_edit(make_repo: MakeRepo) -> None:
    repo = make_repo()
    git(repo, "update-index", "--assume-unchanged", "src/app.py")
    write(repo / "src/app.py", "print('edited')\n")
    env = {k: v for k, v in os.environ.items() if k != "PROCTOR_RUNS_DIR"}
    result = proctor("run", "--json", "--", "true", cwd=repo, env=env)
    assert result.returncode == 0, result.stderr
    run_dir = Path(json.loads(result.stdout)["dir"])
    source = json.loads((run_dir / "record.json").read_text())["source"]
    assert source["dirty"] is True and "-dirty-" in source["source_id"]
    assert source["hidden_from_git"] == ["src/app.py"]

from __future__ import annotations

from pathlib import Path

from proctor.source import NOT_A_GIT_CHECKOUT, source_identity, strip_credentials
from tests.source.conftest import MakeRepo, git, write


def test_clean_repo(make_repo: MakeRepo) -> None:
    root = make_repo()
    ident = source_identity(root / "src")
    head = git(root, "rev-parse", "HEAD")
    assert ident.is_git and not ident.dirty
    assert ident.repo_root == str(root)
    assert ident.commit == head
    assert ident.branch == "main" and not ident.detached
    assert ident.source_id == head[:12]
    assert ident.diff_sha256 is None
    assert ident.modified == ident.untracked == ident.staged == ident.deleted == []


def test_dirty_modified_staged_deleted_untracked(make_repo: MakeRepo) -> None:
    root = make_repo(files={"a.txt": "a\n", "b.txt": "b\n", "c.txt": "c\n"})
    write(root / "a.txt", "changed\n")
    write(root / "b.txt", "staged\n")
    git(root, "add", "b.txt")
    (root / "c.txt").unlink()
    write(root / "new dir/n.txt", "new\n")
    ident = source_identity(root)
    assert ident.dirty
    assert ident.modified == ["a.txt"]
    assert ident.staged == ["b.txt"]
    assert ident.deleted == ["c.txt"]
    assert ident.untracked == ["new dir/n.txt"]
    assert ident.diff_sha256 is not None and len(ident.diff_sha256) == 64
    assert ident.source_id == f"{ident.commit[:12]}-dirty-{ident.diff_sha256[:8]}"  # type: ignore[index]
    assert "dirty" in ident.summary()


def test_diff_hash_is_deterministic_and_sees_untracked_content(make_repo: MakeRepo) -> None:
    root = make_repo()
    write(root / "notes.txt", "one\n")
    first = source_identity(root).diff_sha256
    assert source_identity(root).diff_sha256 == first
    write(root / "notes.txt", "two\n")  # same file list, other bytes
    assert source_identity(root).diff_sha256 != first


def test_ignored_files_do_not_make_it_dirty(make_repo: MakeRepo) -> None:
    root = make_repo(files={".gitignore": "build/\n*.log\n", "x.py": "x\n"})
    write(root / "build/out.bin", "bin")
    write(root / "run.log", "log")
    ident = source_identity(root)
    assert not ident.dirty and ident.untracked == []


def test_detached_head(make_repo: MakeRepo) -> None:
    root = make_repo()
    git(root, "checkout", "-q", "--detach")
    ident = source_identity(root)
    assert ident.detached and ident.branch is None and not ident.dirty


def test_submodule_recorded_and_checked_out(repo_with_submodule: Path) -> None:
    root = repo_with_submodule
    ident = source_identity(root)
    assert not ident.dirty
    (sub,) = ident.submodules
    assert sub.path == "vendor/lib" and sub.initialised
    assert sub.recorded_commit == git(root / "vendor/lib", "rev-parse", "HEAD")
    assert sub.checked_out_commit == sub.recorded_commit and not sub.dirty


def test_dirty_submodule_makes_superproject_dirty(repo_with_submodule: Path) -> None:
    root = repo_with_submodule
    write(root / "vendor/lib/lib.c", "int f(void) { return 2; }\n")
    ident = source_identity(root)
    assert ident.dirty and ident.modified == []  # reported through the submodule
    (sub,) = ident.submodules
    assert sub.worktree_dirty and sub.dirty
    assert sub.identity is not None and sub.identity.modified == ["lib.c"]
    first = ident.diff_sha256
    write(root / "vendor/lib/lib.c", "int f(void) { return 3; }\n")
    assert source_identity(root).diff_sha256 != first


def test_submodule_at_other_commit(repo_with_submodule: Path) -> None:
    root = repo_with_submodule
    sub_root = root / "vendor/lib"
    write(sub_root / "more.c", "\n")
    git(sub_root, "add", "more.c")
    git(sub_root, "commit", "-q", "-m", "more")
    ident = source_identity(root)
    (sub,) = ident.submodules
    assert sub.checked_out_commit != sub.recorded_commit
    assert sub.dirty and ident.dirty


def test_credentials_stripped_from_remote(make_repo: MakeRepo) -> None:
    root = make_repo()
    git(root, "remote", "add", "origin", "https://alice:ghp_SECRET123@github.com/o/r.git")
    ident = source_identity(root)
    assert ident.remote_url == "https://github.com/o/r.git"
    assert "SECRET" not in ident.model_dump_json()


def test_remote_is_the_branchs_own(make_repo: MakeRepo) -> None:
    """The branch's configured remote wins over origin; a branch without one gets origin."""
    root = make_repo()
    git(root, "remote", "add", "origin", "https://host/origin.git")
    git(root, "remote", "add", "up", "https://host/up.git")
    branch = git(root, "branch", "--show-current").strip()
    git(root, "config", f"branch.{branch}.remote", "up")
    ident = source_identity(root)
    assert (ident.remote_name, ident.remote_url) == ("up", "https://host/up.git")
    git(root, "config", "--unset", f"branch.{branch}.remote")
    assert source_identity(root).remote_name == "origin"


def test_strip_credentials_forms() -> None:
    assert strip_credentials("https://x-access-token:tok@host:8443/a/b") == "https://host:8443/a/b"
    assert strip_credentials("https://host/a.git?access_token=tok") == "https://host/a.git"
    assert strip_credentials("ssh://git:pw@host/a.git") == "ssh://git@host/a.git"
    assert strip_credentials("ssh://git@host/a.git") == "ssh://git@host/a.git"
    assert strip_credentials("git@github.com:o/r.git") == "git@github.com:o/r.git"
    assert strip_credentials("/srv/git/r.git") == "/srv/git/r.git"


def test_not_a_git_checkout(tmp_path: Path) -> None:
    ident = source_identity(tmp_path)
    assert not ident.is_git and ident.reason == NOT_A_GIT_CHECKOUT
    assert ident.source_id is None and not ident.dirty


def test_repo_without_commit(tmp_path: Path) -> None:
    git(tmp_path, "init", "-q")
    write(tmp_path / "f.txt", "f\n")
    ident = source_identity(tmp_path)
    assert ident.is_git and ident.commit is None and ident.dirty
    assert ident.source_id is not None and ident.source_id.startswith("nocommit-dirty-")

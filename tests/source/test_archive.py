from __future__ import annotations

import gzip
import io
import json
import os
import subprocess
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest

from proctor.errors import TargetUnavailable, UsageError
from proctor.source import (
    IDENTITY_FILE,
    MANIFEST_FILE,
    CheckoutExists,
    SourceMismatch,
    checkout_path,
    ensure_matches,
    inspect_checkout,
    make_source_archive,
    source_identity,
    unpack_and_verify,
)
from tests.source.conftest import MakeRepo, git, write


def names(archive: str) -> list[str]:
    with tarfile.open(archive) as tar:
        return sorted(m.name for m in tar.getmembers())


def test_clean_round_trip_with_submodule(repo_with_submodule: Path, tmp_path: Path) -> None:
    root = repo_with_submodule
    write(root / "ignored.o", "obj")  # ignored: not shipped, tree stays clean
    ident = source_identity(root)
    assert not ident.dirty
    info = make_source_archive(ident, tmp_path)
    assert info.kind == "git-archive" and info.source_id == ident.source_id
    assert Path(info.path).name == f"{ident.source_id}.tar.gz"
    assert "vendor/lib/inc/lib.h" in names(info.path)
    assert "ignored.o" not in names(info.path)

    dest = tmp_path / "remote" / "proctor" / "src" / info.source_id
    report = unpack_and_verify(info.path, dest)
    assert report.matches and report.verify is not None and report.verify.ok
    assert (dest / "vendor/lib/lib.c").read_text() == "int f(void) { return 1; }\n"
    assert not (dest / ".git").exists()
    shipped = json.loads((dest / IDENTITY_FILE).read_text())
    assert shipped["identity"]["commit"] == ident.commit
    assert (
        shipped["identity"]["submodules"][0]["recorded_commit"]
        == ident.submodules[0].recorded_commit
    )


def test_clean_archive_ships_the_commit_not_the_worktree(
    make_repo: MakeRepo, tmp_path: Path
) -> None:
    root = make_repo(files={"a.txt": "committed\n"})
    ident = source_identity(root)
    info = make_source_archive(ident, tmp_path / "src.tar.gz")
    dest = tmp_path / "out"
    unpack_and_verify(info.path, dest)
    assert (dest / "a.txt").read_text() == "committed\n"


def test_dirty_round_trip_respects_deletions_untracked_and_submodule(
    repo_with_submodule: Path, tmp_path: Path
) -> None:
    root = repo_with_submodule
    write(root / "main.c", "int main(void) { return 1; }\n")
    write(root / "tools/gen.sh", "#!/bin/sh\n", mode=0o755)  # untracked, executable
    write(root / "junk.o", "ignored")
    (root / ".gitignore").unlink()
    write(root / ".gitignore", "*.o\n")  # same content: tracked file, unchanged
    os.symlink("main.c", root / "main-link.c")
    write(root / "vendor/lib/lib.c", "int f(void) { return 2; }\n")  # dirty submodule
    (root / "vendor/lib/inc/lib.h").unlink()  # deleted inside the submodule
    ident = source_identity(root)
    assert ident.dirty
    info = make_source_archive(ident, tmp_path)
    assert info.kind == "working-tree"
    listed = names(info.path)
    assert "junk.o" not in listed and "vendor/lib/inc/lib.h" not in listed
    assert {IDENTITY_FILE, MANIFEST_FILE, "tools/gen.sh", "main-link.c"} <= set(listed)

    dest = tmp_path / "checkout"
    report = unpack_and_verify(info.path, dest)
    assert report.matches
    assert (dest / "main.c").read_text() == "int main(void) { return 1; }\n"
    assert (dest / "vendor/lib/lib.c").read_text() == "int f(void) { return 2; }\n"
    assert os.access(dest / "tools/gen.sh", os.X_OK)
    assert os.readlink(dest / "main-link.c") == "main.c"
    # The far side needs no proctor: coreutils checks the shipped manifest.
    check = subprocess.run(["sha256sum", "-c", "--quiet", MANIFEST_FILE], cwd=dest)
    assert check.returncode == 0


def test_archives_are_deterministic(repo_with_submodule: Path, tmp_path: Path) -> None:
    root = repo_with_submodule
    clean = [make_source_archive(source_identity(root), tmp_path / f"c{i}.tar.gz") for i in (1, 2)]
    assert clean[0].sha256 == clean[1].sha256
    write(root / "new.txt", "n\n")
    os.utime(root / "main.c", (1, 1))  # mtimes must not leak into the archive
    first = make_source_archive(source_identity(root), tmp_path / "d1.tar.gz")
    os.utime(root / "main.c", (2, 2))
    second = make_source_archive(source_identity(root), tmp_path / "d2.tar.gz")
    assert first.sha256 == second.sha256 and first.sha256 != clean[0].sha256


def test_same_source_elsewhere_gives_same_archive(make_repo: MakeRepo, tmp_path: Path) -> None:
    root = make_repo("one")
    clone = tmp_path / "two"
    git(tmp_path, "clone", "-q", str(root), str(clone))
    # Same remote on both; only the local path differs, and it must not leak in.
    git(root, "remote", "add", "origin", str(root))
    git(root, "config", "branch.main.remote", "origin")
    git(clone, "remote", "set-url", "origin", str(root))
    a = make_source_archive(source_identity(root), tmp_path / "a.tar.gz")
    b = make_source_archive(source_identity(clone), tmp_path / "b.tar.gz")
    assert a.sha256 == b.sha256


def test_refuses_to_unpack_over_existing_checkout(make_repo: MakeRepo, tmp_path: Path) -> None:
    root = make_repo()
    info = make_source_archive(source_identity(root), tmp_path)
    dest = tmp_path / "existing"
    write(dest / "precious.txt", "keep me\n")
    with pytest.raises(CheckoutExists) as err:
        unpack_and_verify(info.path, dest)
    assert isinstance(err.value, UsageError)
    assert sorted(os.listdir(dest)) == ["precious.txt"]
    assert (dest / "precious.txt").read_text() == "keep me\n"
    empty = tmp_path / "empty"
    empty.mkdir()
    assert unpack_and_verify(info.path, empty).matches  # an empty directory is fine


def test_tampered_archive_refused_and_nothing_left(make_repo: MakeRepo, tmp_path: Path) -> None:
    root = make_repo(files={"a.txt": "a" * 100})
    info = make_source_archive(source_identity(root), tmp_path)
    # Rewrite the archive with one byte of a.txt changed but the same manifest.
    with tarfile.open(info.path) as tar:
        members = [(m, tar.extractfile(m).read() if m.isfile() else b"") for m in tar]  # type: ignore[union-attr]
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as out:
        for m, data in members:
            if m.name == "a.txt":
                data = b"b" + data[1:]
            out.addfile(m, io.BytesIO(data))
    bad = tmp_path / "bad.tar.gz"
    bad.write_bytes(gzip.compress(buf.getvalue()))
    dest = tmp_path / "dest"
    with pytest.raises(SourceMismatch) as err:
        unpack_and_verify(bad, dest)
    assert isinstance(err.value, TargetUnavailable) and "a.txt" in err.value.message
    assert not dest.exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".dest")] == []


def test_inspect_unpacked_checkout_detects_later_edits(make_repo: MakeRepo, tmp_path: Path) -> None:
    root = make_repo()
    ident = source_identity(root)
    info = make_source_archive(ident, tmp_path)
    dest = tmp_path / "co"
    unpack_and_verify(info.path, dest)
    assert ensure_matches(inspect_checkout(dest, ident)).state == "proctor-archive"
    write(dest / "README.md", "edited on the remote\n")
    write(dest / "scratch.txt", "x")
    report = inspect_checkout(dest, ident)
    assert report.dirty and report.modified == ["README.md"] and report.untracked == ["scratch.txt"]
    with pytest.raises(SourceMismatch):
        ensure_matches(report)


def test_inspect_user_pointed_git_checkout(make_repo: MakeRepo, tmp_path: Path) -> None:
    root = make_repo()
    want = source_identity(root)
    remote = tmp_path / "remote-checkout"
    git(tmp_path, "clone", "-q", str(root), str(remote))
    assert inspect_checkout(remote, want).matches
    write(remote / "leftover.log", "from an earlier run\n")
    report = inspect_checkout(remote, want)
    assert report.state == "git" and report.untracked == ["leftover.log"]
    assert report.mismatches and "local changes" in report.mismatches[0]
    assert (remote / "leftover.log").exists()  # inspected, never cleaned
    write(root / "README.md", "newer\n")
    git(root, "commit", "-qam", "newer")
    (remote / "leftover.log").unlink()
    newer = source_identity(root)
    assert any("commit" in m for m in inspect_checkout(remote, newer).mismatches)


def test_source_changed_since_identity_is_refused(make_repo: MakeRepo, tmp_path: Path) -> None:
    root = make_repo()
    ident = source_identity(root)
    write(root / "late.txt", "late\n")
    with pytest.raises(UsageError, match="changed since"):
        make_source_archive(ident, tmp_path)


def test_not_a_checkout_cannot_be_archived(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="not a git checkout"):
        make_source_archive(source_identity(tmp_path), tmp_path)


def test_uninitialised_submodule_is_refused(repo_with_submodule: Path, tmp_path: Path) -> None:
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(repo_with_submodule), str(clone))  # no --recursive
    ident = source_identity(clone)
    assert ident.submodules and not ident.submodules[0].initialised and ident.dirty
    with pytest.raises(UsageError, match="not checked out") as err:
        make_source_archive(ident, tmp_path)
    assert "git submodule update --init" in str(err.value.hint)


def test_checkout_path_layout() -> None:
    assert str(checkout_path("/workspace", "0123456789ab")) == "/workspace/proctor/src/0123456789ab"


def test_unwritable_destination_is_a_usage_error(make_repo: MakeRepo, tmp_path: Path) -> None:
    root = make_repo()
    with pytest.raises(UsageError, match="cannot write source archive"):
        make_source_archive(source_identity(root), tmp_path / "no" / "such" / "dir" / "a.tar.gz")


def test_corrupt_archive_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "bad.tar.gz"
    bad.write_bytes(b"not a tarball")
    with pytest.raises(SourceMismatch, match="cannot unpack"):
        unpack_and_verify(bad, tmp_path / "dest")
    assert not (tmp_path / "dest").exists()


def _racing(monkeypatch: pytest.MonkeyPatch, winner: Callable[[], object]) -> None:
    """While this unpack extracts, `winner()` fills its destination first: two runs of one
    group syncing one source to one host (CI-4: `Directory not empty`, exit 6)."""
    from proctor.source import archive as module

    extract = module._extract

    def extract_then_lose(archive: Path, into: Path) -> None:
        extract(archive, into)
        monkeypatch.setattr(module, "_extract", extract)
        winner()

    monkeypatch.setattr(module, "_extract", extract_then_lose)


def test_an_unpack_that_loses_the_race_to_the_same_source_uses_that_checkout(
    make_repo: MakeRepo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = make_repo(files={"a.txt": "a\n"})
    info = make_source_archive(source_identity(root), tmp_path / "a.tar.gz")
    dest = tmp_path / "ws" / "src"
    _racing(monkeypatch, lambda: unpack_and_verify(info.path, dest))
    report = unpack_and_verify(info.path, dest)
    assert report.matches and report.path == str(dest)
    assert (dest / "a.txt").read_text() == "a\n"
    assert [p.name for p in dest.parent.iterdir()] == ["src"]  # no partial directory left


def test_an_unpack_that_loses_the_race_to_other_files_refuses_and_keeps_them(
    make_repo: MakeRepo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = make_repo(files={"a.txt": "a\n"})
    info = make_source_archive(source_identity(root), tmp_path / "a.tar.gz")
    dest = tmp_path / "ws" / "src"
    _racing(monkeypatch, lambda: write(dest / "precious.txt", "keep me\n"))
    with pytest.raises(CheckoutExists):
        unpack_and_verify(info.path, dest)
    assert sorted(os.listdir(dest)) == ["precious.txt"]
    assert [p.name for p in dest.parent.iterdir()] == ["src"]

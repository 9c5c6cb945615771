from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from proctor.errors import ConfigError
from proctor.source import (
    MANIFEST_SHA256,
    Manifest,
    build_manifest,
    load_manifest,
    verify_manifest,
    write_manifest,
)
from tests.source.conftest import write


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "tree"
    write(root / "a.txt", "alpha\n")
    write(root / "sub/b.bin", bytes(range(256)) * 40)
    write(root / "sub/run.sh", "#!/bin/sh\necho hi\n", mode=0o755)
    write(root / "with space.txt", "s\n")
    os.symlink("a.txt", root / "link")
    return root


def test_build_lists_every_file_with_hash_size_mode(tree: Path) -> None:
    man = build_manifest(tree)
    by = man.by_path()
    assert sorted(by) == ["a.txt", "link", "sub/b.bin", "sub/run.sh", "with space.txt"]
    assert by["sub/b.bin"].size == 256 * 40
    assert by["sub/run.sh"].mode == "0755"
    assert by["link"].kind == "symlink"


def test_verifies_and_detects_one_changed_byte(tree: Path) -> None:
    man = build_manifest(tree)
    assert verify_manifest(tree, man).ok
    data = bytearray((tree / "sub/b.bin").read_bytes())
    data[1000] ^= 0x01
    (tree / "sub/b.bin").write_bytes(bytes(data))
    report = verify_manifest(tree, man)
    assert not report.ok
    assert report.changed == ["sub/b.bin"] and report.missing == [] and report.extra == []


def test_detects_missing_and_extra(tree: Path) -> None:
    man = build_manifest(tree)
    (tree / "a.txt").unlink()
    write(tree / "sub/new.txt", "n\n")
    report = verify_manifest(tree, man)
    assert report.missing == ["a.txt"] and report.extra == ["sub/new.txt"]
    assert "missing" in report.summary()
    assert verify_manifest(tree, man, check_extra=False).extra == []


def test_mode_change_is_a_change(tree: Path) -> None:
    man = build_manifest(tree)
    (tree / "sub/run.sh").chmod(0o644)
    assert verify_manifest(tree, man).changed == ["sub/run.sh"]


def test_sha256sum_text_is_checked_by_coreutils(tree: Path) -> None:
    if shutil.which("sha256sum") is None:
        pytest.skip("sha256sum not installed")
    man = build_manifest(tree)  # the text form leaves the symlink out
    write_manifest(man, tree)
    ok = subprocess.run(["sha256sum", "-c", "--quiet", MANIFEST_SHA256], cwd=tree)
    assert ok.returncode == 0
    (tree / "a.txt").write_text("alphA\n")
    bad = subprocess.run(
        ["sha256sum", "-c", "--quiet", MANIFEST_SHA256], cwd=tree, capture_output=True
    )
    assert bad.returncode == 1


def test_round_trip_text_and_json(tree: Path) -> None:
    write(tree / "odd\\name.txt", "x")
    man = build_manifest(tree)
    path = write_manifest(man, tree)
    again = load_manifest(path)
    files = [(e.path, e.sha256) for e in man.entries if e.kind == "file"]
    assert [(e.path, e.sha256) for e in again.entries] == files
    assert load_manifest(tree / "manifest.json") == man
    # The manifest files themselves are not "extra"; the text form lacks the symlink.
    assert verify_manifest(tree, tree / "manifest.json").ok
    assert verify_manifest(tree, path).extra == ["link"]


def test_explicit_file_list_and_exclude(tree: Path) -> None:
    man = build_manifest(tree, files=["a.txt", "sub/run.sh"])
    assert [e.path for e in man.entries] == ["a.txt", "sub/run.sh"]
    man2 = build_manifest(tree, exclude=["*.bin", "link"])
    assert "sub/b.bin" not in man2.by_path()


def test_bad_manifest_text_is_a_config_error(tmp_path: Path) -> None:
    write(tmp_path / "m.sha256", "not a manifest\n")
    with pytest.raises(ConfigError):
        load_manifest(tmp_path / "m.sha256")
    with pytest.raises(ConfigError):
        Manifest.from_json('{"entries": 3}')
    with pytest.raises(ConfigError):
        build_manifest(tmp_path, files=["absent.txt"])

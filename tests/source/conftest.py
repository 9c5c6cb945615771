"""Real temporary git repositories for the source tests."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

GIT_ENV = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.invalid",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.invalid",
    "GIT_AUTHOR_DATE": "2024-01-01T00:00:00Z",
    "GIT_COMMITTER_DATE": "2024-01-01T00:00:00Z",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
}


def git(cwd: Path, *args: str) -> str:
    env = {**os.environ, **GIT_ENV}
    out = subprocess.run(
        ["git", "-c", "protocol.file.allow=always", "-c", "init.defaultBranch=main", *args],
        cwd=cwd,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    return out.stdout.strip()


def write(path: Path, text: str | bytes, mode: int | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    if mode is not None:
        path.chmod(mode)
    return path


@pytest.fixture(autouse=True)
def _isolated_git(monkeypatch: pytest.MonkeyPatch) -> None:
    # proctor's own git calls must not read the developer's ~/.gitconfig either.
    for k, v in GIT_ENV.items():
        monkeypatch.setenv(k, v)


MakeRepo = Callable[..., Path]


@pytest.fixture
def make_repo(tmp_path: Path) -> MakeRepo:
    """make_repo(name, files={path: text}) -> a repo with one commit of those files."""

    def make(name: str = "repo", files: dict[str, str] | None = None) -> Path:
        root = tmp_path / name
        root.mkdir()
        git(root, "init", "-q")
        for rel, text in (files or {"README.md": "hello\n", "src/app.py": "print(1)\n"}).items():
            write(root / rel, text)
        git(root, "add", "-A")
        git(root, "commit", "-q", "-m", "init")
        return root

    return make


@pytest.fixture
def repo_with_submodule(make_repo: MakeRepo) -> Path:
    lib = make_repo("lib", {"lib.c": "int f(void) { return 1; }\n", "inc/lib.h": "int f(void);\n"})
    root = make_repo("super", {"main.c": "int main(void) { return 0; }\n", ".gitignore": "*.o\n"})
    git(root, "submodule", "add", "-q", str(lib), "vendor/lib")
    git(root, "commit", "-q", "-m", "add submodule")
    return root

"""Running `git` as a subprocess, with the output pinned against user configuration.

Only this module starts git; every call goes through `run_git`, which maps a missing
binary or a failed command into proctor's error tree.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from proctor.errors import TargetUnavailable, UsageError

# Settings that would otherwise change the bytes git prints (and so the diff hash).
_PINNED_CONFIG = (
    "-c",
    "core.quotePath=false",
    "-c",
    "diff.noprefix=false",
    "-c",
    "diff.mnemonicPrefix=false",
    "-c",
    "diff.relative=false",
    "-c",
    "color.ui=false",
)


def _env() -> dict[str, str]:
    env = dict(os.environ)
    # Never prompt for a credential, never page, never localise messages we parse.
    env.update({"GIT_TERMINAL_PROMPT": "0", "GIT_PAGER": "cat", "LC_ALL": "C"})
    for name in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE"):
        env.pop(name, None)
    return env


class GitFailed(UsageError):
    """A git command exited non-zero; carries its stderr's first line."""

    def __init__(self, message: str, *, returncode: int, stderr: str) -> None:
        super().__init__(message, hint="check the repository with `git status`")
        self.returncode = returncode
        self.stderr = stderr


def run_git(
    cwd: Path, *args: str, check: bool = True, stdin: bytes | None = None
) -> subprocess.CompletedProcess[bytes]:
    """Run `git -C cwd args...`, returning raw bytes; raise GitFailed on failure if `check`."""
    cmd = ["git", "-C", str(cwd), *_PINNED_CONFIG, *args]
    try:
        proc = subprocess.run(cmd, capture_output=True, env=_env(), check=False, input=stdin)
    except FileNotFoundError as exc:
        raise TargetUnavailable(
            "git is not installed", hint="install git (apt-get install git)"
        ) from exc
    if check and proc.returncode != 0:
        err = proc.stderr.decode(errors="replace").strip().splitlines()
        first = err[0] if err else f"exit status {proc.returncode}"
        raise GitFailed(
            f"git {args[0]} failed in {cwd}: {first}",
            returncode=proc.returncode,
            stderr=proc.stderr.decode(errors="replace"),
        )
    return proc


def git_text(cwd: Path, *args: str) -> str:
    """stdout of a git command as stripped text."""
    return run_git(cwd, *args).stdout.decode(errors="surrogateescape").strip()


def split_nul(data: bytes) -> list[str]:
    """Split `-z` output into paths (surrogateescape keeps non-UTF-8 names round-trippable)."""
    return [p.decode(errors="surrogateescape") for p in data.split(b"\0") if p]

"""Source changes that `git status` does not show, found so the source id still changes.

Two ways a tree can differ from what git reports:

- a nested repository (an untracked directory holding its own `.git`): git lists it as one
  entry and never looks inside, so edits and commits there would leave the identity unchanged;
- a tracked file marked `git update-index --assume-unchanged` or `--skip-worktree`: git trusts
  the flag and reports the file clean whatever its working copy holds.

Both are resolved here into what would be shipped and run: the nested repository's files, and
the flagged files whose working copy differs from the index.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from proctor.source.git import run_git, split_nul

_SYMLINK_MODE = "120000"
_GITLINK_MODE = "160000"


def nested_files(root: Path, rel: str) -> list[str]:
    """Files (relative to `root`, `/`-separated) of the untracked directory `rel` that git
    reports whole: its own tracked and untracked-not-ignored files, recursively through
    repositories nested in it; never a `.git`. The same list is hashed and shipped."""
    top = rel.rstrip("/")
    base = root / top
    if (base / ".git").exists():
        listed = run_git(
            base, "ls-files", "-z", "--cached", "--others", "--exclude-standard", check=False
        )
        names = split_nul(listed.stdout) if listed.returncode == 0 else _walk(base)
    else:  # no repository of its own (or a broken one): everything but .git
        names = _walk(base)
    out: set[str] = set()
    for name in names:
        full = base / name
        if not os.path.lexists(full):
            continue  # deleted in the nested working tree: not shipped
        if name.endswith("/") or (full.is_dir() and not full.is_symlink()):
            out.update(nested_files(root, f"{top}/{name.rstrip('/')}"))
        else:
            out.add(f"{top}/{name}")
    return sorted(out)


def _walk(base: Path) -> list[str]:
    found: list[str] = []
    for dirpath, dirnames, filenames in os.walk(base):
        # A symlink to a directory is a member (its link), not a tree to enter.
        links = [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]
        dirnames[:] = sorted(d for d in dirnames if d != ".git" and d not in links)
        for name in [*filenames, *links]:
            if name != ".git":
                found.append(os.path.relpath(os.path.join(dirpath, name), base))
    return [f.replace(os.sep, "/") for f in found]


_EXCLUDE_LITERAL = ":(top,exclude,literal)"


def index_listing(root: Path) -> bytes:
    """`git ls-files -v -s -z` of the whole index: flagged_changes and the submodules of
    source/identity.py read the same listing (one git call for both)."""
    return run_git(root, "ls-files", "-v", "-s", "-z").stdout


def _excluded(path: str, pathspec: list[str]) -> bool:
    """Whether one of the `:(top,exclude,literal)REL` specs of `pathspec` leaves `path` out."""
    for spec in pathspec:
        if spec.startswith(_EXCLUDE_LITERAL):
            rel = spec[len(_EXCLUDE_LITERAL) :]
            if path == rel or path.startswith(rel + "/"):
                return True
    return False


def flagged_changes(
    root: Path, pathspec: list[str], listing: bytes | None = None
) -> tuple[list[str], list[str]]:
    """(changed, deleted): tracked files marked assume-unchanged or skip-worktree whose
    working copy is not what the index holds. A skip-worktree file that is absent is a sparse
    checkout doing its job, not a change. `listing`: index_listing(root), read here if not
    given; its paths are limited to `pathspec` (".", then excluded literal paths)."""
    if listing is None:
        listing = run_git(root, "ls-files", "-v", "-s", "-z", *pathspec).stdout
    flagged: list[tuple[str, str, str, bool]] = []  # (path, mode, object id, skip-worktree)
    for entry in split_nul(listing):
        meta, _, path = entry.partition("\t")
        tag, mode, oid, _stage = meta.split(" ")
        if (tag.islower() or tag == "S") and mode != _GITLINK_MODE:
            if _excluded(path, pathspec):
                continue
            flagged.append((path, mode, oid, tag == "S"))
    if not flagged:
        return [], []
    check_mode = _file_mode_matters(root)
    changed: list[str] = []
    deleted: list[str] = []
    regular: list[tuple[str, str]] = []
    for path, mode, oid, skip in flagged:
        full = root / path
        if not os.path.lexists(full):
            if not skip:
                deleted.append(path)
            continue
        st = full.lstat()
        if mode == _SYMLINK_MODE:
            target = run_git(root, "cat-file", "blob", oid).stdout
            if not stat.S_ISLNK(st.st_mode) or os.fsencode(os.readlink(full)) != target:
                changed.append(path)
        elif not stat.S_ISREG(st.st_mode):
            changed.append(path)  # now a directory, a link or something else
        elif check_mode and (mode == "100755") != bool(st.st_mode & 0o100):
            changed.append(path)
        else:
            regular.append((path, oid))
    ids = _blob_ids(root, [path for path, _ in regular])
    changed.extend(path for (path, oid), now in zip(regular, ids, strict=True) if now != oid)
    return sorted(changed), sorted(deleted)


def _blob_ids(root: Path, paths: list[str]) -> list[str]:
    """The object ids git would give the working copies of `paths` (clean filters applied),
    in one git call; a name holding a newline (which --stdin-paths cannot take) alone."""
    plain = [p for p in paths if "\n" not in p]
    ids: dict[str, str] = {}
    if plain:
        data = "".join(f"{p}\n" for p in plain).encode(errors="surrogateescape")
        listed = run_git(root, "hash-object", "--stdin-paths", stdin=data).stdout.split()
        ids.update(zip(plain, (o.decode() for o in listed), strict=True))
    for p in paths:
        if p not in ids:
            one = run_git(root, "hash-object", f"--path={p}", "--", p).stdout
            ids[p] = one.decode().strip()
    return [ids[p] for p in paths]


def _file_mode_matters(root: Path) -> bool:
    out = run_git(root, "config", "--type=bool", "core.fileMode", check=False)
    return out.stdout.decode(errors="replace").strip() != "false"

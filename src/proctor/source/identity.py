"""The exact identity of a source tree: git commit, dirty state, submodules, diff hash.

`source_identity(path)` answers "which source did this run use?" precisely enough that the
same bytes can be shipped elsewhere and checked there. Outside git it says so rather than
failing: a record of "not a git checkout" is still evidence.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
from collections.abc import Callable, Iterable
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from pydantic import BaseModel, ConfigDict, Field

from proctor.source.git import GitFailed, run_git, split_nul
from proctor.source.unseen import flagged_changes, index_listing, nested_files

SCHEMA_VERSION = 1
NOT_A_GIT_CHECKOUT = "not a git checkout"
# git's well-known empty tree, used to diff a repository that has no commit yet.
_EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"


class Submodule(BaseModel):
    """One submodule: what the superproject records and what is checked out."""

    # Validators built on first use: `proctor run` imports these models, most unused.
    model_config = ConfigDict(defer_build=True)

    path: str
    url: str | None = None
    recorded_commit: str | None = None
    checked_out_commit: str | None = None
    initialised: bool = False
    # Its own working tree (recursively) differs from its checked-out commit.
    worktree_dirty: bool = False
    identity: SourceIdentity | None = None

    @property
    def dirty(self) -> bool:
        """Not initialised, at another commit than recorded, or with local changes."""
        return (
            not self.initialised
            or self.checked_out_commit != self.recorded_commit
            or self.worktree_dirty
        )


class SourceIdentity(BaseModel):
    """Where a run's source came from. Paths in file lists are relative to `repo_root`."""

    # Validators built on first use: `proctor run` imports these models, most unused.
    model_config = ConfigDict(defer_build=True)

    schema_version: int = SCHEMA_VERSION
    is_git: bool
    reason: str | None = None
    path: str
    repo_root: str | None = None
    remote_name: str | None = None
    remote_url: str | None = None
    branch: str | None = None
    detached: bool = False
    commit: str | None = None
    dirty: bool = False
    modified: list[str] = Field(default_factory=list)
    staged: list[str] = Field(default_factory=list)
    deleted: list[str] = Field(default_factory=list)
    untracked: list[str] = Field(default_factory=list)
    # Tracked files git is told not to look at (update-index --assume-unchanged or
    # --skip-worktree) whose working copy differs: `git status` calls them clean, proctor
    # counts them as modified or deleted (they are also in those lists).
    hidden_from_git: list[str] = Field(default_factory=list)
    submodules: list[Submodule] = Field(default_factory=list)
    # sha256 of `git diff HEAD --binary` plus untracked contents plus submodule states;
    # None for a clean tree (the commit alone identifies it).
    diff_sha256: str | None = None
    source_id: str | None = None

    def summary(self) -> str:
        """One line for people: `main@0123456789ab (dirty: 2 modified, 1 untracked)`."""
        if not self.is_git:
            return f"{self.path}: {self.reason}"
        where = self.branch if self.branch else "(detached)"
        head = f"{where}@{self.commit[:12] if self.commit else '(no commit)'}"
        if not self.dirty:
            return f"{head} (clean)"
        parts = [
            f"{len(v)} {k}"
            for k, v in (
                ("modified", self.modified),
                ("staged", self.staged),
                ("deleted", self.deleted),
                ("untracked", self.untracked),
            )
            if v
        ]
        subs = [s.path for s in self.submodules if s.dirty]
        if subs:
            parts.append(f"submodules {', '.join(subs)}")
        if self.hidden_from_git:
            parts.append(
                f"{len(self.hidden_from_git)} hidden from git status by assume-unchanged"
                " or skip-worktree"
            )
        return f"{head} (dirty: {', '.join(parts) or 'changed'})"


Submodule.model_rebuild()


_SCHEME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def strip_credentials(url: str) -> str:
    """A remote URL safe to record.

    https/http lose the whole `user[:token]@` part and any query or fragment (tokens live
    there too); other schemes (ssh://, git://) keep the user name but lose a password.
    The scp-like `git@host:org/repo.git` form carries no secret and is kept as is.
    """
    if not _SCHEME_RE.match(url):
        return url
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:  # IPv6 literal
        host = f"[{host}]"
    netloc = host + (f":{parts.port}" if parts.port else "")
    if parts.scheme.lower() in ("http", "https"):
        return urlunsplit((parts.scheme, netloc, parts.path, "", ""))
    if parts.username:
        netloc = f"{parts.username}@{netloc}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def source_identity(
    path: str | os.PathLike[str], exclude: Iterable[str | os.PathLike[str]] = ()
) -> SourceIdentity:
    """Identify the source tree containing `path` (a file or directory).

    `exclude`: paths that are outputs, not source (proctor's runs directory and store): they
    never count as untracked or changed, so the same tree always gives the same source id.
    """
    here = Path(path).resolve()
    start = here if here.is_dir() else here.parent
    if not start.exists():
        return SourceIdentity(is_git=False, reason="path does not exist", path=str(here))
    top = run_git(start, "rev-parse", "--show-toplevel", check=False)
    if top.returncode != 0:
        return SourceIdentity(is_git=False, reason=NOT_A_GIT_CHECKOUT, path=str(here))
    root = Path(top.stdout.decode(errors="surrogateescape").strip())
    ident = _identify_root(root, _exclude_specs(root, exclude))
    ident.path = str(here)
    return ident


def _exclude_specs(root: Path, exclude: Iterable[str | os.PathLike[str]]) -> list[str]:
    """git pathspecs leaving out each excluded path that lies inside the repository."""
    real_root = root.resolve()
    specs: list[str] = []
    for item in exclude:
        target = Path(item).resolve()
        try:
            rel = target.relative_to(real_root)
        except ValueError:
            continue  # outside this repository: nothing to leave out
        if rel.parts:
            specs.append(f":(top,exclude,literal){rel.as_posix()}")
    return specs


def _identify_root(root: Path, excluded: list[str] | None = None) -> SourceIdentity:
    pathspec = ["--", ".", *excluded] if excluded else []
    status = run_git(
        root,
        "status",
        "--porcelain=v2",
        "-z",
        "--branch",
        "--untracked-files=all",
        "--ignore-submodules=none",
        *pathspec,
    ).stdout
    commit, branch, staged, modified, deleted, untracked = _parse_status(status)
    index = index_listing(root)
    hidden_changed, hidden_deleted = flagged_changes(root, pathspec, index)
    modified = sorted({*modified, *hidden_changed})
    deleted = sorted({*deleted, *hidden_deleted})
    submodules = _submodules(root, index, has_commit=commit is not None)
    sub_paths = {s.path for s in submodules}
    # A submodule's changes are reported by its own identity, not as a modified file.
    modified = [p for p in modified if p not in sub_paths]
    dirty = bool(staged or modified or deleted or untracked) or any(s.dirty for s in submodules)
    if commit is None:
        dirty = True
    remote_name, remote_url = _remote(root, branch)
    ident = SourceIdentity(
        is_git=True,
        path=str(root),
        repo_root=str(root),
        remote_name=remote_name,
        remote_url=remote_url,
        branch=branch,
        detached=branch is None,
        commit=commit,
        dirty=dirty,
        modified=sorted(modified),
        staged=sorted(staged),
        deleted=sorted(deleted),
        untracked=sorted(untracked),
        hidden_from_git=sorted({*hidden_changed, *hidden_deleted}),
        submodules=submodules,
    )
    if dirty:
        ident.diff_sha256 = _diff_sha256(root, ident)
    base = commit[:12] if commit else "nocommit"
    ident.source_id = f"{base}-dirty-{ident.diff_sha256[:8]}" if ident.diff_sha256 else base
    return ident


def _parse_status(
    data: bytes,
) -> tuple[str | None, str | None, list[str], list[str], list[str], list[str]]:
    commit: str | None = None
    branch: str | None = None
    staged: list[str] = []
    modified: list[str] = []
    deleted: list[str] = []
    untracked: list[str] = []
    entries = data.split(b"\0")
    i = 0
    while i < len(entries):
        raw = entries[i]
        i += 1
        if not raw:
            continue
        line = raw.decode(errors="surrogateescape")
        kind = line[0]
        if kind == "#":
            key, _, value = line[2:].partition(" ")
            if key == "branch.oid" and value != "(initial)":
                commit = value
            elif key == "branch.head" and value != "(detached)":
                branch = value
        elif kind == "?":
            untracked.append(line[2:])
        elif kind in "12u":
            nfields = {"1": 8, "2": 9, "u": 10}[kind]
            fields = line.split(" ", nfields)
            xy, file_path = fields[1], fields[-1]
            if kind == "2":
                orig = entries[i].decode(errors="surrogateescape")
                i += 1
                deleted.append(orig)  # a rename removes the old path
            x, y = xy[0], xy[1]
            if kind == "u":
                modified.append(file_path)
                continue
            if x != ".":
                staged.append(file_path)
            if "D" in (x, y):
                deleted.append(file_path)
            elif y != ".":
                modified.append(file_path)
    return commit, branch, staged, modified, deleted, untracked


def _submodules(root: Path, index: bytes, *, has_commit: bool) -> list[Submodule]:
    """The submodules of the index (`index`: unseen.index_listing)."""
    gitlinks: dict[str, str] = {}
    for entry in split_nul(index):
        meta, _, file_path = entry.partition("\t")
        _tag, mode, obj, _stage = meta.split(" ")
        if mode == "160000":
            gitlinks[file_path] = obj
    if not gitlinks:
        return []
    recorded: dict[str, str] = {}
    if has_commit:
        tree = run_git(root, "ls-tree", "-z", "HEAD", "--", *sorted(gitlinks)).stdout
        for entry in split_nul(tree):
            meta, _, file_path = entry.partition("\t")
            mode, _type, obj = meta.split(" ")
            if mode == "160000":
                recorded[file_path] = obj
    urls = _gitmodules_urls(root)
    subs: list[Submodule] = []
    for sub_path in sorted(gitlinks):
        sub = Submodule(
            path=sub_path,
            url=strip_credentials(urls[sub_path]) if sub_path in urls else None,
            recorded_commit=recorded.get(sub_path, gitlinks[sub_path]),
        )
        sub_root = root / sub_path
        if (sub_root / ".git").exists():
            try:
                inner = _identify_root(sub_root)
            except GitFailed:
                inner = None
            if inner is not None:
                inner.path = sub_path
                inner.repo_root = None
                sub.identity = inner
                sub.initialised = True
                sub.checked_out_commit = inner.commit
                sub.worktree_dirty = inner.dirty
        subs.append(sub)
    return subs


def _gitmodules_urls(root: Path) -> dict[str, str]:
    if not (root / ".gitmodules").is_file():
        return {}
    out = run_git(
        root,
        "config",
        "-z",
        "-f",
        ".gitmodules",
        "--get-regexp",
        r"^submodule\..*\.(path|url)$",
        check=False,
    ).stdout
    paths: dict[str, str] = {}
    urls: dict[str, str] = {}
    for entry in split_nul(out):
        key, _, value = entry.partition("\n")
        name, _, field = key[len("submodule.") :].rpartition(".")
        (paths if field == "path" else urls)[name] = value
    return {paths[n]: urls[n] for n in paths if n in urls}


def _remote(root: Path, branch: str | None) -> tuple[str | None, str | None]:
    """(name, url) of the branch's remote, else origin, else the first; one git call reads
    the remotes' urls and the branches' remotes together."""
    out = run_git(
        root,
        "config",
        "-z",
        "--get-regexp",
        r"^(remote\..*\.url|branch\..*\.remote)$",
        check=False,
    ).stdout
    remotes: dict[str, str] = {}
    upstream: str | None = None
    for entry in split_nul(out):
        key, _, value = entry.partition("\n")
        if key.startswith("remote.") and key.endswith(".url"):
            remotes[key[len("remote.") : -len(".url")]] = value
        elif branch and key == f"branch.{branch}.remote":
            upstream = value.strip() or None  # the last one counts, as `git config --get`
    if not remotes:
        return None, None
    name = upstream
    if name not in remotes:
        name = "origin" if "origin" in remotes else sorted(remotes)[0]
    return name, strip_credentials(remotes[name])


def file_digest(path: Path) -> tuple[str, str]:
    """(kind, sha256) of a working-tree entry: symlinks hash their target, not what it points at."""
    st = path.lstat()
    if stat.S_ISLNK(st.st_mode):
        return "symlink", hashlib.sha256(os.fsencode(os.readlink(path))).hexdigest()
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    kind = "exec" if st.st_mode & 0o111 else "file"
    return kind, h.hexdigest()


def _hash_entry(update: Callable[[bytes], object], label: str, root: Path, rel: str) -> None:
    entry = root / rel
    try:
        mode = entry.lstat().st_mode
    except FileNotFoundError:
        kind, digest = "missing", ""
    else:
        if stat.S_ISREG(mode) or stat.S_ISLNK(mode):
            kind, digest = file_digest(entry)
        else:  # a directory or a special file: never opened (a FIFO would block)
            kind, digest = "other", f"{stat.S_IFMT(mode):o}"
    update(f"\0{label}\0{rel}\0{kind}\0{digest}".encode(errors="surrogateescape"))


def _diff_sha256(root: Path, ident: SourceIdentity) -> str:
    h = hashlib.sha256()
    base = "HEAD" if ident.commit else _EMPTY_TREE
    diff = run_git(
        root,
        "diff",
        base,
        "--binary",
        "--no-ext-diff",
        "--no-textconv",
        "--no-renames",
        "--no-color",
        "--submodule=short",
        "--ignore-submodules=none",
        "--src-prefix=a/",
        "--dst-prefix=b/",
    ).stdout
    h.update(b"diff\0")
    h.update(diff)
    for rel in ident.untracked:
        entry = root / rel
        if entry.is_dir() and not entry.is_symlink():
            # A nested repository git lists whole: hash the files it would ship.
            for member in nested_files(root, rel):
                _hash_entry(h.update, "untracked", root, member)
        else:
            _hash_entry(h.update, "untracked", root, rel)
    # git diff trusts assume-unchanged/skip-worktree and leaves these out: hash the copies.
    for rel in ident.hidden_from_git:
        _hash_entry(h.update, "hidden", root, rel)
    for sub in ident.submodules:
        inner = sub.identity
        h.update(
            f"\0submodule\0{sub.path}\0{sub.checked_out_commit}\0"
            f"{inner.diff_sha256 if inner else 'uninitialised'}".encode(errors="surrogateescape")
        )
    return h.hexdigest()

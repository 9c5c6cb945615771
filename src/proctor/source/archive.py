"""Shipping exact source: deterministic archives, unpacking with verification, inspection.

A clean tree ships as `git archive` of its commit plus every submodule at its recorded
revision; a dirty tree ships as its working tree (tracked + untracked-not-ignored files,
deletions respected, submodule working trees included). Either way the archive carries
`.proctor-source.json` (identity + manifest) and `.proctor-manifest.sha256`, so the far
side can verify without git (`sha256sum -c .proctor-manifest.sha256` works too).

Nothing here commits, pushes, resets or cleans anything.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import shutil
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from proctor.errors import TargetUnavailable, UsageError
from proctor.source.git import run_git, split_nul
from proctor.source.identity import SourceIdentity, Submodule, source_identity
from proctor.source.manifest import Manifest, ManifestEntry, VerifyReport, verify_manifest
from proctor.source.unseen import nested_files

IDENTITY_FILE = ".proctor-source.json"
MANIFEST_FILE = ".proctor-manifest.sha256"
METADATA_FILES = (IDENTITY_FILE, MANIFEST_FILE)
# Fixed member mtime (2000-01-01T00:00:00Z) so the same source gives the same archive bytes.
SOURCE_MTIME = 946684800

ArchiveKind = Literal["git-archive", "working-tree"]


class CheckoutExists(UsageError):
    """The destination already holds files; proctor never resets or cleans a checkout."""


class SourceMismatch(TargetUnavailable):
    """The far side's source is not the source asked for; nothing may run on it."""


class ShippedSource(BaseModel):
    """The content of `.proctor-source.json`."""

    # Validators built on first use: `proctor run` imports these models, most unused.
    model_config = ConfigDict(defer_build=True)

    schema_version: int = 1
    kind: ArchiveKind
    source_id: str
    identity: SourceIdentity
    manifest: Manifest


class ArchiveInfo(BaseModel):
    # Validators built on first use: `proctor run` imports these models, most unused.
    model_config = ConfigDict(defer_build=True)

    path: str
    sha256: str
    size: int
    source_id: str
    kind: ArchiveKind
    file_count: int
    manifest_sha256: str  # sha256 of the .proctor-manifest.sha256 text


@dataclass(frozen=True)
class _Member:
    path: str
    kind: Literal["file", "exec", "symlink"]
    data: bytes | None = None  # from git archive
    source: Path | None = None  # from the working tree
    linkname: str = ""

    def content(self) -> bytes:
        if self.data is not None:
            return self.data
        assert self.source is not None
        return self.source.read_bytes()


def checkout_path(workspace: str | PurePosixPath, source_id: str) -> PurePosixPath:
    """The remote layout: one isolated checkout per source identity."""
    return PurePosixPath(workspace) / "proctor" / "src" / source_id


# ---------------------------------------------------------------------------- making


def make_source_archive(identity: SourceIdentity, dest: str | os.PathLike[str]) -> ArchiveInfo:
    """Write the archive for `identity` to `dest` (a file, or a directory to hold
    `<source_id>.tar.gz`). The working tree must still match the identity."""
    if not identity.is_git or identity.repo_root is None or identity.source_id is None:
        raise UsageError(
            f"cannot archive {identity.path}: {identity.reason or 'no repository root'}",
            hint="run from inside a git checkout",
        )
    root = Path(identity.repo_root)
    now = source_identity(root)
    if now.source_id != identity.source_id:
        raise UsageError(
            f"the source changed since its identity was taken ({identity.source_id} -> "
            f"{now.source_id})",
            hint="take the identity again and archive that",
        )
    kind: ArchiveKind
    if identity.dirty:
        kind, members = "working-tree", _worktree_members(root, now, "")
    else:
        assert identity.commit is not None
        kind, members = "git-archive", _git_members(root, identity.commit, identity.submodules, "")
    members.sort(key=lambda m: m.path)
    entries = [_entry(m) for m in members]
    manifest = Manifest(entries=entries)
    embedded = identity.model_copy(deep=True)
    embedded.path, embedded.repo_root = ".", None  # local paths would break determinism
    shipped = ShippedSource(
        kind=kind, source_id=identity.source_id, identity=embedded, manifest=manifest
    )
    manifest_text = manifest.to_sha256sum().encode()
    meta = [
        _Member(IDENTITY_FILE, "file", data=(shipped.model_dump_json(indent=2) + "\n").encode()),
        _Member(MANIFEST_FILE, "file", data=manifest_text),
    ]
    out = Path(dest)
    if out.is_dir():
        out = out / f"{identity.source_id}.tar.gz"
    try:
        _write_tar(out, [*meta, *members])
    except OSError as exc:
        raise UsageError(
            f"cannot write source archive {out}: {exc.strerror or exc}",
            hint="choose an existing, writable destination",
        ) from exc
    return ArchiveInfo(
        path=str(out),
        sha256=_sha256_file(out),
        size=out.stat().st_size,
        source_id=identity.source_id,
        kind=kind,
        file_count=len(members),
        manifest_sha256=hashlib.sha256(manifest_text).hexdigest(),
    )


def _entry(m: _Member) -> ManifestEntry:
    if m.kind == "symlink":
        digest = hashlib.sha256(os.fsencode(m.linkname)).hexdigest()
        return ManifestEntry(path=m.path, sha256=digest, mode="symlink", kind="symlink")
    data = m.content()
    return ManifestEntry(
        path=m.path,
        size=len(data),
        sha256=hashlib.sha256(data).hexdigest(),
        mode="0755" if m.kind == "exec" else "0644",
    )


def _git_members(root: Path, commit: str, subs: list[Submodule], prefix: str) -> list[_Member]:
    raw = run_git(root, "archive", "--format=tar", commit).stdout
    members: list[_Member] = []
    with tarfile.open(fileobj=io.BytesIO(raw), mode="r:") as tar:
        for info in tar:
            name = prefix + info.name.rstrip("/")
            if info.issym():
                members.append(_Member(name, "symlink", linkname=info.linkname))
            elif info.isfile():
                fh = tar.extractfile(info)
                assert fh is not None
                kind: Literal["file", "exec"] = "exec" if info.mode & 0o111 else "file"
                members.append(_Member(name, kind, data=fh.read()))
    for sub in subs:
        sub_root = root / sub.path
        rev = sub.recorded_commit
        if rev is None or not sub.initialised:
            raise UsageError(
                f"submodule {prefix}{sub.path} is not checked out, so its recorded revision "
                "cannot be archived",
                hint="run `git submodule update --init --recursive`",
            )
        if run_git(sub_root, "cat-file", "-e", f"{rev}^{{commit}}", check=False).returncode:
            raise UsageError(
                f"submodule {prefix}{sub.path} lacks its recorded commit {rev[:12]}",
                hint="run `git submodule update --init --recursive`",
            )
        inner = sub.identity.submodules if sub.identity else []
        members.extend(_git_members(sub_root, rev, inner, f"{prefix}{sub.path}/"))
    return members


def _worktree_members(root: Path, ident: SourceIdentity, prefix: str) -> list[_Member]:
    tracked = split_nul(run_git(root, "ls-files", "-z", "--cached").stdout)
    sub_paths = {s.path for s in ident.submodules}
    names = {p for p in tracked if p not in sub_paths}
    for rel in ident.untracked:
        full = root / rel
        if full.is_dir() and not full.is_symlink():
            names.update(nested_files(root, rel))
        else:
            names.add(rel.rstrip("/"))
    members: list[_Member] = []
    for rel in sorted(names):
        full = root / rel
        if not os.path.lexists(full):
            continue  # deleted in the working tree: the shipped tree lacks it too
        st = full.lstat()
        if os.path.islink(full):
            members.append(_Member(prefix + rel, "symlink", linkname=os.readlink(full)))
        elif full.is_file():
            kind: Literal["file", "exec"] = "exec" if st.st_mode & 0o111 else "file"
            members.append(_Member(prefix + rel, kind, source=full))
    for sub in ident.submodules:
        if not sub.initialised or sub.identity is None:
            raise UsageError(
                f"submodule {prefix}{sub.path} is not checked out, so the exact source "
                "cannot be archived",
                hint="run `git submodule update --init --recursive`",
            )
        members.extend(_worktree_members(root / sub.path, sub.identity, f"{prefix}{sub.path}/"))
    return members


def _write_tar(out: Path, members: list[_Member]) -> None:
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    try:
        with (
            tmp.open("wb") as raw,
            gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as gz,
            tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar,
        ):
            for m in members:
                info = tarfile.TarInfo(m.path)
                info.mtime = SOURCE_MTIME
                info.uid = info.gid = 0
                info.uname = info.gname = ""
                if m.kind == "symlink":
                    info.type, info.linkname, info.mode = tarfile.SYMTYPE, m.linkname, 0o777
                    tar.addfile(info)
                    continue
                data = m.content()
                info.size, info.mode = len(data), 0o755 if m.kind == "exec" else 0o644
                tar.addfile(info, io.BytesIO(data))
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


# ---------------------------------------------------------------------- unpacking


class CheckoutReport(BaseModel):
    """What an existing checkout holds, and whether it matches what was asked for."""

    # Validators built on first use: `proctor run` imports these models, most unused.
    model_config = ConfigDict(defer_build=True)

    path: str
    state: Literal["missing", "empty", "proctor-archive", "git", "plain"]
    shipped: ShippedSource | None = None
    identity: SourceIdentity | None = None
    verify: VerifyReport | None = None
    dirty: bool = False
    modified: list[str] = Field(default_factory=list)
    untracked: list[str] = Field(default_factory=list)
    mismatches: list[str] = Field(default_factory=list)

    @property
    def matches(self) -> bool:
        return not self.mismatches

    def summary(self) -> str:
        if self.state == "proctor-archive" and self.shipped and self.verify:
            head = f"{self.path}: unpacked source {self.shipped.source_id}, {self.verify.summary()}"
        elif self.state == "git" and self.identity:
            head = f"{self.path}: git checkout {self.identity.summary()}"
        else:
            head = f"{self.path}: {self.state}"
        return head + (f"; mismatch: {'; '.join(self.mismatches)}" if self.mismatches else "")


def _read_shipped(path: Path) -> ShippedSource:
    try:
        return ShippedSource.model_validate_json(path.read_bytes())
    except (OSError, ValidationError) as exc:
        raise SourceMismatch(
            f"{path} is missing or invalid, so the source cannot be verified",
            hint="ship the source again into a new checkout directory",
        ) from exc


def inspect_checkout(
    path: str | os.PathLike[str], expected: SourceIdentity | None = None
) -> CheckoutReport:
    """Report an existing checkout's state (never changes it).

    A proctor-unpacked tree is verified against its manifest; a git checkout the user
    pointed at has its dirty and untracked state reported. With `expected`, differences
    in source id, commit, submodule revisions or local changes become `mismatches`.
    """
    here = Path(path)
    if not here.exists():
        return CheckoutReport(path=str(here), state="missing", mismatches=["checkout missing"])
    if here.is_dir() and not any(here.iterdir()):
        return CheckoutReport(path=str(here), state="empty", mismatches=["checkout empty"])
    if (here / IDENTITY_FILE).exists():
        shipped = _read_shipped(here / IDENTITY_FILE)
        report = verify_manifest(here, shipped.manifest, exclude=METADATA_FILES)
        rep = CheckoutReport(
            path=str(here),
            state="proctor-archive",
            shipped=shipped,
            verify=report,
            dirty=not report.ok,
            modified=report.changed + report.missing,
            untracked=report.extra,
        )
        if not report.ok:
            rep.mismatches.append(report.summary())
        if expected is not None and expected.source_id != shipped.source_id:
            rep.mismatches.append(
                f"source id {shipped.source_id} is not the expected {expected.source_id}"
            )
        return rep
    ident = source_identity(here)
    if not ident.is_git:
        rep = CheckoutReport(path=str(here), state="plain")
        if expected is not None:
            rep.mismatches.append("not a git checkout and no proctor manifest")
        return rep
    rep = CheckoutReport(
        path=str(here),
        state="git",
        identity=ident,
        dirty=ident.dirty,
        modified=sorted({*ident.modified, *ident.staged, *ident.deleted}),
        untracked=ident.untracked,
    )
    if expected is not None:
        rep.mismatches.extend(_git_mismatches(ident, expected))
    return rep


def _git_mismatches(have: SourceIdentity, want: SourceIdentity) -> list[str]:
    out: list[str] = []
    if have.commit != want.commit:
        out.append(f"commit {str(have.commit)[:12]} is not the expected {str(want.commit)[:12]}")
    want_subs = {s.path: s.recorded_commit for s in want.submodules}
    have_subs = {s.path: s.checked_out_commit for s in have.submodules}
    for sub_path, rev in sorted(want_subs.items()):
        if have_subs.get(sub_path) != rev:
            got = have_subs.get(sub_path)
            out.append(
                f"submodule {sub_path} at {str(got)[:12] if got else 'nothing'}, "
                f"expected {str(rev)[:12]}"
            )
    if have.dirty and have.diff_sha256 != want.diff_sha256:
        out.append(f"local changes ({have.summary()})")
    elif not have.dirty and want.dirty:
        out.append("clean, but the expected source has local changes")
    return out


def ensure_matches(report: CheckoutReport) -> CheckoutReport:
    """Raise SourceMismatch unless the inspected checkout matched; returns it otherwise."""
    if report.mismatches:
        raise SourceMismatch(
            f"refusing to run on {report.path}: {'; '.join(report.mismatches)}",
            hint="ship the exact source into a fresh checkout directory",
        )
    return report


def unpack_and_verify(
    archive: str | os.PathLike[str], dest_dir: str | os.PathLike[str]
) -> CheckoutReport:
    """Unpack a source archive into a new `dest_dir` and verify it there.

    Refuses a non-empty `dest_dir` (CheckoutExists). Unpacks into a sibling temporary
    directory and renames only after the manifest verified, so a failure leaves no
    half-written checkout; a mismatch raises SourceMismatch.
    """
    dest = Path(dest_dir)
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise CheckoutExists(
            f"{dest} already exists and is not empty; proctor never overwrites, resets or "
            "cleans a checkout",
            hint="inspect it with inspect_checkout, or unpack into a new directory",
        )
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.partial-", dir=dest.parent))
    except OSError as exc:
        raise TargetUnavailable(
            f"cannot create a checkout under {dest.parent}: {exc.strerror or exc}",
            hint="check the workspace path and its free space",
        ) from exc
    try:
        _extract(Path(archive), tmp)
        report = inspect_checkout(tmp)
        if report.state != "proctor-archive":
            raise SourceMismatch(
                f"{archive} holds no {IDENTITY_FILE}", hint="build it with make_source_archive"
            )
        assert report.shipped is not None
        text = (tmp / MANIFEST_FILE).read_text(encoding="utf-8", errors="surrogateescape")
        if text != report.shipped.manifest.to_sha256sum():
            report.mismatches.append(f"{MANIFEST_FILE} disagrees with {IDENTITY_FILE}")
        ensure_matches(report)
        try:
            if dest.exists():
                dest.rmdir()  # empty, checked above
            os.rename(tmp, dest)
        except OSError as exc:
            if not dest.is_dir():
                raise
            # Another unpack of the same source got there first (two runs of one group on one
            # host): its checkout is kept if it is this very source, verified.
            theirs = _same_checkout(dest, report)
            shutil.rmtree(tmp, ignore_errors=True)
            if theirs is None:
                raise CheckoutExists(
                    f"{dest} appeared while this source was unpacked and holds other files; "
                    "proctor never overwrites a checkout",
                    hint="inspect it with inspect_checkout, or unpack into a new directory",
                ) from exc
            return theirs
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    report.path = str(dest)
    return report


def _same_checkout(dest: Path, ours: CheckoutReport) -> CheckoutReport | None:
    """The report of the checkout at `dest` if it is the source `ours` verified, intact."""
    theirs = inspect_checkout(dest)
    if (
        theirs.state != "proctor-archive"
        or theirs.mismatches
        or theirs.shipped is None
        or ours.shipped is None
        or theirs.shipped.manifest.to_sha256sum() != ours.shipped.manifest.to_sha256sum()
    ):
        return None
    return theirs


def _extract(archive: Path, into: Path) -> None:
    try:
        with tarfile.open(archive, mode="r:*") as tar:
            members = tar.getmembers()
            for info in members:
                p = PurePosixPath(info.name)
                if p.is_absolute() or ".." in p.parts or not (info.isfile() or info.issym()):
                    raise SourceMismatch(
                        f"source archive {archive} has an unsafe member {info.name!r}",
                        hint="build it with make_source_archive",
                    )
            if hasattr(tarfile, "data_filter"):
                tar.extractall(into, members=members, filter="data")
            else:  # Python < 3.10.12: members were checked above
                tar.extractall(into, members=members)
    except (OSError, tarfile.TarError) as exc:
        raise SourceMismatch(
            f"cannot unpack source archive {archive}: {exc}", hint="ship the archive again"
        ) from exc

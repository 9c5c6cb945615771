"""Manifests of files (path, size, sha256, mode) and their verification.

Used for shipped source trees and for run directories (`manifest.sha256` over a run's
artifacts). The text form is what `sha256sum` prints, so the far side can check it with
`sha256sum -c` even where proctor is not installed; the JSON form adds size and mode.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from proctor.errors import ConfigError, invalid
from proctor.source.identity import file_digest

MANIFEST_SHA256 = "manifest.sha256"
MANIFEST_JSON = "manifest.json"


class ManifestEntry(BaseModel):
    # Validators built on first use: `proctor run` imports these models, most unused.
    model_config = ConfigDict(defer_build=True)

    path: str  # relative, '/'-separated
    size: int | None = None
    sha256: str
    mode: str | None = None  # permission bits in octal, e.g. "0644"; "symlink" for links
    kind: Literal["file", "symlink"] = "file"


class Manifest(BaseModel):
    # Validators built on first use: `proctor run` imports these models, most unused.
    model_config = ConfigDict(defer_build=True)

    schema_version: int = 1
    entries: list[ManifestEntry] = Field(default_factory=list)

    def by_path(self) -> dict[str, ManifestEntry]:
        return {e.path: e for e in self.entries}

    def to_sha256sum(self) -> str:
        """`sha256sum` text: `<hex>  <path>`, GNU escaping for `\\` and newlines in names.

        Symlinks are left out: `sha256sum -c` would hash what they point at, not the link;
        the JSON form carries them.
        """
        lines = []
        for e in self.entries:
            if e.kind == "symlink":
                continue
            if "\\" in e.path or "\n" in e.path:
                name = e.path.replace("\\", "\\\\").replace("\n", "\\n")
                lines.append(f"\\{e.sha256}  {name}\n")
            else:
                lines.append(f"{e.sha256}  {e.path}\n")
        return "".join(lines)

    def to_json(self) -> str:
        return self.model_dump_json(indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str) -> Manifest:
        try:
            return cls.model_validate_json(text)
        except ValidationError as exc:
            raise invalid(
                exc, what="invalid manifest JSON", hint="regenerate the manifest", cls=ConfigError
            ) from None

    @classmethod
    def from_sha256sum(cls, text: str) -> Manifest:
        """Parse `sha256sum` output (binary `*` markers accepted); size and mode stay unknown."""
        entries = []
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            escaped = line.startswith("\\")
            body = line[1:] if escaped else line
            digest, sep, name = body.partition(" ")
            if not sep or len(digest) != 64 or name[:1] not in (" ", "*"):
                raise ConfigError(
                    f"manifest line {n} is not `<sha256>  <path>`",
                    hint="regenerate the manifest",
                )
            name = name[1:]
            if escaped:
                name = _unescape(name)
            entries.append(ManifestEntry(path=name, sha256=digest.lower()))
        return cls(entries=sorted(entries, key=lambda e: e.path))


def digest_of(files: dict[str, str]) -> str:
    """One sha256 naming a set of files (name -> sha256), e.g. a dataset folder: the digest of
    their `sha256sum` text, sorted by name, so the same bytes under the same names give the
    same digest wherever it is computed."""
    entries = [ManifestEntry(path=name, sha256=sha) for name, sha in sorted(files.items())]
    return hashlib.sha256(Manifest(entries=entries).to_sha256sum().encode()).hexdigest()


def _unescape(name: str) -> str:
    out, i = [], 0
    while i < len(name):
        if name[i] == "\\" and i + 1 < len(name):
            out.append("\n" if name[i + 1] == "n" else name[i + 1])
            i += 2
        else:
            out.append(name[i])
            i += 1
    return "".join(out)


class VerifyReport(BaseModel):
    # Validators built on first use: `proctor run` imports these models, most unused.
    model_config = ConfigDict(defer_build=True)

    ok: bool
    checked: int
    missing: list[str] = Field(default_factory=list)
    changed: list[str] = Field(default_factory=list)
    extra: list[str] = Field(default_factory=list)

    def summary(self) -> str:
        if self.ok:
            return f"{self.checked} files verified"
        parts = [
            f"{len(v)} {k} ({', '.join(v[:3])}{', ...' if len(v) > 3 else ''})"
            for k, v in (
                ("missing", self.missing),
                ("changed", self.changed),
                ("extra", self.extra),
            )
            if v
        ]
        return "manifest mismatch: " + "; ".join(parts)


def _excluded(rel: str, exclude: Iterable[str]) -> bool:
    base = rel.rsplit("/", 1)[-1]
    return any(fnmatch.fnmatchcase(rel, pat) or fnmatch.fnmatchcase(base, pat) for pat in exclude)


def walk_files(root: Path, exclude: Iterable[str] = ()) -> list[str]:
    """Every file and symlink under root (relative, sorted); symlinked dirs are not followed."""
    pats = tuple(exclude)
    found: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        prefix = "" if rel_dir == "." else rel_dir.replace(os.sep, "/") + "/"
        kept = []
        for d in dirnames:
            full = os.path.join(dirpath, d)
            if os.path.islink(full):
                filenames.append(d)  # record the link itself
            elif not _excluded(prefix + d, pats):
                kept.append(d)
        dirnames[:] = kept
        found.extend(prefix + f for f in filenames if not _excluded(prefix + f, pats))
    return sorted(found)


def entry_for(root: Path, rel: str) -> ManifestEntry:
    full = root / rel
    st = full.lstat()
    kind, digest = file_digest(full)
    if kind == "symlink":
        return ManifestEntry(path=rel, size=None, sha256=digest, mode="symlink", kind="symlink")
    return ManifestEntry(
        path=rel, size=st.st_size, sha256=digest, mode=f"{stat.S_IMODE(st.st_mode):04o}"
    )


def build_manifest(
    root: str | os.PathLike[str],
    files: Iterable[str] | None = None,
    exclude: Iterable[str] = (MANIFEST_SHA256, MANIFEST_JSON),
) -> Manifest:
    """Manifest of `files` (relative to root), or of every file under root when None.

    `exclude` holds fnmatch patterns matched against the relative path and the base name;
    by default the manifest files themselves are left out.
    """
    base = Path(root)
    pats = tuple(exclude)
    if files is None:
        names = walk_files(base, pats)
    else:
        names = sorted({f.replace(os.sep, "/") for f in files if not _excluded(f, pats)})
    try:
        return Manifest(entries=[entry_for(base, rel) for rel in names])
    except FileNotFoundError as exc:
        raise ConfigError(
            f"cannot build manifest: {exc.filename} does not exist",
            hint="list only files that exist",
        ) from exc


def load_manifest(path: str | os.PathLike[str]) -> Manifest:
    """Read a manifest file: JSON when it parses as JSON, else sha256sum text."""
    try:
        text = Path(path).read_text(encoding="utf-8", errors="surrogateescape")
    except OSError as exc:
        raise ConfigError(
            f"cannot read manifest {path}: {exc.strerror}", hint="check the path"
        ) from exc
    if text.lstrip().startswith("{"):
        return Manifest.from_json(text)
    return Manifest.from_sha256sum(text)


def write_manifest(
    manifest: Manifest, root: str | os.PathLike[str], *, json_too: bool = True
) -> Path:
    """Write `manifest.sha256` (and `manifest.json`) into root atomically; returns the first."""
    base = Path(root)
    _atomic_write(base / MANIFEST_SHA256, manifest.to_sha256sum())
    if json_too:
        _atomic_write(base / MANIFEST_JSON, manifest.to_json())
    return base / MANIFEST_SHA256


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(text, encoding="utf-8", errors="surrogateescape")
    os.replace(tmp, path)


def verify_manifest(
    root: str | os.PathLike[str],
    manifest: Manifest | str | os.PathLike[str],
    *,
    check_extra: bool = True,
    exclude: Iterable[str] = (MANIFEST_SHA256, MANIFEST_JSON),
) -> VerifyReport:
    """Compare the files under root with a manifest (object or file path).

    `changed` covers content, size, mode and file-vs-symlink differences; `extra` lists
    files present but not in the manifest (skipped when `check_extra` is False).
    """
    base = Path(root)
    man = manifest if isinstance(manifest, Manifest) else load_manifest(manifest)
    missing: list[str] = []
    changed: list[str] = []
    for want in man.entries:
        full = base / want.path
        if not os.path.lexists(full):
            missing.append(want.path)
            continue
        if full.is_dir() and not full.is_symlink():
            changed.append(want.path)
            continue
        have = entry_for(base, want.path)
        if (
            have.sha256 != want.sha256
            or have.kind != want.kind
            or (want.size is not None and have.size != want.size)
            or (want.mode is not None and have.mode != want.mode)
        ):
            changed.append(want.path)
    extra: list[str] = []
    if check_extra:
        known = set(man.by_path())
        extra = [f for f in walk_files(base, exclude) if f not in known]
    ok = not (missing or changed or extra)
    return VerifyReport(
        ok=ok, checked=len(man.entries), missing=missing, changed=changed, extra=extra
    )


def manifest_to_dict(manifest: Manifest) -> dict[str, object]:
    """Plain JSON-able form for embedding in records."""
    data: dict[str, object] = json.loads(manifest.model_dump_json())
    return data

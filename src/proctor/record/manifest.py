"""manifest.sha256 of a run directory: `sha256sum -c` compatible, written when the run ends."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from proctor.record.rundir import MANIFEST, RunDir, write_atomic

_CHUNK = 1 << 20


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _artifacts(root: Path) -> list[Path]:
    return sorted(
        p
        for p in root.rglob("*")
        if p.is_file() and p.name != MANIFEST and not p.name.startswith(".")
    )


def write_run_manifest(run: RunDir) -> Path:
    lines = [
        f"{sha256_file(p)}  {p.relative_to(run.path).as_posix()}" for p in _artifacts(run.path)
    ]
    # Hashes and file names (masked where they are made): masking here could only break a hash.
    write_atomic(run.manifest_path, "\n".join(lines) + ("\n" if lines else ""), mask=False)
    return run.manifest_path


@dataclass
class ManifestCheck:
    ok: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    extra: list[str] = field(default_factory=list)
    outside: list[str] = field(default_factory=list)  # names that leave the run directory
    present: bool = True

    @property
    def verified(self) -> bool:
        return self.present and not (self.changed or self.missing or self.extra or self.outside)


def read_manifest(path: Path) -> dict[str, str]:
    entries: dict[str, str] = {}
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        if not line.strip():
            continue
        digest, _, name = line.partition("  ")
        entries[name] = digest
    return entries


def verify_run_manifest(run: RunDir) -> ManifestCheck:
    check = ManifestCheck()
    if not run.manifest_path.is_file():
        check.present = False
        return check
    expected = read_manifest(run.manifest_path)
    root = run.path.resolve()
    for name, digest in expected.items():
        path = run.path / name
        # A tampered manifest may name `../../etc/passwd`: never read outside the run.
        if PurePosixPath(name).is_absolute() or not path.resolve().is_relative_to(root):
            check.outside.append(name)
        elif not path.is_file():
            check.missing.append(name)
        elif sha256_file(path) != digest:
            check.changed.append(name)
        else:
            check.ok.append(name)
    known = set(expected)
    check.extra = [
        p.relative_to(run.path).as_posix()
        for p in _artifacts(run.path)
        if p.relative_to(run.path).as_posix() not in known
    ]
    return check

"""proctor.source: exact source identity, manifests, archives and their verification.

identity.py  source_identity(path) -> SourceIdentity (git state, submodules, diff hash)
manifest.py  build_manifest / verify_manifest (sha256sum-compatible text + JSON)
archive.py   make_source_archive / unpack_and_verify / inspect_checkout
git.py       the one place git is run
"""

from proctor.source.archive import (
    IDENTITY_FILE,
    MANIFEST_FILE,
    ArchiveInfo,
    CheckoutExists,
    CheckoutReport,
    ShippedSource,
    SourceMismatch,
    checkout_path,
    ensure_matches,
    inspect_checkout,
    make_source_archive,
    unpack_and_verify,
)
from proctor.source.identity import (
    NOT_A_GIT_CHECKOUT,
    SourceIdentity,
    Submodule,
    source_identity,
    strip_credentials,
)
from proctor.source.manifest import (
    MANIFEST_JSON,
    MANIFEST_SHA256,
    Manifest,
    ManifestEntry,
    VerifyReport,
    build_manifest,
    load_manifest,
    verify_manifest,
    write_manifest,
)

__all__ = [
    "IDENTITY_FILE",
    "MANIFEST_FILE",
    "MANIFEST_JSON",
    "MANIFEST_SHA256",
    "NOT_A_GIT_CHECKOUT",
    "ArchiveInfo",
    "CheckoutExists",
    "CheckoutReport",
    "Manifest",
    "ManifestEntry",
    "ShippedSource",
    "SourceIdentity",
    "SourceMismatch",
    "Submodule",
    "VerifyReport",
    "build_manifest",
    "checkout_path",
    "ensure_matches",
    "inspect_checkout",
    "load_manifest",
    "make_source_archive",
    "source_identity",
    "strip_credentials",
    "unpack_and_verify",
    "verify_manifest",
    "write_manifest",
]

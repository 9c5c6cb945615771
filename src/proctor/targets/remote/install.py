"""proctor installed into a virtual environment on the far workspace: `<ws>/proctor/venv`.

Controller side: `proctor_wheel()` builds a pure-python wheel of the running proctor package
(the exact code, content-hashed tag) without a build backend, so it works offline and from an
editable install (`pip wheel` would need setuptools, or the network for build isolation).
Far side (stdlib only, run by the agent under the base python): `ensure_venv()` creates the
venv with `--system-site-packages` and, when the base python is itself a venv, a `.pth` to
the base's site-packages, so dependencies come from what the host already has (hosts without
network). The wheel is unpacked into the venv's purelib (with RECORD, so pip can uninstall it)
and the install is tagged; the same tag is not installed twice. Paths are reported as found.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path
from typing import Any

INSTALL_FILE = "proctor-install.json"
REQUIRED = ("psutil", "pydantic")  # the agent and the supervisor cannot run without these
WANTED = ("typer", "rich", "click", "httpx", "aiohttp", "asyncssh", "prometheus_client")


def _package_files() -> tuple[Path, list[Path]]:
    from proctor.version import PACKAGE_DIR

    root = PACKAGE_DIR
    # Compiled files stay out: the wheel is pure (the far host may run another Python or
    # machine), and there the raw client reads in Python (loadgen/_fastread.c is optional).
    files = sorted(
        p
        for p in root.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix not in (".pyc", ".so", ".pyd")
    )
    return root, files


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"sha256={digest}"


def proctor_wheel(dest_dir: Path) -> tuple[Path, str]:
    """A deterministic wheel of the running proctor package; (path, tag). Cached by tag."""
    from proctor.version import __version__

    root, files = _package_files()
    digest = hashlib.sha256()
    for p in files:
        digest.update(p.relative_to(root.parent).as_posix().encode() + b"\0" + p.read_bytes())
    version = __version__
    tag = f"{version}-{digest.hexdigest()[:12]}"
    out = dest_dir / tag / f"proctor-{version}-py3-none-any.whl"
    if out.exists():
        return out, tag
    out.parent.mkdir(parents=True, exist_ok=True)
    info = f"proctor-{version}.dist-info"
    entries: list[tuple[str, bytes]] = [
        (p.relative_to(root.parent).as_posix(), p.read_bytes()) for p in files
    ]
    entries += [
        (
            f"{info}/METADATA",
            f"Metadata-Version: 2.1\nName: proctor\nVersion: {version}\n"
            f"Summary: proctor {tag} (shipped by proctor)\n".encode(),
        ),
        (
            f"{info}/WHEEL",
            b"Wheel-Version: 1.0\nGenerator: proctor\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        ),
        (f"{info}/entry_points.txt", b"[console_scripts]\nproctor = proctor.cli.main:entry\n"),
        (f"{info}/proctor_tag.txt", f"{tag}\n".encode()),
    ]
    record = "".join(f"{name},{_record_hash(data)},{len(data)}\n" for name, data in entries)
    record += f"{info}/RECORD,,\n"
    partial = out.with_suffix(f".partial-{os.getpid()}")
    with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as whl:
        for name, data in [*entries, (f"{info}/RECORD", record.encode())]:
            item = zipfile.ZipInfo(name, date_time=(2000, 1, 1, 0, 0, 0))
            item.external_attr = 0o644 << 16
            whl.writestr(item, data)
    partial.replace(out)
    return out, tag


# -- far side ------------------------------------------------------------------------------
def _purelib(dest: Path) -> Path:
    scheme = "venv" if "venv" in sysconfig.get_scheme_names() else "posix_prefix"
    path = sysconfig.get_path("purelib", scheme, vars={"base": str(dest), "platbase": str(dest)})
    return Path(path)


def _base_site_packages() -> list[str]:
    """The base interpreter's own site-packages when it is a venv (system ones come through
    --system-site-packages)."""
    if sys.prefix == sys.base_prefix:
        return []
    import site

    return [p for p in site.getsitepackages() if Path(p).is_dir()]


def _install_wheel(wheel: Path, purelib: Path, bindir: Path, python: Path) -> None:
    with zipfile.ZipFile(wheel) as whl:
        names = whl.namelist()
        for top in {n.split("/", 1)[0] for n in names}:
            target = purelib / top
            if target.is_dir():
                shutil.rmtree(target)  # the previous install of proctor, replaced whole
        for old in purelib.glob("proctor-*.dist-info"):
            shutil.rmtree(old)
        whl.extractall(purelib)
    script = bindir / "proctor"
    script.write_text(
        f"#!{python}\nimport sys\nfrom proctor.cli.main import entry\nsys.exit(entry())\n",
        encoding="utf-8",
    )
    script.chmod(0o755)


def _check(python: Path) -> dict[str, Any]:
    code = (
        "import importlib.util, json, platform, sys; import proctor; "
        f"mods = {list(REQUIRED + WANTED)!r}; "
        "print(json.dumps({'python': sys.executable, 'python_version': platform.python_version(),"
        " 'proctor_version': proctor.__version__, 'proctor_file': proctor.__file__,"
        " 'missing': [m for m in mods if importlib.util.find_spec(m) is None]}))"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run(
        [str(python), "-c", code], capture_output=True, text=True, env=env, check=False
    )
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"{python} cannot import proctor: {last}")
    answer: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return answer


def ensure_venv(dest: str, wheel: str | None, tag: str) -> dict[str, Any]:
    """Create/update `dest` with proctor `tag` installed; what was found and done.

    Raises RuntimeError (the agent answers with it) when a required dependency is missing."""
    root = Path(dest)
    root.parent.mkdir(parents=True, exist_ok=True)
    lock_path = root.parent / "venv.lock"
    with lock_path.open("a") as lock:
        # Controllers sharing a workspace (pods on one volume) install one at a time.
        fcntl.flock(lock, fcntl.LOCK_EX)
        python = root / "bin" / "python"
        installed = None
        with contextlib.suppress(OSError, ValueError):
            installed = json.loads((root / INSTALL_FILE).read_text()).get("tag")
        if installed != tag and wheel is None:
            return {"needs_wheel": True, "installed_tag": installed}
        created = False
        if not python.exists():
            venv.EnvBuilder(system_site_packages=True, with_pip=False, symlinks=True).create(root)
            created = True
        purelib = _purelib(root)
        purelib.mkdir(parents=True, exist_ok=True)
        base_paths = _base_site_packages()
        if created and base_paths:
            (purelib / "_proctor_base.pth").write_text("\n".join(base_paths) + "\n")
        action = "reused"
        if installed != tag and wheel is not None:
            _install_wheel(Path(wheel), purelib, root / "bin", python)
            action = "installed"
        found = _check(python)
        missing_required = [m for m in REQUIRED if m in found["missing"]]
        if missing_required:
            raise RuntimeError(
                f"the venv {root} (base {sys.executable}) lacks {', '.join(missing_required)}"
            )
        record = {
            "tag": tag,
            "base_python": sys.executable,
            "venv": str(root),
            "purelib": str(purelib),
            "base_site_packages": base_paths,
        }
        if action == "installed":
            tmp = root / f"{INSTALL_FILE}.tmp"
            tmp.write_text(json.dumps(record, indent=2, allow_nan=False) + "\n")
            tmp.replace(root / INSTALL_FILE)
        if wheel:
            Path(wheel).unlink(missing_ok=True)
    return {**found, **record, "created": created, "action": action, "needs_wheel": False}


__all__ = ["INSTALL_FILE", "ensure_venv", "proctor_wheel"]

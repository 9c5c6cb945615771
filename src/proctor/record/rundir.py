"""A run directory: one per run, named by a sortable run id; the files and their meaning.

<runs_dir>/<run_id>/
    <name>.log         combined stdout+stderr of the command
    exit_code          "<code>" or "<128+N> <SIGNAME>", written atomically by the waiter
    record.json        the record (record/schema.py), written by record/recorder.py only
    plan.json          what the wrapper needs to run the command (no secret values)
    wrapper.pid        the pid and start time of the process running it (the wrapper,
                       or a flow's or sweep's controller): `runs stop` signals it
    .owner.lock        held (flock) while an exit status can still come (record/owner.py)
    gpu.csv            GPU samples
    manifest.sha256    sha256 of every artifact, written when the run ends
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import secrets
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from proctor import redact
from proctor.errors import UsageError
from proctor.record.owner import create_owned
from proctor.record.runid import is_run_id as is_run_id  # re-exported: callers name it here

EXIT_CODE = "exit_code"
RECORD = "record.json"
PLAN = "plan.json"
WRAPPER_PID = "wrapper.pid"
GPU_CSV = "gpu.csv"
MANIFEST = "manifest.sha256"


def new_run_id(now: float | None = None) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(now if now is not None else time.time()))
    return f"{stamp}-{secrets.token_hex(3)}"


def write_atomic(path: Path, text: str, mask: bool = True) -> None:
    """Write via a temporary file and rename, so a reader never sees half a file.

    Secrets are masked as in a line proctor prints (`redact.line`: never inside a run id or a
    timestamp) unless the caller masked the content's data already (mask=False: an HTML page
    whose script must not be rewritten, a manifest of digests)."""
    if mask:
        text = redact.line(text)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


class _InRun:
    """A read-only attribute: the path of the run directory's file `name`."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __get__(self, run: RunDir, owner: type[RunDir] | None = None) -> Path:
        return run.path / self.name


@dataclass(frozen=True)
class RunDir:
    path: Path

    @property
    def run_id(self) -> str:
        return self.path.name

    # The files with fixed names (see the module docstring), e.g. `run.record_path`.
    exit_code_path = _InRun(EXIT_CODE)
    record_path = _InRun(RECORD)
    plan_path = _InRun(PLAN)
    wrapper_pid_path = _InRun(WRAPPER_PID)
    gpu_csv_path = _InRun(GPU_CSV)
    manifest_path = _InRun(MANIFEST)

    def log_path(self, name: str | None = None) -> Path:
        if name is not None:
            return self.path / f"{name}.log"
        plan = self.read_json(PLAN)
        if plan and "log" in plan:
            return self.path / str(plan["log"])
        logs = sorted(self.path.glob("*.log"))
        return logs[0] if logs else self.path / "run.log"

    def read_json(self, filename: str) -> dict[str, Any] | None:
        try:
            data = json.loads((self.path / filename).read_text(encoding="utf-8"))
        except (FileNotFoundError, UnicodeDecodeError, json.JSONDecodeError):
            return None
        return data if isinstance(data, dict) else None

    def write_json(self, filename: str, data: dict[str, Any], mask: bool = True) -> None:
        """The user's strings masked, walked field by field (`redact.data`: proctor's own ids,
        keys, kinds, outcomes and times are kept), unless the caller masked what may hold a
        secret and the rest must stay exact (plan.json: the paths the wrapper uses)."""
        shown = redact.data(data) if mask else data
        # allow_nan=False: a NaN here is a bug upstream; fail (70), never write a non-JSON token.
        text = json.dumps(shown, indent=2, default=str, allow_nan=False) + "\n"
        write_atomic(self.path / filename, text, mask=False)


_GITIGNORE = "# Written by proctor: run directories are outputs, not source.\n*\n"


def _is_proctor_entry(name: str) -> bool:
    return name.startswith(".") or is_run_id(name) or name.startswith("proctor.sqlite")


def ignore_in_git(runs_dir: Path, store_name: str | None = None) -> None:
    """Put a `.gitignore` of `*` in a runs directory (or the directory of a store named
    `store_name`) that holds only proctor's outputs, so they never show as untracked files
    (git status, source identity) inside a repository. A directory holding anything else is
    left alone (the identity excludes it by path)."""
    marker = runs_dir / ".gitignore"
    if marker.exists():
        return
    with contextlib.suppress(OSError):
        if all(
            _is_proctor_entry(entry.name) or (store_name and entry.name.startswith(store_name))
            for entry in os.scandir(runs_dir)
        ):
            write_atomic(marker, _GITIGNORE)


def create_run_dir(runs_dir: Path, run_id: str) -> RunDir:
    try:
        runs_dir.mkdir(parents=True, exist_ok=True)
        ignore_in_git(runs_dir)
        # Visible only once its owner lock is held (record/owner.py): never a run nobody owns.
        path = create_owned(runs_dir, run_id)
    except FileExistsError:
        raise UsageError(f"run directory {runs_dir / run_id} already exists") from None
    except OSError as error:
        if error.errno == errno.ENOSPC:
            raise  # the caller says ENOSPC (result unknown), not a usage error
        raise UsageError(
            f"cannot create a run directory under {runs_dir}: {error.strerror}",
            hint="choose a writable directory with --runs-dir or PROCTOR_RUNS_DIR",
        ) from None
    if not os.access(path, os.W_OK):
        raise UsageError(
            f"run directory {path} is not writable",
            hint="choose a writable directory with --runs-dir or PROCTOR_RUNS_DIR",
        )
    return RunDir(path)

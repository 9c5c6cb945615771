"""The login host: where Slurm client commands run and the shared workspace is reachable.

`LocalLogin` is proctor running on the login node itself (what the tests exercise): commands
are subprocesses and the shared workspace is a local path. An SSH login host implements the
same small protocol over one connection (see docs/slurm.md for its state).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from proctor.errors import TargetUnavailable
from proctor.targets.slurm.jobenv import JOB_ENV, move_secrets


@dataclass(frozen=True)
class Result:
    returncode: int
    stdout: str
    stderr: str

    def first_error_line(self) -> str:
        lines = [line.strip() for line in self.stderr.splitlines() if line.strip()]
        return lines[-1] if lines else f"exit status {self.returncode}"


class LoginHost(Protocol):
    """What the Slurm target needs from the machine it submits from."""

    name: str

    def run(
        self, argv: Sequence[str], *, env: Mapping[str, str] | None = None, timeout: float = 60
    ) -> Result: ...

    def run_submit(
        self,
        argv: Sequence[str],
        job_env: str,
        secret_names: Sequence[str] = (),
        *,
        timeout: float = 60,
    ) -> Result:
        """`run` for sbatch, with JOB_ENV naming the job's 0600 environment file `job_env`:
        the login host's secret variables are moved out of sbatch's environment into it
        (slurm/jobenv.py)."""
        ...

    def expand(self, path: str) -> str: ...

    def write_text(self, path: str, text: str, mode: int = 0o644) -> None: ...

    def put_file(self, local: Path, remote: str) -> None: ...

    def read_bytes(self, path: str, offset: int = 0, limit: int = 1 << 20) -> bytes: ...

    def exists(self, path: str) -> bool: ...

    def list_dir(self, path: str) -> list[str]: ...

    def fetch_tree(self, remote: str, local: Path) -> None: ...


class LocalLogin:
    """proctor runs on the login node: subprocesses and local files."""

    name = "local"

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        self.environ = dict(os.environ if environ is None else environ)

    def run(
        self, argv: Sequence[str], *, env: Mapping[str, str] | None = None, timeout: float = 60
    ) -> Result:
        return self._run(argv, {**self.environ, **(env or {})}, timeout)

    def run_submit(
        self,
        argv: Sequence[str],
        job_env: str,
        secret_names: Sequence[str] = (),
        *,
        timeout: float = 60,
    ) -> Result:
        environ = dict(self.environ)
        try:
            move_secrets(environ, job_env, secret_names)
        except (OSError, ValueError) as error:
            raise TargetUnavailable(f"cannot add the secrets to {job_env}: {error}") from None
        return self._run(argv, {**environ, JOB_ENV: job_env}, timeout)

    def _run(self, argv: Sequence[str], full_env: dict[str, str], timeout: float) -> Result:
        try:
            proc = subprocess.run(
                list(argv),
                env=full_env,
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
                stdin=subprocess.DEVNULL,
            )
        except FileNotFoundError:
            raise TargetUnavailable(
                f"{argv[0]} not found on the login host",
                hint="install the Slurm client commands or run proctor on the login node",
            ) from None
        except subprocess.TimeoutExpired:
            raise TargetUnavailable(
                f"{argv[0]} did not answer in {timeout:.0f}s",
                hint="check that slurmctld is up (`scontrol ping`)",
            ) from None
        except OSError as error:
            raise TargetUnavailable(f"cannot run {argv[0]}: {error.strerror}") from None
        return Result(proc.returncode, proc.stdout, proc.stderr)

    def expand(self, path: str) -> str:
        return os.path.abspath(os.path.expanduser(path))

    def write_text(self, path: str, text: str, mode: int = 0o644) -> None:
        target = Path(path)
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = target.with_name(f".{target.name}.tmp")
            tmp.unlink(missing_ok=True)
            # Created with `mode` (a secret-holding file is never readable by others, even
            # for a moment), then set exactly (the umask may have taken bits away).
            with os.fdopen(
                os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode), "w", encoding="utf-8"
            ) as f:
                f.write(text)
            tmp.chmod(mode)
            os.replace(tmp, target)
        except OSError as error:
            raise TargetUnavailable(
                f"cannot write {path} on the login host: {error.strerror}",
                hint="check the shared workspace path (--workspace) and its permissions",
            ) from None

    def put_file(self, local: Path, remote: str) -> None:
        try:
            Path(remote).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(local, remote)
        except OSError as error:
            raise TargetUnavailable(f"cannot copy {local} to {remote}: {error.strerror}") from None

    def read_bytes(self, path: str, offset: int = 0, limit: int = 1 << 20) -> bytes:
        try:
            with open(path, "rb") as handle:
                handle.seek(offset)
                return handle.read(limit)
        except FileNotFoundError:
            return b""
        except OSError as error:
            raise TargetUnavailable(f"cannot read {path}: {error.strerror}") from None

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def list_dir(self, path: str) -> list[str]:
        try:
            return sorted(os.listdir(path))
        except FileNotFoundError:
            return []
        except OSError as error:
            raise TargetUnavailable(f"cannot list {path}: {error.strerror}") from None

    def fetch_tree(self, remote: str, local: Path) -> None:
        try:
            shutil.copytree(remote, local, dirs_exist_ok=True, symlinks=True)
        except (OSError, shutil.Error) as error:
            raise TargetUnavailable(f"cannot fetch {remote}: {error}") from None

"""`dir://NAME`: a target that only tests register — a second local directory used as if it
were far away. It is the SSH target's agent path (ship proctor and the exact source, far venv,
agent JSON requests, fetch + verify) with local subprocesses instead of an SSH connection, so
flow, bench, serve and `runs ...` work on it exactly as on ssh://, with no change in cli/.

It is one module and one registry entry. A proctor process loads it through the environment:

    PROCTOR_TARGETS=tests.infra.dirtarget  (and the repository root on PYTHONPATH)

The workspace is `--workspace`, else `[remote] workspace` in proctor.toml, else
<tmp>/proctor-dir/NAME. Commands run in a clean environment (PATH, HOME, LANG only), as a
fresh SSH session would, with $HOME the workspace.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from proctor.spec.config import ProjectConfig
from proctor.targets.base import AGENT, FAR, SETUP, WAIT, Target
from proctor.targets.kinds import SSH_FLAGS, SshBase, agent_target_from_record, ssh_base
from proctor.targets.registry import (
    TargetContext,
    TargetKind,
    TargetOptions,
    register_target,
)
from proctor.targets.ssh import SshOptions, SshTarget

MODULE = __name__
_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")
_KEEP_ENV = ("PATH", "LANG", "LC_ALL", "TMPDIR")


class LocalShell:
    """The `Shell` of targets/ssh.py over local subprocesses (bash -c), in a clean env."""

    reconnects = 0

    def __init__(self, home: Path) -> None:
        self.home = home

    def _env(self) -> dict[str, str]:
        env = {k: os.environ[k] for k in _KEEP_ENV if k in os.environ}
        env["HOME"] = str(self.home)
        return env

    def run(
        self, command: str, stdin: bytes | None = None, timeout: float | None = 120.0
    ) -> tuple[int, bytes, bytes]:
        self.home.mkdir(parents=True, exist_ok=True)
        proc = subprocess.run(
            ["bash", "-c", command],
            input=stdin or b"",
            capture_output=True,
            timeout=timeout,
            env=self._env(),
            cwd=self.home,
            check=False,
        )
        return proc.returncode, proc.stdout, proc.stderr

    def stream(
        self, command: str, sink: Callable[[bytes], None], stdin: bytes = b""
    ) -> tuple[int, bytes]:
        self.home.mkdir(parents=True, exist_ok=True)
        proc = subprocess.Popen(
            ["bash", "-c", command],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=self._env(),
            cwd=self.home,
        )
        assert proc.stdin and proc.stdout and proc.stderr
        errors: list[bytes] = []
        reader = threading.Thread(target=lambda: errors.append(proc.stderr.read()), daemon=True)
        reader.start()
        proc.stdin.write(stdin)
        proc.stdin.close()
        while chunk := proc.stdout.read1(65536):
            sink(chunk)
        code = proc.wait()
        reader.join()
        return code, b"".join(errors)

    def put(self, local: Path, remote: str) -> None:
        shutil.copyfile(local, remote)

    def get_many(self, remote_dir: str, names: list[str], local_dir: Path) -> None:
        for name in names:
            target = local_dir / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(Path(remote_dir) / name, target)

    def close(self) -> None:
        return None


class DirTarget(SshTarget):
    """The agent target on a local directory."""

    kind = "dir"
    capabilities = frozenset({AGENT, SETUP, WAIT, FAR})

    def __init__(self, opts: SshOptions, *, info_extra: dict[str, Any] | None = None) -> None:
        assert opts.workspace, "a dir target has a workspace"
        super().__init__(opts, info_extra=info_extra, conn=LocalShell(Path(opts.workspace)))

    @property
    def name(self) -> str:
        return f"dir://{self.opts.host}"


class DirOptions(TargetOptions, SshBase):
    kind: Literal["dir"] = "dir"


def _parse(url: str, config: ProjectConfig, flags: dict[str, Any]) -> DirOptions:
    name = url.removeprefix("dir://").strip("/")
    if not _NAME.match(name):
        from proctor.errors import UsageError

        raise UsageError(f"invalid dir target {url!r}", hint="write dir://NAME")
    base = ssh_base(config, flags)
    workspace = base.pop("workspace") or str(Path(tempfile.gettempdir()) / "proctor-dir" / name)
    return DirOptions(url=url, host=name, user="", port=0, workspace=workspace, **base)


def _build(options: DirOptions, ctx: TargetContext) -> Target:
    return DirTarget(options.ssh_options())


def _from_record(remote: dict[str, Any]) -> Target:
    return agent_target_from_record(remote, lambda opts, extra: DirTarget(opts, info_extra=extra))


register_target(
    TargetKind(
        kind="dir",
        schemes=("dir",),
        options=DirOptions,
        capabilities=DirTarget.capabilities,
        syntax="dir://NAME (tests)",
        overrides=SSH_FLAGS,
        parse=_parse,
        build=_build,
        from_record=_from_record,
    )
)

__all__ = ["MODULE", "DirOptions", "DirTarget", "LocalShell"]

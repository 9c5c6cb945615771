"""The login host over SSH: `slurm://user@login-host[:port]`.

Every Slurm command and every file operation on the shared workspace goes through one
asyncssh connection (proctor.targets.ssh.SshConnection, reconnected after a drop). Values
that must stay secret (`--env`, the real argv) reach sbatch through a tiny far-side runner
that reads them from stdin: never a command line, never a file. sbatch itself runs under
`python -m proctor.targets.slurm.jobenv`, which moves the login host's own secret variables
into the job's 0600 environment file first (slurmctld saves sbatch's environment on disk).
The `SshTarget` it wraps also ships proctor's own package and the exact source (verified
by the far agent), exactly as `--target ssh://` does.
"""

from __future__ import annotations

import io
import json
import shlex
import tarfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from proctor.errors import TargetUnavailable
from proctor.targets.base import Prepared
from proctor.targets.slurm.jobenv import JOB_ENV
from proctor.targets.slurm.login import Result
from proctor.targets.ssh import SshOptions, SshTarget

#: Reads {"argv": [...], "env": {...}} on stdin and execs argv with env added (python3 only).
_RUNNER = (
    "import json,os,sys;r=json.load(sys.stdin);e=dict(os.environ);e.update(r['env']);"
    "sys.stdin.close()\ntry:\n os.execvpe(r['argv'][0],r['argv'],e)\n"
    "except OSError as x:\n sys.stderr.write(r['argv'][0]+': '+x.strerror+'\\n');sys.exit(127)"
)


def ssh_options(record: Mapping[str, Any], workspace: str | None, python: str | None) -> SshOptions:
    return SshOptions(
        host=str(record["host"]),
        user=str(record.get("user") or "root"),
        port=int(record.get("port") or 22),
        identity_file=record.get("identity_file"),
        known_hosts=record.get("known_hosts"),
        insecure_accept_host_key=bool(record.get("insecure_accept_host_key")),
        jump=record.get("jump"),
        workspace=workspace,
        remote_python=python,
        env_sh=record.get("env_sh"),
    )


class SshLogin:
    """A LoginHost reached over SSH."""

    def __init__(self, opts: SshOptions, runner_python: str = "python3") -> None:
        self.opts = opts
        self.name = opts.name
        self.ssh = SshTarget(opts)
        self.conn = self.ssh.conn
        self.runner_python = runner_python
        self._home: str | None = None
        self._env_sh: str | None = None
        self._env_sh_known = False

    # -- commands ---------------------------------------------------------------------------
    def _prefix(self) -> str:
        if not self._env_sh_known:
            self._env_sh_known = True
            path = self.opts.env_sh or (
                f"{self.opts.workspace}/env.sh" if self.opts.workspace else None
            )
            found = None
            if path:
                rc, _, _ = self.conn.run(f"test -f {shlex.quote(self.expand(path))}", timeout=30)
                found = self.expand(path) if rc == 0 else None
            self._env_sh = found
        return f". {shlex.quote(self._env_sh)} >/dev/null 2>&1 || true; " if self._env_sh else ""

    def run(
        self, argv: Sequence[str], *, env: Mapping[str, str] | None = None, timeout: float = 60
    ) -> Result:
        if env:
            line = (
                f"{self._prefix()}exec {shlex.quote(self.runner_python)} -c {shlex.quote(_RUNNER)}"
            )
            stdin = json.dumps({"argv": list(argv), "env": dict(env)}).encode()
        else:
            line, stdin = f"{self._prefix()}exec {shlex.join(argv)}", None
        rc, out, err = self.conn.run(line, stdin=stdin, timeout=timeout)
        return self._result(argv, rc, out, err)

    def _result(self, argv: Sequence[str], rc: int, out: bytes, err: bytes) -> Result:
        if rc == 127:
            raise TargetUnavailable(
                f"{argv[0]} not found on the login host {self.name}",
                hint="install the Slurm client commands there, or set [slurm] env_sh",
            )
        return Result(rc, out.decode(errors="replace"), err.decode(errors="replace"))

    def run_submit(
        self,
        argv: Sequence[str],
        job_env: str,
        secret_names: Sequence[str] = (),
        *,
        timeout: float = 60,
    ) -> Result:
        """sbatch sees the environment of this SSH session on the login host (sshd's, what the
        remote shell's startup files and env.sh export; nothing of the local shell): its
        secrets are moved into `job_env` there, by the proctor package shipped there."""
        prepared = self.prepare()
        # The shipped package on sys.path, not in PYTHONPATH: sbatch's environment stays the
        # session's own.
        path = [prepared.proctor_path] if prepared.proctor_path else []
        code = (
            f"import sys;sys.path[:0]={path!r};"
            "from proctor.targets.slurm.jobenv import main;sys.exit(main())"
        )
        line = f"{self._prefix()}exec {shlex.quote(prepared.python)} -c {shlex.quote(code)}"
        request = {
            "argv": list(argv),
            "env": {JOB_ENV: job_env},
            "job_env": job_env,
            "secret_names": list(secret_names),
        }
        rc, out, err = self.conn.run(line, stdin=json.dumps(request).encode(), timeout=timeout)
        return self._result(argv, rc, out, err)

    def _sh(self, line: str, stdin: bytes | None = None, doing: str = "") -> bytes:
        rc, out, err = self.conn.run(line, stdin=stdin, timeout=120)
        if rc != 0:
            raise TargetUnavailable(
                f"{self.name}: {doing or line} failed: {err.decode(errors='replace').strip()}",
                hint="check the shared workspace path (--workspace) and its permissions",
            )
        return out

    # -- files ------------------------------------------------------------------------------
    def expand(self, path: str) -> str:
        if path.startswith("~"):
            if self._home is None:
                self._home = self._sh('printf %s "$HOME"', doing="finding $HOME").decode()
            path = self._home + path[1:]
        elif not path.startswith("/"):
            return self.expand(f"~/{path}")
        return path.rstrip("/") or "/"

    def write_text(self, path: str, text: str, mode: int = 0o644) -> None:
        q = shlex.quote
        parent, tmp = path.rsplit("/", 1)[0] or "/", f"{path}.tmp"
        self._sh(
            f"mkdir -p {q(parent)} && rm -f {q(tmp)} && (umask 077 && cat > {q(tmp)}) && "
            f"chmod {mode:o} {q(tmp)} && "
            f"mv {q(tmp)} {q(path)}",
            stdin=text.encode(),
            doing=f"writing {path}",
        )

    def put_file(self, local: Path, remote: str) -> None:
        self._sh(f"mkdir -p {shlex.quote(remote.rsplit('/', 1)[0] or '/')}")
        self.conn.put(local, remote)

    def read_bytes(self, path: str, offset: int = 0, limit: int = 1 << 20) -> bytes:
        q = shlex.quote(path)
        # tail -c +N is 1-based; a missing file reads as empty, like LocalLogin.
        return self._sh(
            f"if [ -f {q} ]; then tail -c +{offset + 1} {q} | head -c {limit}; fi",
            doing=f"reading {path}",
        )

    def exists(self, path: str) -> bool:
        rc, _, _ = self.conn.run(f"test -e {shlex.quote(path)}", timeout=30)
        return rc == 0

    def list_dir(self, path: str) -> list[str]:
        q = shlex.quote(path)
        out = self._sh(f"if [ -d {q} ]; then ls -1A {q}; fi", doing=f"listing {path}")
        return sorted(n for n in out.decode(errors="replace").splitlines() if n)

    def fetch_tree(self, remote: str, local: Path) -> None:
        data = self._sh(f"tar -C {shlex.quote(remote)} -cf - .", doing=f"fetching {remote}")
        local.mkdir(parents=True, exist_ok=True)
        try:
            with tarfile.open(fileobj=io.BytesIO(data)) as tar:
                for member in tar.getmembers():
                    if not (member.isfile() or member.isdir()) or member.name.startswith("/"):
                        continue  # only plain files and directories come back
                    if ".." in Path(member.name).parts:
                        continue
                    tar.extract(member, local, set_attrs=False)
        except (tarfile.TarError, OSError) as error:
            raise TargetUnavailable(f"{self.name}: cannot unpack {remote}: {error}") from None

    # -- what the Slurm target needs beyond LoginHost --------------------------------------
    def prepare(self) -> Prepared:
        """Workspace, python, proctor's package shipped (for the compute nodes too)."""
        if self.ssh.prepared is None:
            self.ssh.prepare()
        assert self.ssh.prepared is not None
        return self.ssh.prepared

    def close(self) -> None:
        self.ssh.close()

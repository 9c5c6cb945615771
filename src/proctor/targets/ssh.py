"""The SSH target: `ssh://user@host[:port]` through asyncssh (exec with status, SFTP, keepalive).

Everything on the far side is done by proctor's own code (`proctor.targets.remote.agent`), run
with the far python and proctor's package shipped to <ws>/proctor/lib/<version>-<hash>/; so the
run directory, exit_code and manifest there are made exactly as locally. Far layout:

    <ws>/proctor/src/<source-id>/   one isolated checkout per source identity (never reset)
    <ws>/proctor/runs/<run-id>/     the run directory (the same wrapper as local runs)
    <ws>/proctor/lib/<ver>-<hash>/  proctor's own package (PYTHONPATH)
    <ws>/proctor/setup.done         the project setup script ran here (its sha256 inside)

A dropped connection is noticed within ~3 s (keepalive 1 s x 2) and re-established on the
next call; a run never depends on the connection. asyncssh and OS errors become
TargetUnavailable (69) naming the host, never a credential.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import secrets
import shlex
import tarfile
import threading
import time
from collections.abc import Callable, Coroutine
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, Any, Protocol, TypeVar
from urllib.parse import urlsplit

import asyncssh

from proctor.errors import ProctorError, TargetUnavailable, UsageError
from proctor.source.identity import SourceIdentity
from proctor.targets import base
from proctor.targets.local import verify_copy

T = TypeVar("T")
AGENT = "proctor.targets.remote.agent"
_URL_HINT = "write ssh://user@host[:port]"


@dataclass
class SshOptions:
    """How to reach a host. No secret lives here: keys are named by path."""

    host: str
    user: str = "root"
    port: int = 22
    identity_file: str | None = None
    known_hosts: str | None = None  # a file; None uses ~/.ssh/known_hosts
    insecure_accept_host_key: bool = False  # --insecure-accept-host-key
    jump: str | None = None  # ssh://user@jump[:port], same keys and known-hosts policy
    connect_timeout_s: float = 5.0
    keepalive_interval_s: float = 1.0
    keepalive_count_max: int = 2
    workspace: str | None = None  # default: /workspace if it exists, else $HOME
    remote_python: str | None = None  # default: <ws>/proctor/venv/bin/python, else python3
    env_sh: str | None = None  # default: <ws>/env.sh when it exists
    reconnect_s: float = 120.0  # how long follow/wait keep trying after a drop
    connect_budget_s: float = 30.0  # how long one connect keeps retrying (backoff 0.5 s .. 8 s)
    venv_base: str | None = None  # base python of <ws>/proctor/venv (default python3)
    use_venv: bool = True  # without --remote-python: install proctor into <ws>/proctor/venv

    @property
    def name(self) -> str:
        return f"ssh://{self.user}@{self.host}:{self.port}"

    def to_record(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_record(cls, data: dict[str, Any]) -> SshOptions:
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in data.items() if k in known})


def parse_ssh_url(url: str, **options: Any) -> SshOptions:
    """`ssh://user@host[:port]` (or `user@host[:port]`) -> SshOptions."""
    text = url if url.startswith("ssh://") else f"ssh://{url}"
    try:
        parts = urlsplit(text)
        port = parts.port or 22
    except ValueError:
        raise UsageError(f"invalid ssh target {url!r}", hint=_URL_HINT) from None
    if parts.scheme != "ssh" or not parts.hostname or parts.password or parts.path not in ("", "/"):
        raise UsageError(f"invalid ssh target {url!r}", hint=_URL_HINT)
    return SshOptions(host=parts.hostname, user=parts.username or "root", port=port, **options)


def _unavailable(
    opts: SshOptions, error: BaseException, doing: str, note: str | None = None
) -> TargetUnavailable:
    reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    if note:
        reason = f"{reason} ({note})"
    if isinstance(error, asyncssh.HostKeyNotVerifiable):
        hint = "add the host key to known_hosts, or pass --insecure-accept-host-key"
    elif isinstance(error, asyncssh.PermissionDenied):
        hint = "check the user and --identity-file"
    else:
        hint = "check the host is up and reachable (ssh -p PORT user@host), then retry"
    return TargetUnavailable(f"{opts.name}: {doing} failed: {reason}", hint=hint)


# Errors that a retry cannot change: report them at once.
_PERMANENT = (asyncssh.HostKeyNotVerifiable, asyncssh.PermissionDenied)


class ConnectFailed(Exception):
    """The bounded connect loop gave up: the last error and why it stopped."""

    def __init__(self, error: BaseException, attempts: int, elapsed: float, why: str) -> None:
        super().__init__(str(error))
        self.error, self.attempts, self.elapsed, self.why = error, attempts, elapsed, why

    def note(self) -> str:
        return f"{self.attempts} attempt(s) in {self.elapsed:.1f}s; {self.why}"


def _error_key(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"


class SshConnection:
    """One asyncssh connection run on a private event loop thread; synchronous methods."""

    def __init__(self, opts: SshOptions) -> None:
        self.opts = opts
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._conn: asyncssh.SSHClientConnection | None = None
        self._jump: asyncssh.SSHClientConnection | None = None
        self.reached = False  # the host answered once in this session: evidence it exists
        self.reconnects = 0  # connections made after the first
        self.attempts: list[str] = []  # failed connect attempts (error keys), for reports

    def _call(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        return future.result(timeout)

    def _kwargs(self, host: str, port: int, user: str) -> dict[str, Any]:
        o = self.opts
        kw: dict[str, Any] = {
            "host": host,
            "port": port,
            "username": user,
            "connect_timeout": o.connect_timeout_s,
            "keepalive_interval": o.keepalive_interval_s,
            "keepalive_count_max": o.keepalive_count_max,
            "agent_path": None,
        }
        if o.identity_file:
            kw["client_keys"] = [o.identity_file]
        if o.insecure_accept_host_key:
            kw["known_hosts"] = None
        elif o.known_hosts:
            kw["known_hosts"] = o.known_hosts
        return kw

    async def _connect(self) -> asyncssh.SSHClientConnection:
        """Connect with bounded retries: backoff 0.5 s doubling to 8 s within connect_budget_s.
        A permanent error (host key, auth) stops at once. For a host never reached in this
        session, the same error twice is no new evidence and stops the loop; a host that was
        reached (a run is going there) is retried for the whole budget."""
        if self._conn is not None and not self._conn.is_closed():
            return self._conn
        loop = asyncio.get_running_loop()
        started, delay, last, attempt = loop.time(), 0.5, None, 0
        while True:
            attempt += 1
            try:
                conn = await self._open()
            except _PERMANENT as error:
                self._drop()
                self.attempts.append(_error_key(error))
                raise ConnectFailed(
                    error, attempt, loop.time() - started, "not retried (a retry cannot change it)"
                ) from None
            except (OSError, asyncssh.Error, asyncio.TimeoutError, TimeoutError) as error:
                self._drop()
                key = _error_key(error)
                self.attempts.append(key)
                elapsed = loop.time() - started
                why = None
                if not self.reached and key == last:
                    why = "the same error twice without new evidence: stopped"
                elif elapsed + delay >= self.opts.connect_budget_s:
                    why = f"connect budget {self.opts.connect_budget_s:g}s spent"
                if why:
                    raise ConnectFailed(error, attempt, elapsed, why) from None
                last = key
                await asyncio.sleep(delay)
                delay = min(delay * 2, 8.0)
                continue
            if self.reached:
                self.reconnects += 1
            self.reached = True
            return conn

    async def _open(self) -> asyncssh.SSHClientConnection:
        kw = self._kwargs(self.opts.host, self.opts.port, self.opts.user)
        if self.opts.jump:
            jump = parse_ssh_url(self.opts.jump)
            self._jump = await asyncssh.connect(**self._kwargs(jump.host, jump.port, jump.user))
            kw["tunnel"] = self._jump
        self._conn = await asyncssh.connect(**kw)
        return self._conn

    def _drop(self) -> None:
        for conn in (self._conn, self._jump):
            if conn is not None:
                conn.abort()
        self._conn = self._jump = None

    def _guard(
        self, coro_fn: Callable[[], Coroutine[Any, Any, T]], doing: str, timeout: float | None
    ) -> T:
        try:
            return self._call(coro_fn(), timeout)
        except ProctorError:
            raise
        except ConnectFailed as failed:
            raise _unavailable(self.opts, failed.error, "connect", failed.note()) from None
        except (OSError, asyncssh.Error, asyncio.TimeoutError, TimeoutError) as error:
            self._call(self._adrop())
            raise _unavailable(self.opts, error, doing) from None

    async def _adrop(self) -> None:
        self._drop()

    def run(
        self, command: str, stdin: bytes | None = None, timeout: float | None = 120.0
    ) -> tuple[int, bytes, bytes]:
        async def go() -> tuple[int, bytes, bytes]:
            conn = await self._connect()
            result = await asyncio.wait_for(
                conn.run(command, input=stdin, encoding=None, check=False), timeout
            )
            out = result.stdout if isinstance(result.stdout, bytes) else b""
            err = result.stderr if isinstance(result.stderr, bytes) else b""
            if result.exit_status is None:
                raise asyncssh.ConnectionLost(f"no exit status ({result.exit_signal})")
            return int(result.exit_status), out, err

        return self._guard(go, "exec", None)

    def stream(
        self, command: str, sink: Callable[[bytes], None], stdin: bytes = b""
    ) -> tuple[int, bytes]:
        """Run `command`, handing its stdout to `sink` as it arrives; (status, stderr)."""

        async def go() -> tuple[int, bytes]:
            conn = await self._connect()
            proc = await conn.create_process(command, encoding=None)
            proc.stdin.write(stdin)
            proc.stdin.write_eof()

            async def pump() -> None:
                while chunk := await proc.stdout.read(65536):
                    sink(chunk)

            errors = asyncio.ensure_future(proc.stderr.read())
            await pump()
            await proc.wait_closed()
            status = proc.exit_status
            if status is None:
                raise asyncssh.ConnectionLost("connection closed before the exit status")
            return int(status), await errors

        return self._guard(go, "exec", None)

    def put(self, local: Path, remote: str) -> None:
        async def go() -> None:
            conn = await self._connect()
            async with conn.start_sftp_client() as sftp:
                await sftp.put(str(local), remote)

        self._guard(go, f"upload to {remote}", None)

    def get_many(self, remote_dir: str, names: list[str], local_dir: Path) -> None:
        async def go() -> None:
            conn = await self._connect()
            async with conn.start_sftp_client() as sftp:
                for name in names:
                    target = local_dir / name
                    target.parent.mkdir(parents=True, exist_ok=True)
                    await sftp.get(f"{remote_dir}/{name}", str(target))

        self._guard(go, f"download from {remote_dir}", None)

    def close(self) -> None:
        with _suppress():
            self._call(self._adrop(), 5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)


class _suppress:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> bool:
        return True


# -- proctor's own package, shipped to the far side -----------------------------------------
def proctor_bundle(dest_dir: Path) -> tuple[Path, str]:
    """A deterministic tar.gz of the installed `proctor` package; (path, content hash[:12])."""
    from proctor.version import PACKAGE_DIR, __version__

    root = PACKAGE_DIR
    files = sorted(
        p
        for p in root.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
    )
    digest = hashlib.sha256()
    for p in files:
        digest.update(p.relative_to(root.parent).as_posix().encode() + b"\0" + p.read_bytes())
    tag = f"{__version__}-{digest.hexdigest()[:12]}"
    out = dest_dir / f"proctor-{tag}.tar.gz"
    if not out.exists():
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:gz") as tar:
            for p in files:
                info = tarfile.TarInfo(p.relative_to(root.parent).as_posix())
                data = p.read_bytes()
                info.size, info.mtime, info.mode = len(data), 946684800, 0o644
                tar.addfile(info, io.BytesIO(data))
        out.write_bytes(buf.getvalue())
    return out, tag


class Shell(Protocol):
    """How the agent target reaches its far side: a shell that runs commands, copies files.
    SshConnection is one; a test target runs local subprocesses instead (tests/infra)."""

    reconnects: int

    def run(
        self, command: str, stdin: bytes | None = None, timeout: float | None = 120.0
    ) -> tuple[int, bytes, bytes]: ...

    def stream(
        self, command: str, sink: Callable[[bytes], None], stdin: bytes = b""
    ) -> tuple[int, bytes]: ...

    def put(self, local: Path, remote: str) -> None: ...

    def get_many(self, remote_dir: str, names: list[str], local_dir: Path) -> None: ...

    def close(self) -> None: ...


class SshTarget:
    """The Target protocol on one SSH host (or, with another `Shell`, any host that runs a
    shell: everything far away is done by the agent through `conn`)."""

    kind = "ssh"
    capabilities = frozenset({base.AGENT, base.SETUP, base.WAIT, base.FAR})

    def __init__(
        self,
        opts: SshOptions,
        *,
        info_extra: dict[str, Any] | None = None,
        conn: Shell | None = None,
    ) -> None:
        self.opts = opts
        self.conn: Shell = conn if conn is not None else SshConnection(opts)
        self.info_extra = dict(info_extra or {})
        self.prepared: base.Prepared | None = None
        self.checkout: str | None = None
        self.identity: dict[str, Any] | None = None

    # -- far-side helpers ---------------------------------------------------------------------
    @property
    def workspace(self) -> str:
        assert self.prepared is not None, "prepare() first"
        return self.prepared.workspace

    @property
    def runs_dir(self) -> str:
        return f"{self.workspace}/proctor/runs"

    def _shell_prefix(self) -> str:
        p = self.prepared
        assert p is not None
        parts = []
        if p.env_sh:
            parts.append(f". {shlex.quote(p.env_sh)} >/dev/null 2>&1 || true;")
        if p.proctor_path:
            lib = shlex.quote(p.proctor_path)
            parts.append(f"export PYTHONPATH={lib}${{PYTHONPATH:+:$PYTHONPATH}};")
        return " ".join(parts)

    def agent(
        self, command: str, request: dict[str, Any], timeout: float | None = 300.0
    ) -> dict[str, Any]:
        """Run one agent command on the far side with `request` (validated by the command's
        model, requests.py); its JSON answer, or its error re-raised."""
        from proctor.targets.remote.requests import request_for

        p = self.prepared
        assert p is not None
        payload = request_for(command, request).model_dump_json().encode()
        line = f"{self._shell_prefix()} exec {shlex.quote(p.python)} -m {AGENT} {command}"
        rc, out, err = self.conn.run(line, stdin=payload, timeout=timeout)
        return decode_answer(self.opts.name, command, rc, out, err)

    @property
    def name(self) -> str:
        return self.opts.name

    @property
    def reconnects(self) -> int:
        return self.conn.reconnects

    def with_prepared(self, prepared: base.Prepared) -> SshTarget:
        """Reuse what an earlier prepare() found (reconnecting from a record)."""
        self.prepared = prepared
        return self

    # -- protocol -----------------------------------------------------------------------------
    def describe(self) -> base.TargetInfo:
        details = {k: v for k, v in self.opts.to_record().items() if k not in ("host",)}
        details.update(self.info_extra)
        return base.TargetInfo(kind=self.kind, name=self.name, host=self.opts.host, details=details)

    def prepare(self) -> base.Prepared:
        o = self.opts
        probe = (
            "set -e; "
            + (
                f"ws={shlex.quote(o.workspace)}; "
                if o.workspace
                else 'if [ -d /workspace ]; then ws=/workspace; else ws="$HOME"; fi; '
            )
            + 'mkdir -p "$ws/proctor/lib" "$ws/proctor/runs" "$ws/proctor/src" "$ws/proctor/tmp"; '
            + 'cd "$ws" && pwd -P; hostname; '
        )
        rc, out, err = self.conn.run(probe, timeout=60)
        if rc != 0:
            raise TargetUnavailable(
                f"{o.name}: cannot create the workspace: {err.decode(errors='replace').strip()}",
                hint="pass --workspace with a writable directory on the host",
            )
        lines = out.decode().split()
        ws, hostname = lines[0], lines[1] if len(lines) > 1 else "?"
        env_sh = o.env_sh or f"{ws}/env.sh"
        python = o.remote_python or ""
        check = (
            f"[ -f {shlex.quote(env_sh)} ] && echo env=yes || echo env=no; "
            f"[ -x {shlex.quote(ws)}/proctor/venv/bin/python ] && echo venv=yes || echo venv=no"
        )
        rc, out, _ = self.conn.run(check, timeout=30)
        flags = dict(x.split("=", 1) for x in out.decode().split())
        env_found = flags.get("env") == "yes"
        venv_mode = not python and o.use_venv
        if venv_mode:
            python = o.venv_base or "python3"  # runs the agent that makes the venv
        elif not python:
            python = f"{ws}/proctor/venv/bin/python" if flags.get("venv") == "yes" else "python3"
        bundle, tag = proctor_bundle(_local_cache())
        lib = f"{ws}/proctor/lib/{tag}"
        rc, _, _ = self.conn.run(f"test -f {shlex.quote(lib)}/proctor/__init__.py", timeout=30)
        shipped = rc != 0
        if shipped:
            # Unique temporary names: pods sharing one network volume may ship at once.
            token = secrets.token_hex(4)
            remote_tar = f"{ws}/proctor/tmp/{bundle.name}.{token}"
            self.conn.put(bundle, remote_tar)
            q = shlex.quote
            part = f"{lib}.partial-{token}"
            rc, _, err = self.conn.run(
                f"set -e; mkdir -p {q(part)}; tar -xzf {q(remote_tar)} -C {q(part)}; "
                f"rm -f {q(remote_tar)}; if [ -f {q(lib)}/proctor/__init__.py ]; then "
                f"rm -rf {q(part)}; else mv {q(part)} {q(lib)}; fi",
                timeout=120,
            )
            if rc != 0:
                raise TargetUnavailable(
                    f"{o.name}: cannot unpack proctor into {lib}: "
                    f"{err.decode(errors='replace').strip()}"
                )
        self.prepared = base.Prepared(
            workspace=ws, python=python, proctor_path=lib, env_sh=env_sh if env_found else None
        )
        try:
            found = self.agent("probe", {})
        except TargetUnavailable as error:
            raise TargetUnavailable(
                f"{o.name}: the far python {python!r} cannot run proctor: {error.message}",
                hint="create <ws>/proctor/venv with psutil and pydantic, or pass --remote-python",
            ) from None
        notes = [] if env_found else [f"no env.sh at {env_sh} (not sourced)"]
        found = {**found, "hostname": hostname, "proctor_lib_shipped": shipped, "proctor_lib": lib}
        self.prepared = base.Prepared(
            workspace=ws,
            python=str(found.get("python") or python),
            proctor_path=lib,
            env_sh=env_sh if env_found else None,
            found=found,
            notes=notes,
        )
        if venv_mode:
            self.prepared = self._ensure_venv(self.prepared)
        return self.prepared

    def _ensure_venv(self, prepared: base.Prepared) -> base.Prepared:
        """proctor installed into <ws>/proctor/venv from a wheel of this exact proctor; the
        venv's python then runs everything (no PYTHONPATH)."""
        from proctor.targets.remote.install import proctor_wheel

        dest = f"{prepared.workspace}/proctor/venv"
        wheel, tag = proctor_wheel(_local_cache() / "wheels")
        answer = self.agent("venv", {"dest": dest, "tag": tag, "wheel": None}, timeout=300)
        if answer.get("needs_wheel"):
            remote = f"{prepared.workspace}/proctor/tmp/{wheel.name}.{secrets.token_hex(4)}"
            self.conn.put(wheel, remote)
            answer = self.agent("venv", {"dest": dest, "tag": tag, "wheel": remote}, timeout=300)
        answer.pop("ok", None)
        notes = list(prepared.notes)
        if answer.get("missing"):
            notes.append(f"far venv lacks {', '.join(answer['missing'])} (some commands need them)")
        return base.Prepared(
            workspace=prepared.workspace,
            python=str(answer["python"]),
            proctor_path=None,
            env_sh=prepared.env_sh,
            setup=prepared.setup,
            found={**prepared.found, "venv": answer, "base_python": prepared.python},
            notes=notes,
        )

    def sync_source(
        self, identity: SourceIdentity, *, existing: str | None = None
    ) -> base.SyncedSource:
        from proctor.source.archive import CheckoutExists, checkout_path, make_source_archive

        if identity.source_id is None:
            raise UsageError(
                "the local source has no identity (not a git checkout?)",
                hint="run from inside a git checkout",
            )
        ident_json = identity.model_dump(mode="json")
        self.identity = ident_json
        if existing:
            answer = self.agent("inspect", {"path": existing, "identity": ident_json})
            self.checkout = existing
            return _synced(answer, "existing", None)
        dest = str(checkout_path(self.workspace, identity.source_id))
        answer = self.agent("inspect", {"path": dest, "identity": ident_json})
        if answer["state"] != "missing":
            # Never reset or clean: verify what is there, and refuse (untouched) if it differs.
            self.checkout = dest
            return _synced(answer, "reused", None)
        cache = _local_cache()
        info = make_source_archive(identity, cache)
        token = secrets.token_hex(4)
        remote_tar = f"{self.workspace}/proctor/tmp/{identity.source_id}.{token}.tar.gz"
        self.conn.put(Path(info.path), remote_tar)
        self.checkout = dest
        try:
            answer = self.agent(
                "unpack", {"archive": remote_tar, "dest": dest, "sha256": info.sha256}
            )
        except CheckoutExists:
            # Another controller unpacked the same source meanwhile: verify theirs instead.
            answer = self.agent("inspect", {"path": dest, "identity": ident_json})
            return _synced(answer, "reused", None)
        return _synced(answer, "shipped", info.sha256)

    def run_setup(self, script: str, checkout: str) -> str:
        """Run the project setup script once per workspace; 'ran' or 'already-done'."""
        q = shlex.quote
        marker, log = f"{self.workspace}/proctor/setup.done", f"{self.workspace}/proctor/setup.log"
        rc, out, _ = self.conn.run(f"cat {q(marker)} 2>/dev/null || true", timeout=30)
        if out.strip():
            return "already-done"
        rc, _, _ = self.conn.run(
            f"{self._shell_prefix()} cd {q(checkout)} && bash {q(script)} >{q(log)} 2>&1 && "
            f"sha256sum {q(script)} > {q(marker)}",
            timeout=None,
        )
        if rc != 0:
            from proctor.errors import WorkloadFailed

            raise WorkloadFailed(
                f"{self.opts.name}: setup script {script} failed (exit {rc})",
                hint=f"see {log} on the host",
            )
        return "ran"

    def start(self, job: base.JobSpec) -> base.StartedRun:
        if self.checkout is None:
            raise UsageError("sync_source() must come before start()")
        request = {
            "job": asdict(job),
            "runs_dir": self.runs_dir,
            "checkout": self.checkout,
            "identity": self.identity,
            "target": self.describe().to_record(),
        }
        answer = self.agent("start", request)
        return base.StartedRun(
            answer["run_id"], answer["dir"], answer["log"], bool(answer["attached"])
        )

    def status(self, run_id: str) -> base.RunStatus:
        return _status(self.agent("status", {"runs_dir": self.runs_dir, "run_id": run_id}))

    def follow(
        self, run_id: str, out: IO[bytes], *, offset: int = 0, until_done: bool = True
    ) -> base.RunStatus:
        """Copy the far log to `out` from `offset`; after a drop, reconnect and resume at the
        byte where it stopped, for up to opts.reconnect_s."""
        position = offset
        give_up = time.monotonic() + self.opts.reconnect_s

        def sink(chunk: bytes) -> None:
            nonlocal position
            out.write(chunk)
            out.flush()
            position += len(chunk)

        from proctor.targets.remote.requests import FollowRequest

        p = self.prepared
        assert p is not None
        while True:
            request = FollowRequest(
                runs_dir=self.runs_dir, run_id=run_id, offset=position, until_done=until_done
            )
            line = f"{self._shell_prefix()} exec {shlex.quote(p.python)} -m {AGENT} follow"
            try:
                rc, err = self.conn.stream(line, sink, request.model_dump_json().encode())
            except TargetUnavailable:
                if time.monotonic() >= give_up:
                    raise
                time.sleep(1.0)
                continue
            return _status(decode_answer(self.opts.name, "follow", rc, b"", err, from_stderr=True))

    def wait(self, run_id: str, timeout: float | None = None, poll: float = 1.0) -> base.RunStatus:
        deadline = None if timeout is None else time.monotonic() + timeout
        give_up = time.monotonic() + self.opts.reconnect_s
        while True:
            try:
                state = self.status(run_id)
                give_up = time.monotonic() + self.opts.reconnect_s
            except TargetUnavailable:
                if time.monotonic() >= give_up:
                    raise
                time.sleep(poll)
                continue
            if state.done or (deadline is not None and time.monotonic() >= deadline):
                return state
            time.sleep(poll)

    def stop(self, run_id: str) -> bool:
        answer = self.agent("stop", {"runs_dir": self.runs_dir, "run_id": run_id})
        return bool(answer["sent"])

    def fetch(self, run_id: str, dest: Path) -> base.Fetched:
        answer = self.agent("listing", {"runs_dir": self.runs_dir, "run_id": run_id})
        names = [str(n) for n in answer["files"]]
        dest.mkdir(parents=True, exist_ok=True)
        self.conn.get_many(f"{self.runs_dir}/{run_id}", names, dest)
        return verify_copy(dest, dest)

    def release(self) -> base.Released:
        return base.Released(action="none", verified=True, detail="ssh host: nothing to release")

    def close(self) -> None:
        self.conn.close()


def _local_cache() -> Path:
    import tempfile

    path = Path(tempfile.gettempdir()) / "proctor-ship"
    path.mkdir(parents=True, exist_ok=True)
    return path


def decode_answer(
    name: str, command: str, rc: int, out: bytes, err: bytes, *, from_stderr: bool = False
) -> dict[str, Any]:
    """The agent prints one JSON line last: {"ok": true, ...} or {"ok": false, "error": ...}."""
    text = (err if from_stderr else out).decode(errors="replace").strip().splitlines()
    last = text[-1] if text else ""
    try:
        answer = json.loads(last)
    except json.JSONDecodeError:
        detail = err.decode(errors="replace").strip().splitlines()
        raise TargetUnavailable(
            f"{name}: proctor agent {command} failed (exit {rc}): "
            f"{detail[-1] if detail else 'no output'}",
            hint="check the far python has psutil and pydantic (--remote-python)",
        ) from None
    if not isinstance(answer, dict):
        raise TargetUnavailable(f"{name}: proctor agent {command}: unexpected answer")
    if not answer.get("ok"):
        raise _error_from(answer)
    return answer


def _error_from(answer: dict[str, Any]) -> ProctorError:
    import proctor.errors as errors
    import proctor.source.archive as archive

    cls_name = str(answer.get("type") or "ResultUnknown")
    cls = getattr(errors, cls_name, None) or getattr(archive, cls_name, None)
    cls = cls or errors.ResultUnknown
    if not (isinstance(cls, type) and issubclass(cls, ProctorError)):
        cls = errors.ResultUnknown
    message, hint = str(answer.get("error")), answer.get("hint")
    if issubclass(cls, errors.NotAuthorised):
        return errors.UsageError(message, hint=hint)
    return cls(message, hint=hint)


def _synced(answer: dict[str, Any], action: str, archive_sha256: str | None) -> base.SyncedSource:
    return base.SyncedSource(
        source_id=answer.get("source_id"),
        checkout=str(answer["path"]),
        action=action,  # type: ignore[arg-type]
        verified=bool(answer.get("matches")),
        summary=str(answer.get("summary")),
        dirty=bool(answer.get("dirty")),
        untracked=list(answer.get("untracked") or []),
        modified=list(answer.get("modified") or []),
        archive_sha256=archive_sha256,
    )


def _status(answer: dict[str, Any]) -> base.RunStatus:
    return base.RunStatus(
        state=answer["state"],
        exit_code=answer.get("exit_code"),
        exit_signal=answer.get("exit_signal"),
        wrapper_alive=bool(answer.get("wrapper_alive")),
        outcome=answer.get("outcome"),
        exit_reason=answer.get("exit_reason"),
    )


__all__ = [
    "SshConnection",
    "SshOptions",
    "SshTarget",
    "decode_answer",
    "parse_ssh_url",
    "proctor_bundle",
]

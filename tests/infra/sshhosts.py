"""Real OpenSSH hosts for tests, one per network namespace (see test-hosts-here.md).

Each host is a namespace joined to the root namespace by a veth pair with its own /30
in the first free 10.P.Q.0/24 of 10.231-239 (root side 10.P.Q.1, host side 10.P.Q.2; the rest of
the /24 blackholed), chosen by probing the machine's addresses and routes; running its own `sshd -D` under
`unshare --uts` (so `hostname` differs per host), key login only. The hosts share the
machine's filesystem and process table: a host's "volume" is a directory (`workspace`).

Use from a test:

    from tests.infra.sshhosts import ssh_hosts, ssh_hosts_factory  # noqa: F401  (fixtures)

    def test_x(ssh_hosts: SshHostLab) -> None:
        a, b = ssh_hosts.hosts
        conn = await asyncssh.connect(**a.connect_kwargs())

or build a lab directly: `with SshHostLab(tmp_path, count=3) as lab: ...`.
Everything skips (pytest.skip) when not root or sshd is missing (.ci/install-sshd.sh).
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.infra import Lifecycle, started

SSHD = "/usr/sbin/sshd"
# Candidate /24s for the hosts, tried in order: 10.231.0.0/24 ... 10.239.255.0/24. A host takes
# the first /24 that no address or route on this machine overlaps (another project's hosts in
# the same range made host-key errors here), and blackholes the rest of its /24 itself.
NET_POOL = tuple(f"10.{second}" for second in range(231, 240))
NS_PREFIX = "proctor-ssh-"
VETH_PREFIX = "pxs"
LOCK_PATH = Path("/run/lock/proctor-sshhosts.lock")


def unavailable_reason() -> str | None:
    """Why network-namespace SSH hosts cannot run here, or None when they can."""
    if os.geteuid() != 0:
        return "needs root (network namespaces)"
    if not os.path.exists(SSHD):
        return "openssh-server not installed (run .ci/install-sshd.sh)"
    for tool in ("ip", "unshare", "ssh-keygen"):
        if shutil.which(tool) is None:
            return f"{tool} not installed (run .ci/install-sshd.sh)"
    return None


def _run(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    if check and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed: {proc.stderr.strip()}")
    return proc


def _ns(ns: str, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return _run("ip", "netns", "exec", ns, *argv, check=check)


@contextlib.contextmanager
def _machine_lock() -> Iterator[None]:
    # Index allocation and the shared blackhole route are machine-wide: serialise them
    # against other test sessions on the same machine.
    LOCK_PATH.parent.mkdir(parents=True, exist_ok=True)
    with LOCK_PATH.open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


_ROUTE_TYPES = {
    "unicast",
    "local",
    "broadcast",
    "multicast",
    "throw",
    "unreachable",
    "prohibit",
    "blackhole",
    "nat",
    "anycast",
}


def _taken_networks() -> list[ipaddress.IPv4Network]:
    """Networks this machine already uses: its addresses and the destinations of its routes in
    every table. Routes broader than a /16 (a default route, a VPN's 10/8) are left out: a
    host's /30 and its /24 blackhole are more specific, so they do not disturb them."""
    taken: list[ipaddress.IPv4Network] = []
    for match in re.finditer(r"\binet (\S+)", _run("ip", "-o", "-4", "addr", "show").stdout):
        taken.append(ipaddress.IPv4Interface(match.group(1)).network)
    for line in _run("ip", "-4", "route", "show", "table", "all").stdout.splitlines():
        words = line.split()
        if not words:
            continue
        dest = words[1] if words[0] in _ROUTE_TYPES and len(words) > 1 else words[0]
        try:
            net = ipaddress.ip_network(dest, strict=False)
        except ValueError:  # "default" and the like
            continue
        if isinstance(net, ipaddress.IPv4Network) and net.prefixlen >= 16:
            taken.append(net)
    return taken


def _free_subnets(count: int) -> list[str]:
    """`count` free /24s from NET_POOL, as "10.P.Q" prefixes."""
    taken = _taken_networks()
    free: list[str] = []
    for prefix in NET_POOL:
        for third in range(1, 255):
            candidate = ipaddress.ip_network(f"{prefix}.{third}.0/24")
            if not any(candidate.overlaps(net) for net in taken):
                free.append(f"{prefix}.{third}")
                if len(free) == count:
                    return free
    raise RuntimeError(f"no {count} free /24 subnets in 10.231-239.x for SSH test hosts")


def _used_indices() -> set[int]:
    used: set[int] = set()
    for name in _run("ip", "netns", "list").stdout.split():
        if name.startswith(NS_PREFIX) and name[len(NS_PREFIX) :].isdigit():
            used.add(int(name[len(NS_PREFIX) :]))
    for name in os.listdir("/sys/class/net"):
        if name.startswith(VETH_PREFIX) and name[len(VETH_PREFIX) : -1].isdigit():
            used.add(int(name[len(VETH_PREFIX) : -1]))
    return used


def zombie_or_gone(pid: int) -> bool:
    try:
        status: str = psutil.Process(pid).status()
    except psutil.NoSuchProcess:
        return True
    return bool(status == psutil.STATUS_ZOMBIE)


@dataclass
class SshHost:
    """One namespace host. `address` is where clients connect (port 22)."""

    index: int  # names the namespace and the veth pair
    subnet: str  # "10.P.Q": the host is 10.P.Q.2, its gateway 10.P.Q.1
    name: str
    dir: Path
    workspace: Path
    client_key: Path
    known_hosts: Path
    user: str = "root"
    port: int = 22
    sshd: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    cut_now: bool = False
    blackholed: bool = False  # this lab added the /24 blackhole route and removes it
    # Derived from index and subnet: the namespace, both ends of the /30, the veth pair's ends.
    netns: str = field(init=False)
    address: str = field(init=False)
    gateway: str = field(init=False)
    veth_root: str = field(init=False)
    veth_host: str = field(init=False)

    def __post_init__(self) -> None:
        self.netns = f"{NS_PREFIX}{self.index}"
        self.address, self.gateway = f"{self.subnet}.2", f"{self.subnet}.1"
        self.veth_root, self.veth_host = (
            f"{VETH_PREFIX}{self.index}r",
            f"{VETH_PREFIX}{self.index}h",
        )

    @property
    def hostname(self) -> str:
        return self.name

    def connect_kwargs(self, **extra: Any) -> dict[str, Any]:
        """Keyword arguments for `asyncssh.connect(**host.connect_kwargs())`."""
        kw: dict[str, Any] = {
            "host": self.address,
            "port": self.port,
            "username": self.user,
            "client_keys": [str(self.client_key)],
            "known_hosts": str(self.known_hosts),
        }
        kw.update(extra)
        return kw

    def ssh_argv(self, *command: str, config: Path | None = None) -> list[str]:
        """An OpenSSH client command line for this host (BatchMode, pinned known_hosts)."""
        opts = [
            "-o",
            "BatchMode=yes",
            "-o",
            f"UserKnownHostsFile={self.known_hosts}",
            "-o",
            "StrictHostKeyChecking=yes",
            "-o",
            "ConnectTimeout=5",
            "-i",
            str(self.client_key),
        ]
        if config is not None:
            opts = ["-F", str(config), *opts]
        return ["ssh", *opts, f"{self.user}@{self.address}", *command]


class SshHostLab(Lifecycle):
    """N namespace hosts with one client keypair and one known_hosts; a context manager."""

    def __init__(self, base: Path, count: int = 2, name_prefix: str = "host") -> None:
        self.base = Path(base)
        self.count = count
        self.name_prefix = name_prefix
        self.hosts: list[SshHost] = []
        self.client_key = self.base / "client" / "id_ed25519"
        self.known_hosts = self.base / "client" / "known_hosts"
        self.ssh_config = self.base / "client" / "ssh_config"
        self._torn_down = False

    # -- lifecycle -----------------------------------------------------------------
    def start(self) -> list[SshHost]:
        reason = unavailable_reason()
        if reason:
            raise RuntimeError(f"SSH test hosts unavailable: {reason}")
        (self.base / "client").mkdir(parents=True, exist_ok=True, mode=0o700)
        _run(
            "ssh-keygen",
            "-q",
            "-t",
            "ed25519",
            "-N",
            "",
            "-C",
            "proctor-test-client",
            "-f",
            str(self.client_key),
        )
        try:
            with _machine_lock():
                used = _used_indices()
                free = [i for i in range(1, 10_000) if i not in used][: self.count]
                subnets = _free_subnets(self.count)
                for n, (index, subnet) in enumerate(zip(free, subnets, strict=True)):
                    self.hosts.append(self._make_host(index, subnet, f"{self.name_prefix}{n}"))
                    self._network(self.hosts[-1])
            for host in self.hosts:
                self._start_sshd(host)
            self._write_client_files()
            for host in self.hosts:
                self._wait_listening(host)
        except BaseException:
            self.teardown()
            raise
        return self.hosts

    def _make_host(self, index: int, subnet: str, name: str) -> SshHost:
        d = self.base / name
        (d / "workspace").mkdir(parents=True, exist_ok=True)
        d.chmod(0o700)
        _run(
            "ssh-keygen",
            "-q",
            "-t",
            "ed25519",
            "-N",
            "",
            "-C",
            name,
            "-f",
            str(d / "ssh_host_ed25519_key"),
        )
        return SshHost(
            index=index,
            subnet=subnet,
            name=name,
            dir=d,
            workspace=d / "workspace",
            client_key=self.client_key,
            known_hosts=self.known_hosts,
        )

    def _network(self, h: SshHost) -> None:
        # Nothing for an absent address of this /24 may fall through to the default route.
        _run("ip", "route", "add", "blackhole", f"{h.subnet}.0/24")
        h.blackholed = True
        _run("ip", "netns", "add", h.netns)
        _run("ip", "link", "add", h.veth_root, "type", "veth", "peer", "name", h.veth_host)
        _run("ip", "link", "set", h.veth_host, "netns", h.netns)
        _run("ip", "addr", "add", f"{h.gateway}/30", "dev", h.veth_root)
        _run("ip", "link", "set", h.veth_root, "up")
        _ns(h.netns, "ip", "link", "set", "lo", "up")
        _ns(h.netns, "ip", "addr", "add", f"{h.address}/30", "dev", h.veth_host)
        _ns(h.netns, "ip", "link", "set", h.veth_host, "up")
        # A permanent neighbour entry makes a later cut look like a pulled cable
        # (connects time out) instead of an ARP failure (connects fail at once).
        mac = _ns(h.netns, "cat", f"/sys/class/net/{h.veth_host}/address").stdout.strip()
        _run(
            "ip",
            "neigh",
            "replace",
            h.address,
            "lladdr",
            mac,
            "dev",
            h.veth_root,
            "nud",
            "permanent",
        )

    def _start_sshd(self, h: SshHost) -> None:
        conf = h.dir / "sshd_config"
        (h.dir / "authorized_keys").write_text(
            Path(f"{self.client_key}.pub").read_text(), encoding="utf-8"
        )
        conf.write_text(
            "\n".join(
                [
                    f"ListenAddress {h.address}",
                    f"Port {h.port}",
                    f"HostKey {h.dir / 'ssh_host_ed25519_key'}",
                    f"PidFile {h.dir / 'sshd.pid'}",
                    f"AuthorizedKeysFile {h.dir / 'authorized_keys'}",
                    "PermitRootLogin prohibit-password",
                    "PubkeyAuthentication yes",
                    "PasswordAuthentication no",
                    "KbdInteractiveAuthentication no",
                    "StrictModes no",
                    "UsePAM no",
                    "UseDNS no",
                    "PrintMotd no",
                    "MaxStartups 64",
                    "MaxSessions 64",
                    "Subsystem sftp internal-sftp",
                    "",
                ]
            ),
            encoding="utf-8",
        )
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # privilege separation dir
        log = (h.dir / "sshd.log").open("ab")
        with log:
            h.sshd = subprocess.Popen(
                [
                    "ip",
                    "netns",
                    "exec",
                    h.netns,
                    "unshare",
                    "--uts",
                    "sh",
                    "-c",
                    'hostname "$0" && exec "$1" -D -e -f "$2"',
                    h.name,
                    SSHD,
                    str(conf),
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
            )

    def _wait_listening(self, h: SshHost, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert h.sshd is not None
            if h.sshd.poll() is not None:
                log = (h.dir / "sshd.log").read_text(errors="replace").strip()
                raise RuntimeError(f"sshd for {h.name} exited {h.sshd.returncode}: {log}")
            with contextlib.suppress(OSError), socket.create_connection((h.address, h.port), 0.5):
                return
            time.sleep(0.02)
        raise RuntimeError(f"sshd for {h.name} not listening on {h.address}:22 in {timeout}s")

    def _write_client_files(self) -> None:
        lines, cfg = [], []
        for h in self.hosts:
            pub = (h.dir / "ssh_host_ed25519_key.pub").read_text().split()
            lines.append(f"{h.address} {pub[0]} {pub[1]}\n")
            cfg.append(
                f"Host {h.name}\n  HostName {h.address}\n  User {h.user}\n"
                f"  IdentityFile {self.client_key}\n  IdentitiesOnly yes\n"
                f"  UserKnownHostsFile {self.known_hosts}\n  StrictHostKeyChecking yes\n"
                "  BatchMode yes\n  ServerAliveInterval 1\n  ServerAliveCountMax 2\n"
            )
        self.known_hosts.write_text("".join(lines), encoding="utf-8")
        self.ssh_config.write_text("".join(cfg), encoding="utf-8")

    # -- network faults ----------------------------------------------------------
    def cut(self, host: SshHost) -> None:
        """Pull the cable: open connections stall, new connects time out, processes live."""
        _ns(host.netns, "ip", "link", "set", host.veth_host, "down")
        host.cut_now = True

    def restore(self, host: SshHost) -> None:
        _ns(host.netns, "ip", "link", "set", host.veth_host, "up")
        host.cut_now = False

    # -- teardown ------------------------------------------------------------------
    def namespace_pids(self, host: SshHost) -> list[int]:
        out = _run("ip", "netns", "pids", host.netns, check=False)
        return [int(p) for p in out.stdout.split() if p.isdigit()]

    def teardown(self) -> None:
        """Kill everything in each namespace, then delete namespaces and links. Idempotent."""
        if self._torn_down:
            return
        self._torn_down = True
        errors: list[str] = []
        for h in self.hosts:
            try:
                self._kill_namespace(h)
            except Exception as exc:  # keep tearing the others down
                errors.append(f"{h.name}: {exc}")
            _run("ip", "netns", "del", h.netns, check=False)
            if os.path.exists(f"/sys/class/net/{h.veth_root}"):
                _run("ip", "link", "del", h.veth_root, check=False)
            if h.blackholed:
                _run("ip", "route", "del", "blackhole", f"{h.subnet}.0/24", check=False)
        if errors:
            raise RuntimeError("SSH host teardown incomplete: " + "; ".join(errors))

    def stop(self) -> None:
        """The teardown, as a `with` block ends it."""
        self.teardown()

    def _kill_namespace(self, h: SshHost) -> None:
        for sig, wait in ((signal.SIGTERM, 2.0), (signal.SIGKILL, 3.0)):
            pids = self.namespace_pids(h)
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
            if h.sshd is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    h.sshd.wait(timeout=0.2)  # reap our own child
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline:
                if all(zombie_or_gone(p) for p in self.namespace_pids(h)):
                    return
                time.sleep(0.05)
        left = [p for p in self.namespace_pids(h) if not zombie_or_gone(p)]
        if left:
            raise RuntimeError(f"processes {left} survive in namespace {h.netns}")


def require_lab(base: Path, count: int = 2) -> SshHostLab:
    """A started lab, or pytest.skip with the reason it cannot run here."""
    return started("SSH test hosts", unavailable_reason(), lambda: SshHostLab(base, count))


@pytest.fixture
def ssh_hosts_factory(tmp_path: Path) -> Iterator[Callable[[int], SshHostLab]]:
    """`make(count)` -> a started lab of `count` hosts; all torn down after the test."""
    labs: list[SshHostLab] = []

    def make(count: int) -> SshHostLab:
        lab = require_lab(tmp_path / f"sshhosts{len(labs)}", count)
        labs.append(lab)
        return lab

    try:
        yield make
    finally:
        for lab in labs:
            lab.teardown()


@pytest.fixture
def ssh_hosts(ssh_hosts_factory: Callable[[int], SshHostLab]) -> SshHostLab:
    """Two started namespace hosts, torn down after the test (import `ssh_hosts_factory` too)."""
    return ssh_hosts_factory(2)

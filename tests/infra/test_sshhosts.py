"""The network-namespace SSH hosts behave like real remote machines."""

from __future__ import annotations

import asyncio
import hashlib
import os
import subprocess
import time
from pathlib import Path

import asyncssh
import pytest

from tests.infra.sshhosts import SshHostLab, ssh_hosts, ssh_hosts_factory, zombie_or_gone

pytestmark = pytest.mark.sshhosts
__all__ = ["ssh_hosts", "ssh_hosts_factory"]  # fixtures, imported for use here


def _run(coro: object) -> object:
    return asyncio.run(coro)  # type: ignore[arg-type]


def test_two_hosts_exec_with_exit_status(ssh_hosts: SshHostLab) -> None:
    async def go() -> list[tuple[int | None, str]]:
        out = []
        for h in ssh_hosts.hosts:
            async with asyncssh.connect(**h.connect_kwargs()) as conn:
                res = await conn.run("hostname; exit 7", check=False)
                out.append((res.exit_status, str(res.stdout).strip()))
        return out

    results = _run(go())
    assert results == [(7, "host0"), (7, "host1")]


def test_openssh_client_and_config(ssh_hosts: SshHostLab) -> None:
    a = ssh_hosts.hosts[0]
    res = subprocess.run(
        ["ssh", "-F", str(ssh_hosts.ssh_config), a.name, "echo ok; exit 3"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert res.returncode == 3 and res.stdout.strip() == "ok"


def test_sftp_put_get_sha256(ssh_hosts: SshHostLab, tmp_path: Path) -> None:
    h = ssh_hosts.hosts[1]
    src = tmp_path / "payload.bin"
    src.write_bytes(os.urandom(3 * 1024 * 1024 + 17))
    back = tmp_path / "back.bin"
    remote = str(h.workspace / "payload.bin")

    async def go() -> str:
        async with asyncssh.connect(**h.connect_kwargs()) as conn:
            async with conn.start_sftp_client() as sftp:
                await sftp.put(str(src), remote)
                await sftp.get(remote, str(back))
            res = await conn.run(f"sha256sum {remote}", check=True)
            return str(res.stdout).split()[0]

    remote_sum = _run(go())
    want = hashlib.sha256(src.read_bytes()).hexdigest()
    assert remote_sum == want
    assert hashlib.sha256(back.read_bytes()).hexdigest() == want


def test_cut_times_out_connects_and_restore_brings_it_back(ssh_hosts: SshHostLab) -> None:
    a, b = ssh_hosts.hosts

    async def go() -> None:
        async with asyncssh.connect(**a.connect_kwargs()) as conn:
            ssh_hosts.cut(a)
            # An open connection stalls rather than failing; a new connect times out
            # (a pulled cable, not a refusal). Kept short: TCP backs off on a long outage.
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(conn.run("true"), timeout=1)
            with pytest.raises(asyncio.TimeoutError):
                await asyncssh.connect(**a.connect_kwargs(connect_timeout=1))
            # The other host is unaffected.
            async with asyncssh.connect(**b.connect_kwargs(connect_timeout=30)) as other:
                assert (await other.run("exit 0")).exit_status == 0
            ssh_hosts.restore(a)
            res = await asyncio.wait_for(conn.run("echo back", check=True), timeout=20)
            assert str(res.stdout).strip() == "back"
        async with asyncssh.connect(**a.connect_kwargs(connect_timeout=30)) as again:
            assert (await again.run("exit 5")).exit_status == 5

    _run(go())


def test_detached_job_survives_cut(ssh_hosts: SshHostLab) -> None:
    a = ssh_hosts.hosts[0]
    marker = a.workspace / "done"

    async def start() -> None:
        async with asyncssh.connect(**a.connect_kwargs()) as conn:
            cmd = f"setsid nohup sh -c 'sleep 1; echo 0 > {marker}' >/dev/null 2>&1 &"
            await conn.run(cmd, check=True)

    _run(start())
    ssh_hosts.cut(a)
    try:
        # It finishes while the cable is out (polled: a fixed pause can be short under load).
        deadline = time.monotonic() + 60
        while not (marker.exists() and marker.read_text().strip() == "0"):
            assert time.monotonic() < deadline, "the detached job did not finish while cut"
            time.sleep(0.1)
    finally:
        ssh_hosts.restore(a)


def test_teardown_leaves_no_namespace_or_process(ssh_hosts_factory: object) -> None:
    lab: SshHostLab = ssh_hosts_factory(2)  # type: ignore[operator]
    h = lab.hosts[0]

    async def start_sleeper() -> int:
        async with asyncssh.connect(**h.connect_kwargs()) as conn:
            res = await conn.run("setsid nohup sleep 300 >/dev/null 2>&1 & echo $!", check=True)
            return int(str(res.stdout).strip())

    sleeper = int(_run(start_sleeper()))  # type: ignore[call-overload]
    sshd_pids = [pid for host in lab.hosts for pid in lab.namespace_pids(host)]
    assert sleeper in sshd_pids
    names = {host.netns for host in lab.hosts}
    links = {host.veth_root for host in lab.hosts}
    lab.teardown()
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert not names & {line.split()[0] for line in listed.splitlines() if line}
    assert not links & set(os.listdir("/sys/class/net"))
    assert all(zombie_or_gone(pid) for pid in sshd_pids)
    lab.teardown()  # idempotent


def test_hosts_avoid_networks_already_on_the_machine(tmp_path: Path) -> None:
    """Another host in the same range (here: a veth link holding two /24s, and a /16 blackhole
    of someone else's) is probed and avoided, and teardown leaves what the lab did not make."""
    import ipaddress

    from tests.infra.sshhosts import require_lab

    link = f"pxd{os.getpid() % 100000}"
    foreign = [ipaddress.ip_network("10.231.1.0/24"), ipaddress.ip_network("10.231.2.0/24")]
    subprocess.run(
        ["ip", "link", "add", link, "type", "veth", "peer", "name", f"{link}p"], check=True
    )
    try:
        for net in foreign:
            subprocess.run(["ip", "addr", "add", f"{net[1]}/24", "dev", link], check=True)
        subprocess.run(["ip", "route", "add", "blackhole", "10.233.0.0/16"], check=True)
        lab = require_lab(tmp_path, count=2)
        try:
            for h in lab.hosts:
                mine = ipaddress.ip_network(f"{h.subnet}.0/24")
                assert not any(mine.overlaps(net) for net in foreign), h.subnet
                assert not mine.overlaps(ipaddress.ip_network("10.233.0.0/16")), h.subnet
            res = subprocess.run(
                lab.hosts[0].ssh_argv("hostname"),
                capture_output=True,
                text=True,
                timeout=30,
                check=False,
            )
            assert (res.returncode, res.stdout.strip()) == (0, "host0"), res.stderr
        finally:
            lab.teardown()
        addrs = subprocess.run(
            ["ip", "-o", "-4", "addr", "show", "dev", link],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert "10.231.1.1/24" in addrs and "10.231.2.1/24" in addrs
        routes = subprocess.run(
            ["ip", "-4", "route", "show", "table", "all"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert "blackhole 10.233.0.0/16" in routes
        assert not any(f"{h.subnet}.0/24" in routes for h in lab.hosts)
    finally:
        subprocess.run(["ip", "route", "del", "blackhole", "10.233.0.0/16"], check=False)
        subprocess.run(["ip", "link", "del", link], check=False)

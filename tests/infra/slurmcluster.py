"""A real Slurm cluster for tests: munged, slurmctld and N slurmd on 127.0.0.1.

Debian's Slurm supports several slurmd on one machine (`slurmd -N n1`, each node with
its own `Port=`), so N nodes need no namespaces (see slurm-here.md for the pitfalls this
follows). Client commands need `cluster.env` (it sets SLURM_CONF).

    from tests.infra.slurmcluster import slurm_cluster, slurm_nodes  # noqa: F401  (fixtures)

    def test_x(slurm_cluster: SlurmCluster) -> None:
        job = slurm_cluster.sbatch("-N2", "--wrap", "srun hostname")
        info = slurm_cluster.wait_job(job)

Skips (pytest.skip) when not root or the packages are missing (.ci/install-slurm.sh).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

import psutil
import pytest

from proctor.targets.slurm.scheduler import parse_kv
from tests.fixtures.fake_openai_server import free_port
from tests.infra import Lifecycle, started

BINARIES = ("munged", "slurmctld", "slurmd", "sbatch", "srun", "sinfo", "squeue", "scontrol")
FINISHED = {
    "COMPLETED",
    "FAILED",
    "CANCELLED",
    "TIMEOUT",
    "NODE_FAIL",
    "PREEMPTED",
    "OUT_OF_MEMORY",
    "BOOT_FAIL",
    "DEADLINE",
}


def unavailable_reason() -> str | None:
    if os.geteuid() != 0:
        return "needs root (munged and slurmd run as root here)"
    for b in BINARIES:
        if shutil.which(b) is None and not os.path.exists(f"/usr/sbin/{b}"):
            return f"{b} not installed (run .ci/install-slurm.sh)"
    return None


def _binary(name: str) -> str:
    return shutil.which(name) or f"/usr/sbin/{name}"


def _gone(proc: subprocess.Popen[bytes]) -> bool:
    if proc.poll() is not None:
        return True
    try:
        return bool(psutil.Process(proc.pid).status() == psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return True


class SlurmCluster(Lifecycle):
    """Controller + `nodes` compute nodes; a context manager. Files live under `base`."""

    def __init__(self, base: Path, nodes: int = 2, cpus_per_node: int = 2) -> None:
        self.base = Path(base)
        self.node_names = [f"n{i}" for i in range(1, nodes + 1)]
        self.cpus_per_node = cpus_per_node
        self.conf = self.base / "slurm.conf"
        self.munge_socket = self.base / "munge" / "munge.socket"
        self.jobcomp_log = self.base / "jobcomp.txt"
        self.log_dir = self.base / "log"
        self.cluster_name = f"pt{secrets.token_hex(3)}"
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self._stopped = False

    # -- start -------------------------------------------------------------------
    def start(self, timeout: float = 120.0) -> None:
        reason = unavailable_reason()
        if reason:
            raise RuntimeError(f"Slurm test cluster unavailable: {reason}")
        try:
            self._write_files()
            self._start_munge()
            self._spawn("slurmctld", [_binary("slurmctld"), "-D", "-c", "-f", str(self.conf)])
            for n in self.node_names:
                self._spawn(f"slurmd-{n}", [_binary("slurmd"), "-D", "-N", n, "-f", str(self.conf)])
            self.wait_idle(timeout)
        except BaseException:
            self.stop()
            raise

    def _write_files(self) -> None:
        for d in (self.base, self.base / "munge", self.base / "state", self.log_dir):
            d.mkdir(parents=True, exist_ok=True)
            d.chmod(0o755)  # munged refuses a socket dir it considers insecure or too closed
        for n in self.node_names:
            (self.base / "spool" / n).mkdir(parents=True, exist_ok=True)
        key = self.base / "munge" / "munge.key"
        key.write_bytes(secrets.token_bytes(1024))
        key.chmod(0o400)
        b = self.base
        lines = [
            f"ClusterName={self.cluster_name}",
            "SlurmctldHost=localhost",
            f"SlurmctldPort={free_port()}",
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={self.munge_socket}",
            f"StateSaveLocation={b / 'state'}",
            f"SlurmdSpoolDir={b / 'spool'}/%n",
            f"SlurmctldPidFile={b / 'slurmctld.pid'}",
            f"SlurmdPidFile={b / 'slurmd-%n.pid'}",
            f"SlurmctldLogFile={self.log_dir / 'slurmctld.log'}",
            f"SlurmdLogFile={self.log_dir / 'slurmd-%n.log'}",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "MpiDefault=none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_CPU",
            "SchedulerParameters=batch_sched_delay=0",
            "MinJobAge=600",
            "JobCompType=jobcomp/filetxt",
            f"JobCompLoc={self.jobcomp_log}",
            "SlurmdParameters=config_overrides",
            "MailProg=/bin/true",
            "ReturnToService=2",
            "SlurmctldTimeout=30",
            "SlurmdTimeout=30",
        ]
        for n in self.node_names:
            lines.append(
                f"NodeName={n} NodeHostname=localhost NodeAddr=127.0.0.1 Port={free_port()} "
                f"CPUs={self.cpus_per_node} RealMemory=1000 State=UNKNOWN"
            )
        lines.append(
            f"PartitionName=debug Nodes={','.join(self.node_names)} Default=YES "
            "MaxTime=INFINITE State=UP"
        )
        self.conf.write_text("\n".join(lines) + "\n", encoding="utf-8")

    def _start_munge(self) -> None:
        m = self.base / "munge"
        self._spawn(
            "munged",
            [
                _binary("munged"),
                "-F",
                "--force",
                f"--socket={self.munge_socket}",
                f"--key-file={m / 'munge.key'}",
                f"--pid-file={m / 'munged.pid'}",
                f"--seed-file={m / 'munged.seed'}",
                f"--log-file={self.log_dir / 'munged.log'}",
            ],
        )
        deadline = time.monotonic() + 60  # a bound on a hang only: start-up is slow under load
        while not self.munge_socket.exists():
            if _gone(self._procs["munged"]) or time.monotonic() > deadline:
                raise RuntimeError(f"munged did not start: {self._tail('munged')}")
            time.sleep(0.02)

    def _spawn(self, name: str, argv: list[str]) -> None:
        with (self.log_dir / f"{name}.out").open("ab") as out:
            self._procs[name] = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=out,
                env=self.env,
                start_new_session=True,
            )

    def _tail(self, name: str) -> str:
        texts = []
        for f in (self.log_dir / f"{name}.out", self.log_dir / f"{name}.log"):
            if f.exists():
                texts.append(f.read_text(errors="replace")[-1500:])
        return " | ".join(texts).strip()

    # -- client helpers ------------------------------------------------------------
    def run(
        self, *argv: str, check: bool = True, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        """Run a Slurm client command against this cluster."""
        proc = subprocess.run(
            argv, env=self.env, capture_output=True, text=True, timeout=timeout, check=False
        )
        if check and proc.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} exited {proc.returncode}: {proc.stderr.strip()}")
        return proc

    def node_states(self) -> dict[str, str]:
        out = self.run("sinfo", "-h", "-N", "-o", "%N %t", check=False).stdout
        states: dict[str, str] = {}
        for line in out.splitlines():
            parts = line.split()
            if len(parts) == 2:
                states[parts[0]] = parts[1]
        return states

    def wait_idle(self, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for name, proc in self._procs.items():
                if _gone(proc):
                    raise RuntimeError(f"{name} exited: {self._tail(name)}")
            states = self.node_states()
            if all(states.get(n) == "idle" for n in self.node_names):
                return
            time.sleep(0.1)
        raise RuntimeError(f"nodes not idle in {timeout}s: {self.node_states()}")

    def sbatch(self, *args: str, cwd: Path | None = None) -> int:
        """Submit a batch job; returns its id."""
        proc = subprocess.run(
            ["sbatch", "--parsable", *args],
            env=self.env,
            cwd=cwd or self.base,
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"sbatch failed: {proc.stderr.strip()}")
        return int(proc.stdout.strip().split(";")[0])

    def job_info(self, job_id: int) -> dict[str, str]:
        """`scontrol show job -o ID` as a dict (finished jobs stay for MinJobAge=600 s)."""
        out = self.run("scontrol", "show", "job", "-o", str(job_id), check=False)
        return parse_kv(out.stdout) if out.returncode == 0 else {}

    def jobcomp_records(self) -> list[dict[str, str]]:
        """One dict per finished job from the jobcomp/filetxt log."""
        if not self.jobcomp_log.exists():
            return []
        lines = self.jobcomp_log.read_text(errors="replace").splitlines()
        return [parse_kv(line) for line in lines if line.strip()]

    def wait_job(self, job_id: int, timeout: float = 60.0) -> dict[str, str]:
        """Wait until the job reaches a final state; returns its `scontrol` record."""
        deadline = time.monotonic() + timeout
        info: dict[str, str] = {}
        while time.monotonic() < deadline:
            info = self.job_info(job_id)
            if info.get("JobState") in FINISHED:
                return info
            time.sleep(0.1)
        raise RuntimeError(f"job {job_id} not finished in {timeout}s: {info.get('JobState')}")

    # -- stop ----------------------------------------------------------------------
    def stop(self) -> None:
        """Cancel jobs, then stop slurmd, slurmctld and munged. Idempotent."""
        if self._stopped:
            return
        self._stopped = True
        ctld = self._procs.get("slurmctld")
        if ctld is not None and not _gone(ctld):
            # slurmstepd outlives slurmd, so jobs go first.
            jobs = self.run("squeue", "-h", "-o", "%i", check=False).stdout.split()
            if jobs:
                self.run("scancel", *jobs, check=False)
                deadline = time.monotonic() + 15
                while (
                    time.monotonic() < deadline
                    and self.run("squeue", "-h", "-o", "%i", check=False).stdout.split()
                ):
                    time.sleep(0.1)
        order = [f"slurmd-{n}" for n in self.node_names] + ["slurmctld", "munged"]
        for group in (order[:-2], order[-2:-1], order[-1:]):
            procs = [self._procs[name] for name in group if name in self._procs]
            self._terminate(procs)

    @staticmethod
    def _terminate(procs: list[subprocess.Popen[bytes]]) -> None:
        for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 3.0)):
            for p in procs:
                if not _gone(p):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(p.pid, sig)
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline and not all(_gone(p) for p in procs):
                time.sleep(0.05)
            for p in procs:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    p.wait(timeout=0.5)  # reap our children
            if all(_gone(p) for p in procs):
                return

    def pids(self) -> list[int]:
        return [p.pid for p in self._procs.values()]


def require_cluster(base: Path, nodes: int = 2) -> SlurmCluster:
    """A started cluster, or pytest.skip with the reason it cannot run here."""
    return started("Slurm test cluster", unavailable_reason(), lambda: SlurmCluster(base, nodes))


@pytest.fixture
def slurm_nodes() -> int:
    """How many nodes `slurm_cluster` starts: a test module overrides this fixture for another
    count (import it with `slurm_cluster`)."""
    return 2


@pytest.fixture
def slurm_cluster(tmp_path: Path, slurm_nodes: int) -> Iterator[SlurmCluster]:
    """A started cluster of `slurm_nodes` nodes, stopped after the test."""
    cluster = require_cluster(tmp_path / "slurm", slurm_nodes)
    try:
        yield cluster
    finally:
        cluster.stop()


def files_holding(roots: Iterable[Path], values: Iterable[str]) -> list[tuple[str, Path]]:
    """(value, file) for every file under `roots` (a run, a workspace, the cluster's state and
    spool directories) that holds one of `values`."""
    wanted = [v.encode() for v in values]
    found: list[tuple[str, Path]] = []
    for root in roots:
        for path in root.rglob("*"):
            try:
                if not path.is_file() or path.is_socket():
                    continue
                data = path.read_bytes()
            except FileNotFoundError:
                continue  # slurmctld replaces its state files (x.new -> x) as it saves them
            found += [(v.decode(), path) for v in wanted if v in data]
    return found

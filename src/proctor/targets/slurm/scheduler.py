"""Talking to Slurm: sbatch, squeue, scontrol, sacct, scancel, and what their output means.

Job outcomes come from `sacct` where accounting exists; without slurmdbd, from
`scontrol show job` (finished jobs stay for MinJobAge) and the jobcomp/filetxt log.
Every command goes through a LoginHost, so the same code serves local and SSH logins.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from proctor.errors import TargetUnavailable, UsageError
from proctor.targets.slurm.login import LoginHost

#: States in which a job will not run again (Slurm's own list of completed states).
FINAL_STATES = frozenset(
    {
        "COMPLETED",
        "FAILED",
        "CANCELLED",
        "TIMEOUT",
        "NODE_FAIL",
        "PREEMPTED",
        "OUT_OF_MEMORY",
        "BOOT_FAIL",
        "DEADLINE",
        "REVOKED",
        "SPECIAL_EXIT",
    }
)
SACCT_FIELDS = (
    "JobID",
    "JobName",
    "State",
    "ExitCode",
    "Elapsed",
    "ElapsedRaw",
    "NodeList",
    "Reason",
    "Start",
    "End",
    "Timelimit",
    "Partition",
)
_USAGE_HINTS = (
    ("invalid partition", "see the partitions with `sinfo -s`, or set [slurm] partition"),
    ("invalid account", 'pass the account with [slurm] sbatch_args = ["--account=..."]'),
    ("time limit", "ask for a shorter --time or another partition"),
    ("invalid generic resource", "this partition has no GPUs as asked: check --gpus-per-node"),
)


def parse_kv(text: str) -> dict[str, str]:
    """`Key=Value Key2=Value2` (scontrol -o, jobcomp/filetxt) into a dict."""
    out: dict[str, str] = {}
    for token in text.split():
        key, sep, value = token.partition("=")
        if sep:
            out[key] = value
    return out


def elapsed_seconds(text: str | None) -> int | None:
    """Slurm durations `[D-]HH:MM:SS`, `MM:SS`, `MM`; None for UNLIMITED / unknown."""
    if not text or not re.match(r"^[\d:-]+$", text):
        return None
    days = 0
    if "-" in text:
        d, text = text.split("-", 1)
        days = int(d)
    parts = [int(p) for p in text.split(":")]
    while len(parts) < 3:
        parts.insert(0, 0)
    hours, minutes, seconds = parts[-3:]
    return days * 86400 + hours * 3600 + minutes * 60 + seconds


@dataclass
class QueueEntry:
    state: str
    reason: str
    nodes: str
    elapsed: str
    time_limit: str


@dataclass
class Accounting:
    """A job's outcome as Slurm tells it; `source` says which command told it."""

    job_id: int
    state: str
    source: str
    reason: str | None = None
    exit_code: str | None = None
    derived_exit_code: str | None = None
    elapsed: str | None = None
    node_list: str | None = None
    start: str | None = None
    end: str | None = None
    time_limit: str | None = None
    partition: str | None = None
    steps: list[dict[str, Any]] = field(default_factory=list)

    @property
    def final(self) -> bool:
        return self.state in FINAL_STATES

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["elapsed_s"] = elapsed_seconds(self.elapsed)
        out["accounting_source"] = out.pop("source")
        return out


def _none(text: str | None) -> str | None:
    return None if text in (None, "", "None", "(null)") else text


def _state(text: str) -> str:
    # sacct prints "CANCELLED by 0"; squeue/scontrol print the bare word.
    return text.split()[0].upper() if text.strip() else "UNKNOWN"


class Slurm:
    """The Slurm client commands on one login host."""

    def __init__(self, login: LoginHost) -> None:
        self.login = login
        self._sacct_ok: bool | None = None

    def submit(self, script: str, job_env: str, secret_names: Sequence[str] = ()) -> int:
        """sbatch, the job's environment file named to it; the login host's secret variables
        go in that file, not in sbatch's environment (slurmctld saves that on disk)."""
        result = self.login.run_submit(
            ["sbatch", "--parsable", script], job_env, secret_names, timeout=120
        )
        if result.returncode != 0:
            message = result.first_error_line()
            lowered = message.lower()
            for needle, hint in _USAGE_HINTS:
                if needle in lowered:
                    raise UsageError(f"sbatch refused the job: {message}", hint=hint)
            raise TargetUnavailable(
                f"sbatch failed: {message}",
                hint="check the cluster with `sinfo` and `scontrol ping`",
            )
        text = result.stdout.strip().split(";")[0]
        if not text.isdigit():
            raise TargetUnavailable(f"sbatch printed no job id: {result.stdout.strip()[:200]!r}")
        return int(text)

    def queue(self, job_id: int) -> QueueEntry | None:
        """The job as squeue lists it; None once it has left the queue."""
        result = self.login.run(["squeue", "-h", "-j", str(job_id), "-o", "%T|%r|%N|%M|%l"])
        if result.returncode != 0:
            if "invalid job id" in result.stderr.lower():
                return None
            raise TargetUnavailable(f"squeue failed: {result.first_error_line()}")
        for line in result.stdout.splitlines():
            parts = line.strip().split("|")
            if len(parts) == 5:
                return QueueEntry(_state(parts[0]), *parts[1:])
        return None

    def job_info(self, job_id: int) -> dict[str, str]:
        """`scontrol show job -o ID`; empty once Slurm has forgotten the job."""
        result = self.login.run(["scontrol", "show", "job", "-o", str(job_id)])
        return parse_kv(result.stdout) if result.returncode == 0 else {}

    def hostnames(self, node_list: str) -> list[str]:
        if not node_list or node_list in ("(null)", "None"):
            return []
        result = self.login.run(["scontrol", "show", "hostnames", node_list])
        if result.returncode != 0:
            return [node_list]
        return [h for h in result.stdout.split() if h]

    def cancel(self, job_id: int) -> None:
        result = self.login.run(["scancel", str(job_id)])
        if result.returncode != 0 and "already completing" not in result.stderr.lower():
            if "invalid job id" in result.stderr.lower():
                return  # already gone: stop is idempotent
            raise TargetUnavailable(f"scancel {job_id} failed: {result.first_error_line()}")

    # -- outcomes -----------------------------------------------------------------------------
    def accounting(self, job_id: int) -> Accounting | None:
        """The job's state and accounting: sacct where it exists, else scontrol + jobcomp."""
        if self._sacct_ok is not False:
            acct = self._sacct(job_id)
            if acct is not None:
                return acct
        info = self.job_info(job_id)
        comp = self.jobcomp(job_id)
        if not info and not comp:
            return None
        src = info or comp
        acct = Accounting(
            job_id=job_id,
            state=_state(src.get("JobState", "")),
            source="scontrol" if info else "jobcomp",
            reason=_none(info.get("Reason")),
            exit_code=src.get("ExitCode"),
            derived_exit_code=comp.get("DerivedExitCode") or info.get("DerivedExitCode"),
            elapsed=info.get("RunTime") or comp.get("Elapsed"),
            node_list=src.get("NodeList"),
            start=src.get("StartTime"),
            end=src.get("EndTime"),
            time_limit=src.get("TimeLimit"),
            partition=src.get("Partition"),
        )
        if info and comp:
            acct.source = "scontrol+jobcomp"
        return acct

    def _sacct(self, job_id: int) -> Accounting | None:
        result = self.login.run(
            ["sacct", "-j", str(job_id), "-n", "-P", "-o", ",".join(SACCT_FIELDS)]
        )
        if result.returncode != 0:
            if (
                "accounting storage is disabled" in result.stderr.lower()
                or "not found" in result.stderr
            ):
                self._sacct_ok = False
            return None
        self._sacct_ok = True
        return parse_sacct(job_id, result.stdout)

    def jobcomp(self, job_id: int) -> dict[str, str]:
        """This job's line in the jobcomp/filetxt log, where that log is readable."""
        config = self.config()
        if config.get("JobCompType") != "jobcomp/filetxt" or not config.get("JobCompLoc"):
            return {}
        path = config["JobCompLoc"]
        found: dict[str, str] = {}
        text = self.login.read_bytes(path, 0, 64 << 20).decode(errors="replace")
        for line in text.splitlines():
            if f"JobId={job_id} " in line + " ":
                found = parse_kv(line)  # a requeued job has several lines: the last counts
        return found

    def config(self) -> dict[str, str]:
        if not hasattr(self, "_config"):
            result = self.login.run(["scontrol", "show", "config"])
            self._config: dict[str, str] = {}
            for line in result.stdout.splitlines():
                key, sep, value = line.partition("=")
                if sep:
                    self._config[key.strip()] = value.strip()
        return self._config


def parse_sacct(job_id: int, text: str) -> Accounting | None:
    """`sacct -n -P -o <SACCT_FIELDS>` output: the job line plus one line per step."""
    rows = [
        dict(zip(SACCT_FIELDS, line.split("|"), strict=False))
        for line in text.splitlines()
        if line.strip()
    ]
    job = next((r for r in rows if r.get("JobID") == str(job_id)), None)
    if job is None:
        return None
    steps = [
        {
            "step": r["JobID"].split(".", 1)[1],
            "name": r.get("JobName"),
            "state": _state(r.get("State", "")),
            "exit_code": r.get("ExitCode"),
            "elapsed": r.get("Elapsed"),
            "nodes": r.get("NodeList"),
            "source": "sacct",
        }
        for r in rows
        if r.get("JobID", "").startswith(f"{job_id}.")
    ]
    return Accounting(
        job_id=job_id,
        state=_state(job.get("State", "")),
        source="sacct",
        reason=_none(job.get("Reason")),
        exit_code=job.get("ExitCode"),
        elapsed=job.get("Elapsed"),
        node_list=job.get("NodeList"),
        start=job.get("Start"),
        end=job.get("End"),
        time_limit=job.get("Timelimit"),
        partition=job.get("Partition"),
        steps=steps,
    )

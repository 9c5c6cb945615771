"""The Runpod target: a pod acquired through the API, driven as an SSH host, released verified.

`acquire_targets` provisions exactly the resolved PodSpec (or reuses `--pod` ids) through
`pods.acquire`; each pod becomes a RunpodTarget, which is an SshTarget to the pod's public
IP and mapped port 22 plus: the pod's identity in the record (id, GPU model and count,
cost per hour, volume, mount path), the on-pod budget watchdog, and `release()` that stops
(or, only with --allow-terminate, terminates) the pod and verifies the final state through
the API. The API key stays inside RunpodClient: it is in no record, log or far file.

The controller enforces the budget too, not only the watchdog: `start` refuses once it is spent,
and `follow`/`wait` check elapsed time and cost (costPerHr summed over the run's pods) at every
poll; once spent they stop the far job, wait out its grace, and set `limit_reached`, which the
completion turns into exit 4 after fetch and release.
"""

from __future__ import annotations

import contextlib
import shlex
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, Any

from proctor.errors import ProctorError, TimeLimitReached
from proctor.source.identity import SourceIdentity
from proctor.targets import base
from proctor.targets.runpod.budget import Budget, watchdog_argv, watchdog_source
from proctor.targets.runpod.client import RunpodClient
from proctor.targets.runpod.models import NetworkVolume
from proctor.targets.runpod.pods import (
    Acquired,
    CleanupFailed,
    Grants,
    PodSpec,
    acquire,
    release,
)
from proctor.targets.ssh import SshOptions, SshTarget


@dataclass(frozen=True)
class ReleasePolicy:
    keep: bool = False  # --keep
    terminate: bool = False  # --terminate
    allow_terminate: bool = False  # --allow-terminate
    timeout_s: float = 180.0


class _Counting:
    """A byte sink that remembers how much went through (to resume a follow at that offset)."""

    def __init__(self, out: IO[bytes], offset: int) -> None:
        self.out, self.position = out, offset

    def write(self, chunk: bytes) -> int:
        self.position += len(chunk)
        return self.out.write(chunk)

    def flush(self) -> None:
        self.out.flush()


class RunpodTarget:
    """One pod. Everything but describe/prepare/release is the SSH target's, with the
    controller-side budget check around start/follow/wait."""

    kind = "runpod"
    capabilities = frozenset({base.AGENT, base.SETUP, base.WAIT, base.FAR, base.BUDGET})
    poll_s = 1.0  # how often a budgeted follow/wait looks at the job and the budget
    stop_wait_s = 150.0  # after a budget stop: how long to wait for the far job to end

    def __init__(
        self,
        client_factory: Any,
        pod: dict[str, Any],
        ssh: SshTarget,
        policy: ReleasePolicy,
        budget: Budget | None = None,
    ) -> None:
        self._client_factory = client_factory  # () -> RunpodClient; the key lives only there
        self.pod = pod
        self.ssh = ssh
        self.policy = policy
        self.budget = budget
        self.watchdog: dict[str, Any] | None = None
        self.group_cost_per_hr: float | None = None  # all pods of the run; else this pod's
        self.run_rates: list[float | None] = [pod.get("cost_per_hr")]  # every pod of the run
        self.limit_reached: str | None = None  # why the controller stopped the job (exit 4)
        self.released: base.Released | None = None
        self.api_url: str | None = None

    @classmethod
    def from_record(cls, ssh: SshTarget, remote: dict[str, Any]) -> RunpodTarget:
        details = remote["target"].get("details") or {}
        policy = ReleasePolicy(**(details.get("release_policy") or {}))
        api_url = details.get("api_url")
        return cls(
            lambda: RunpodClient(base_url=api_url), dict(details.get("pod") or {}), ssh, policy
        )

    @property
    def reconnects(self) -> int:
        return self.ssh.reconnects

    @property
    def pod_id(self) -> str:
        return str(self.pod["pod_id"])

    def describe(self) -> base.TargetInfo:
        far = self.ssh.describe()
        details = {
            **far.details,
            "pod": self.pod,
            "release_policy": asdict(self.policy),
            "api_url": self.api_url,
        }
        return base.TargetInfo(
            kind="runpod", name=f"runpod://{self.pod_id}", host=far.host, details=details
        )

    def prepare(self) -> base.Prepared:
        prepared = self.ssh.prepare()
        if self.budget is not None and (self.budget.max_time_s or self.budget.max_cost):
            self.watchdog = self.start_watchdog(self.budget)
        return prepared

    def start_watchdog(self, budget: Budget) -> dict[str, Any]:
        """Upload and start the stdlib watchdog detached on the pod; it stops the pod through
        the API (the pod's own RUNPOD_API_KEY) once the budget is spent."""
        ws = self.ssh.workspace
        script = f"{ws}/proctor/watchdog.py"
        state = f"{ws}/proctor/watchdog-{self.pod_id}.json"
        local = Path(tempfile.gettempdir()) / "proctor-ship" / "watchdog.py"
        local.parent.mkdir(parents=True, exist_ok=True)
        local.write_text(watchdog_source(), encoding="utf-8")
        self.ssh.conn.put(local, script)
        assert self.ssh.prepared is not None
        argv = watchdog_argv(
            budget,
            self.pod.get("cost_per_hr"),
            script=script,
            python=self.ssh.prepared.python,
            state_file=state,
        )
        command = (
            f"{self.ssh._shell_prefix()} [ -f /etc/rp_environment ] && . /etc/rp_environment; "
            f"RUNPOD_POD_ID={shlex.quote(self.pod_id)} setsid nohup "
            + " ".join(shlex.quote(a) for a in argv)
            + f" >{shlex.quote(ws)}/proctor/watchdog-{self.pod_id}.log 2>&1 </dev/null & echo $!"
        )
        _, out, _ = self.ssh.conn.run(command, timeout=30)
        return {
            "pid": out.decode().strip(),
            "state_file": state,
            "argv": argv,
            "deadline": budget.deadline(self.pod.get("cost_per_hr")),
        }

    def sync_source(
        self, identity: SourceIdentity, *, existing: str | None = None
    ) -> base.SyncedSource:
        return self.ssh.sync_source(identity, existing=existing)

    def run_setup(self, script: str, checkout: str) -> str:
        return self.ssh.run_setup(script, checkout)

    def agent(
        self, command: str, request: dict[str, Any], timeout: float | None = 300.0
    ) -> dict[str, Any]:
        """A far agent call (workflow commands run directly, e.g. `serve start`)."""
        return self.ssh.agent(command, request, timeout)

    # -- the controller's budget ------------------------------------------------------------
    @property
    def budgeted(self) -> bool:
        b = self.budget
        return b is not None and (b.max_time_s is not None or b.max_cost is not None)

    def cost_per_hr(self) -> float | None:
        if self.group_cost_per_hr is not None:
            return self.group_cost_per_hr
        value = self.pod.get("cost_per_hr")
        return float(value) if value is not None else None

    def price_per_hr(self) -> tuple[float | None, str]:
        """costPerHr summed over the run's pods, as the budget sums it; None when any pod has
        no price (a partial sum would understate the cost)."""
        n = len(self.run_rates)
        where = f"costPerHr from the Runpod API, {n} pod{'s' if n != 1 else ''}"
        if any(r is None for r in self.run_rates):
            return None, where
        return float(sum(float(r) for r in self.run_rates if r is not None)), where

    def budget_spent(self, now: float | None = None) -> str | None:
        """The reason, once the time or cost budget is spent; None while it is not."""
        if self.budget is None:
            return None
        try:
            self.budget.check(now, self.cost_per_hr())
        except TimeLimitReached as error:
            return error.message
        return None

    def budget_view(self, now: float | None = None) -> dict[str, Any] | None:
        """For the completion report: limits, elapsed, spent so far, and the stop reason."""
        b = self.budget
        if b is None:
            return None
        now = time.time() if now is None else now
        rate = self.cost_per_hr()
        return {
            "max_time_s": b.max_time_s,
            "max_cost": b.max_cost,
            "cost_per_hr": rate,
            "elapsed_s": round(now - b.started_at, 1),
            "spent": round(b.spent(now, rate), 4) if rate else None,
            "limit_reached": self.limit_reached,
        }

    def _stop_for_budget(self, run_id: str, reason: str, out: _Counting | None) -> base.RunStatus:
        """Stop the far job (its grace lets a flow tear its server down), wait for its end."""
        self.limit_reached = reason
        # The wait below sees whether it ended; the release stops the pod regardless.
        with contextlib.suppress(ProctorError):
            self.ssh.stop(run_id)
        give_up = time.monotonic() + self.stop_wait_s
        while True:
            if out is not None:
                status = self.ssh.follow(
                    run_id,
                    out,  # type: ignore[arg-type]
                    offset=out.position,
                    until_done=False,
                )
            else:
                status = self.ssh.status(run_id)
            if status.done or time.monotonic() >= give_up:
                return status
            time.sleep(self.poll_s)

    def start(self, job: base.JobSpec) -> base.StartedRun:
        reason = self.budget_spent()
        if reason is not None:
            self.limit_reached = reason
            raise TimeLimitReached(reason, hint="nothing was started; raise the budget")
        job.extra = {**job.extra, "pod": self.pod, "watchdog": self.watchdog}
        return self.ssh.start(job)

    def status(self, run_id: str) -> base.RunStatus:
        return self.ssh.status(run_id)

    def follow(
        self, run_id: str, out: IO[bytes], *, offset: int = 0, until_done: bool = True
    ) -> base.RunStatus:
        if not (until_done and self.budgeted):
            return self.ssh.follow(run_id, out, offset=offset, until_done=until_done)
        counting = _Counting(out, offset)
        while True:
            status = self.ssh.follow(
                run_id,
                counting,  # type: ignore[arg-type]
                offset=counting.position,
                until_done=False,
            )
            if status.done:
                return status
            reason = self.budget_spent()
            if reason is not None:
                return self._stop_for_budget(run_id, reason, counting)
            time.sleep(self.poll_s)

    def wait(self, run_id: str, timeout: float | None = None) -> base.RunStatus:
        if not self.budgeted:
            return self.ssh.wait(run_id, timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            status = self.ssh.wait(run_id, self.poll_s)
            if status.done or (deadline is not None and time.monotonic() >= deadline):
                return status
            reason = self.budget_spent()
            if reason is not None:
                return self._stop_for_budget(run_id, reason, None)

    def stop(self, run_id: str) -> bool:
        return self.ssh.stop(run_id)

    def fetch(self, run_id: str, dest: Path) -> base.Fetched:
        return self.ssh.fetch(run_id, dest)

    def release(self) -> base.Released:
        """Stop (keep, terminate) the pod and verify the final state; once per target, so the
        run's own release and a caller's safety net do not act twice."""
        if self.released is None:
            self.released = self._release()
        return self.released

    def _release(self) -> base.Released:
        p = self.policy
        with self._client_factory() as client:
            try:
                states = release(
                    client,
                    [self.pod_id],
                    keep=p.keep,
                    terminate=p.terminate,
                    allow_terminate=p.allow_terminate,
                    timeout_s=p.timeout_s,
                )
            except CleanupFailed as error:
                return base.Released(
                    "stopped", False, error.one_line(), [s.to_record() for s in error.states]
                )
        action = states[0].action if states else "none"
        detail = ", ".join(f"pod {s.pod_id} {s.desired_status or 'gone'}" for s in states)
        return base.Released(
            action, all(s.verified for s in states), detail, [s.to_record() for s in states]
        )

    def close(self) -> None:
        self.ssh.close()


def acquire_targets(
    client: RunpodClient,
    spec: PodSpec,
    *,
    run_id: str,
    ssh_base: SshOptions,
    volume: NetworkVolume | None = None,
    reuse_ids: list[str] | None = None,
    grants: Grants = Grants(),
    policy: ReleasePolicy = ReleasePolicy(),
    budget: Budget | None = None,
    api_url: str | None = None,
    deadline_s: float = 900.0,
    on_pod: Any = None,
) -> list[RunpodTarget]:
    """Pods ready for SSH (provisioned exactly as `spec`, or reused) as targets.

    The API checks (volume/GPU guards 77, sold out 69, pods stopped on a failed wait) are
    pods.acquire's. Raises NotAuthorised before any request when terminate lacks its grant."""
    if policy.terminate and not policy.allow_terminate:
        from proctor.errors import NotAuthorised

        raise NotAuthorised(
            "--terminate deletes the pod disk; stop keeps it", flag="--allow-terminate"
        )
    deadline = time.time() + (budget.max_time_s if budget and budget.max_time_s else deadline_s)
    acquired: list[Acquired] = acquire(
        client,
        spec,
        run_id=run_id,
        volume=volume,
        deadline=deadline,
        reuse_ids=reuse_ids or [],
        grants=grants,
        on_pod=on_pod,
    )
    base_url = api_url or client.base_url
    targets: list[RunpodTarget] = []
    for item in acquired:
        opts = SshOptions(
            **{
                **asdict(ssh_base),
                "host": item.ssh.host,
                "port": item.ssh.port,
                "user": item.ssh.user,
            }
        )
        if opts.workspace is None:
            opts.workspace = item.pod.volumeMountPath or spec.volume_mount_path
        pod = item.to_record()
        ssh = SshTarget(opts)
        target = RunpodTarget(lambda: RunpodClient(base_url=base_url), pod, ssh, policy, budget)
        target.api_url = base_url
        targets.append(target)
    for t in targets:
        t.run_rates = [u.pod.get("cost_per_hr") for u in targets]
    if budget is not None and budget.max_cost is not None and targets:
        # The bill is the run's: every pod's controller checks against the summed rate.
        rates = [t.pod.get("cost_per_hr") for t in targets]
        if all(r is not None for r in rates):
            for t in targets:
                t.group_cost_per_hr = float(sum(float(r) for r in rates if r is not None))
    return targets


def release_all(targets: list[RunpodTarget]) -> list[base.Released]:
    out: list[base.Released] = []
    for target in targets:
        try:
            out.append(target.release())
        except ProctorError as error:
            out.append(base.Released("stopped", False, error.one_line()))
    return out


__all__ = ["ReleasePolicy", "RunpodTarget", "acquire_targets", "release_all"]

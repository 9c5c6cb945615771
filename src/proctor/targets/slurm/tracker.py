"""The detached tracker of a Slurm run: `python -m proctor.targets.slurm.tracker GROUP_DIR`.

It is to a Slurm job what the wrapper is to a local command: started in its own session, it
holds the group run (its pid file is `wrapper.pid`, so `proctor runs wait/stop/show` work
unchanged), follows the job through squeue, copies every node's new log lines into the
group log, scancels on SIGTERM (`proctor runs stop`), and when the job is final reads
Slurm's accounting, fetches and verifies every node's run directory, decides the outcome
and writes `exit_code`, the record and the manifest. Starting it again on a group that is
not finished resumes tracking (it is idempotent).
"""

from __future__ import annotations

import contextlib
import json
import signal
import sys
import time
import traceback
from pathlib import Path
from types import FrameType
from typing import Any

from proctor.errors import ExitCode, ProctorError, UsageError
from proctor.record import owner
from proctor.record.finish import now_iso
from proctor.record.manifest import verify_run_manifest
from proctor.record.recorder import Recorder
from proctor.record.rundir import RunDir, write_atomic
from proctor.record.schema import read_view
from proctor.record.status import read_exit_status
from proctor.targets.slurm.login import LoginHost
from proctor.targets.slurm.outcome import GroupOutcome, NodeResult, decide
from proctor.targets.slurm.scheduler import FINAL_STATES, Accounting, Slurm, elapsed_seconds
from proctor.targets.slurm.target import META, login_from_meta, update_record

POLL_S = 0.5
_PROCTOR_CODES = {"timeout": int(ExitCode.TIME_LIMIT), "stopped": int(ExitCode.INTERRUPTED)}
#: After Slurm says the job is final, how long to wait for nodes' exit_code files to appear.
SETTLE_S = 5.0


def _event(name: str, detail: str | None = None) -> dict[str, Any]:
    return {"time": now_iso(), "event": name, "detail": detail}


class LogPump:
    """Copies complete new lines of remote files into the group log, prefixed by source."""

    def __init__(self, login: LoginHost, out: Path) -> None:
        self.login = login
        self.out = out
        self.offsets: dict[str, int] = {}
        self.partial: dict[str, bytes] = {}

    def pump(self, label: str, path: str, final: bool = False) -> int:
        data = self.login.read_bytes(path, self.offsets.get(path, 0))
        if not data and not (final and self.partial.get(path)):
            return 0
        self.offsets[path] = self.offsets.get(path, 0) + len(data)
        buffered = self.partial.pop(path, b"") + data
        lines = buffered.split(b"\n")
        rest = lines.pop()
        if rest and not final:
            self.partial[path] = rest
        elif rest:
            lines.append(rest)
        if lines:
            prefix = f"[{label}] ".encode()
            with self.out.open("ab") as handle:
                handle.write(b"".join(prefix + line + b"\n" for line in lines))
        return len(data)


class Tracker:
    def __init__(self, group_dir: Path) -> None:
        self.run = RunDir(group_dir)
        meta = self.run.read_json(META)
        if meta is None:
            raise UsageError(
                f"no {META} in {group_dir}", hint="give the directory of a submitted Slurm run"
            )
        self.meta: dict[str, Any] = meta
        self.job_id = int(meta["job_id"])
        self.remote = str(meta["remote_run_dir"])
        self.log_name = str(meta.get("log") or "run.log")
        self.login = login_from_meta(meta)
        self.slurm = Slurm(self.login)
        self.pump = LogPump(self.login, self.run.path / self.log_name)
        self.stop_requested = False
        self.cancelled = False
        self.last_state: str | None = None
        self.head_known = not meta.get("multinode")

    def on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.stop_requested = True

    # -- following ------------------------------------------------------------------------
    def follow_logs(self, final: bool = False) -> None:
        for node in self.login.list_dir(f"{self.remote}/nodes"):
            self.pump.pump(node, f"{self.remote}/nodes/{node}/{self.log_name}", final)
        self.pump.pump("slurm", f"{self.remote}/slurm-{self.job_id}.out", final)

    def note_state(self, state: str, reason: str | None, nodes: str | None) -> None:
        if state == self.last_state:
            return
        self.last_state = state
        detail = state + (f" ({reason})" if reason and reason != "None" else "")
        fields: dict[str, Any] = {"add_events": [_event(f"slurm_{state.lower()}", detail)]}
        if state == "RUNNING":
            fields.update(outcome="running", started_at=now_iso())
        # Read as the model of its kind (a group or a server launch), never as a raw dict.
        slurm = {
            **(read_view(self.run.path).section("slurm") or {}),
            "job_id": self.job_id,
            "state": state,
            "reason": reason,
            "node_list": nodes,
        }
        update_record(self.run, slurm=slurm, **fields)

    def note_head(self) -> None:
        """A server launch: record the head node (and its address as the server's host) once
        the batch script has found it. The tracker is the only writer of the record."""
        if self.head_known:
            return
        data = self.login.read_bytes(f"{self.remote}/head.json")
        if not data.strip():
            return
        try:
            head = json.loads(data)
        except ValueError:
            return  # written by tmp + rename, so only a foreign file gets here
        self.head_known = True
        record = read_view(self.run.path)
        fields: dict[str, Any] = {
            "slurm": {**(record.section("slurm") or {}), "head": head},
            "add_events": [_event("head", f"{head.get('node')} at {head.get('address')}")],
        }
        server = record.section("server")
        if server is not None:
            fields["server"] = {
                **server,
                "host": head.get("address"),
                "head_node": head.get("node"),
            }
        update_record(self.run, **fields)

    def track(self) -> Accounting | None:
        while True:
            if self.stop_requested and not self.cancelled:
                self.cancelled = True
                update_record(self.run, add_events=[_event("stop", f"scancel {self.job_id}")])
                self.slurm.cancel(self.job_id)
            entry = self.slurm.queue(self.job_id)
            if entry is not None:
                self.note_state(entry.state, entry.reason, entry.nodes)
            self.note_head()
            self.follow_logs()
            if entry is None or entry.state in FINAL_STATES:
                acct = self.slurm.accounting(self.job_id)
                if acct is None or acct.final:
                    return acct
            time.sleep(POLL_S)

    # -- finishing ------------------------------------------------------------------------
    def expected_nodes(self, acct: Accounting | None) -> list[str]:
        listed = self.login.list_dir(f"{self.remote}/nodes")
        allocated = self.slurm.hostnames(acct.node_list or "") if acct else []
        return sorted(set(allocated) | set(listed))

    def settle(self, nodes: list[str]) -> None:
        deadline = time.monotonic() + SETTLE_S
        while time.monotonic() < deadline:
            if all(self.login.exists(f"{self.remote}/nodes/{n}/manifest.sha256") for n in nodes):
                return
            time.sleep(0.1)

    def fetch_node(self, node: str) -> NodeResult:
        remote = f"{self.remote}/nodes/{node}"
        if not self.login.exists(remote):
            return NodeResult(node, present=False, problem="the node left no run directory")
        local = self.run.path / "nodes" / node
        self.login.fetch_tree(remote, local)
        run = RunDir(local)
        status = read_exit_status(run)
        record = read_view(run.path)
        check = verify_run_manifest(run)
        result = NodeResult(
            node,
            present=True,
            exit_code=status.code if status else None,
            signal=status.signal if status else None,
            outcome=record.outcome if status else "unknown",
            verified=check.verified,
        )
        if status is None:
            result.problem = "no exit status: the node's wrapper did not finish"
        elif not check.present:
            result.problem = "no manifest.sha256"
        elif not check.verified:
            result.problem = f"manifest mismatch: changed {check.changed}, missing {check.missing}"
        return result

    def fetch_extras(self) -> list[dict[str, Any]]:
        out = self.login.read_bytes(f"{self.remote}/slurm-{self.job_id}.out", 0, 16 << 20)
        if out:
            (self.run.path / f"slurm-{self.job_id}.out").write_bytes(out)
        steps: list[dict[str, Any]] = []
        for name in self.login.list_dir(f"{self.remote}/steps"):
            if name.endswith(".exit") and not name.startswith("."):
                text = self.login.read_bytes(f"{self.remote}/steps/{name}").decode().strip()
                steps.append(
                    {"step": name[: -len(".exit")], "exit_code": text, "source": "batch script"}
                )
        return steps

    def finish(self, acct: Accounting | None) -> None:
        # The batch script removes the job's environment file; a job killed before its trap
        # ran leaves it, so it goes here too, before anything is fetched.
        self.login.run(["rm", "-f", f"{self.remote}/.job-env.json"])
        self.follow_logs(final=True)
        nodes = self.expected_nodes(acct)
        self.settle(nodes)
        results = [self.fetch_node(n) for n in nodes]
        self.follow_logs(final=True)
        script_steps = self.fetch_extras()
        if acct is None:
            verdict = GroupOutcome(
                "unknown", None, None, "proctor", f"Slurm no longer knows job {self.job_id}", []
            )
        else:
            verdict = decide(
                acct.state,
                results,
                reason=acct.reason,
                time_limit=acct.time_limit,
                stop_requested=self.cancelled,
            )
        for r in results:
            if verdict.outcome != "failed" or r.node not in verdict.failed_nodes:
                continue
            r.problem = f"{verdict.reason}: {r.problem}" if r.problem else verdict.reason
            if r.exit_code is None:
                # Slurm lost the node: its processes may still run there, out of reach.
                r.outcome = "failed"
        record = read_view(self.run.path)
        slurm = record.section("slurm") or {}
        if acct is not None:
            slurm.update(acct.as_dict())
            if not acct.steps:
                batch = {"step": "batch", "exit_code": acct.exit_code, "source": acct.source}
                slurm["steps"] = [batch, *script_steps]
        slurm["nodes"] = nodes
        elapsed = elapsed_seconds(acct.elapsed) if acct else None
        # Slurm counts whole seconds; the nodes' own records are finer.
        node_durations = [
            d
            for r in results
            if (d := read_view(self.run.path / "nodes" / r.node).duration_s) is not None
        ]
        if node_durations and (elapsed is None or max(node_durations) > elapsed):
            elapsed = max(node_durations)  # type: ignore[assignment]
        self.index_steps(results)
        recorder = Recorder(self.run)
        exit_: dict[str, Any] | None = None
        if verdict.exit_code is not None and verdict.outcome in _PROCTOR_CODES:
            # A stop or a time limit is proctor's status (130, 4), never the nodes' 0 or 143:
            # the file says why, then the command's own status (docs/runs.md).
            own = _PROCTOR_CODES[verdict.outcome]
            recorder.write_exit(own, None, verdict.outcome, (verdict.exit_code, verdict.signal))
            exit_ = {
                "code": own,
                "signal": None,
                "decided_by": "proctor",
                "reason": verdict.outcome,
                "command": {"code": verdict.exit_code, "signal": verdict.signal},
            }
        elif verdict.exit_code is not None:
            recorder.write_exit(verdict.exit_code, verdict.signal)
            exit_ = {
                "code": verdict.exit_code,
                "signal": verdict.signal,
                "decided_by": verdict.decided_by,
            }
        recorder.update(
            outcome=verdict.outcome,
            exit=exit_,
            started_at=record.started_at or (acct.start if acct else None),
            ended_at=now_iso(),
            duration_s=float(elapsed) if elapsed is not None else None,
            slurm=slurm,
            nodes={r.node: {**r.as_dict(), "dir": f"nodes/{r.node}"} for r in results},
            reason=verdict.reason,
            error=verdict.reason if verdict.outcome != "ok" else None,
            add_events=[
                _event("end", f"{verdict.outcome}: {verdict.reason or 'all nodes exit 0'}")
            ],
        )
        recorder.seal(self.meta.get("store_path"), "slurm tracker")

    def index(self) -> None:
        from proctor.store.db import index_quietly

        index_quietly(self.meta.get("store_path"), self.run.path, "slurm tracker")

    def index_steps(self, results: list[NodeResult]) -> None:
        """The runs the job's command made inside its run directory (a bench, eval or sweep
        submitted with --detach: nodes/<node>/steps/<run>/) go in the local store too, once
        their node's directory is verified, as when proctor follows the job itself; before
        the group's end is written, so `proctor runs wait` finds them indexed."""
        from proctor.store.db import index_quietly

        for r in results:
            if not r.verified:
                continue
            for child in sorted((self.run.path / "nodes" / r.node / "steps").glob("*/record.json")):
                index_quietly(self.meta.get("store_path"), child.parent, "slurm tracker")

    def run_all(self) -> int:
        # The group run's owner lock (record/owner.py): handed over by the submitter, or taken
        # anew by a tracker started again (`proctor slurm track`).
        owner.adopt_inherited(self.run.path)
        write_atomic(self.run.wrapper_pid_path, json.dumps(owner.pid_record(pgid=None)))
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self.on_signal)
        # Handlers only help if the signals arrive: a starter may have held them blocked.
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM, signal.SIGINT})
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        if self.run.exit_code_path.exists():
            return 0  # already finished: nothing to resume
        self.index()
        acct = self.track()
        self.finish(acct)
        return 0


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        sys.stderr.write("usage: python -m proctor.targets.slurm.tracker GROUP_DIR\n")
        return 64
    tracker = Tracker(Path(args[0]))
    try:
        return tracker.run_all()
    except ProctorError as error:
        with contextlib.suppress(Exception):
            update_record(
                tracker.run,
                error=error.one_line(),
                add_events=[_event("tracker_failed", error.one_line())],
            )
        sys.stderr.write(f"proctor slurm tracker: {error.one_line()}\n")
        return int(error.exit_code)
    except Exception:
        with contextlib.suppress(Exception):
            update_record(tracker.run, error=traceback.format_exc(limit=5))
        raise


if __name__ == "__main__":
    from proctor.crash import guarded

    sys.exit(guarded("proctor slurm tracker", main))

"""The detached wrapper: `python -m proctor.supervise.wrapper RUN_DIR`.

Started in a new session by the controller, it outlives it. It owns the run:
- starts the command in its own process group, stdout and stderr both on the log file
  (one file description, so the kernel keeps their interleaving in order);
- is the child subreaper, so descendants that left the group are still its to stop;
- waits for the command, enforcing the time limit and honouring SIGTERM/SIGINT (a stop);
- writes `exit_code` atomically the moment the status is known, then the final record,
  GPU peaks, the manifest and the store row.

It imports no pydantic, rich or typer: its start-up cost is paid by every run.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

import psutil

from proctor import redact
from proctor.errors import ExitCode, UsageError
from proctor.record import owner
from proctor.record.finish import iso_at, now_iso
from proctor.record.recorder import Recorder
from proctor.record.recorder import event as record_event
from proctor.record.rundir import RunDir, write_atomic
from proctor.record.space import SpaceReserve, disk_full, enospc_reason, is_enospc
from proctor.supervise.kill import kill_ladder, members
from proctor.supervise.leftovers import describe, gpu_by_pid, notice

_PR_SET_CHILD_SUBREAPER = 36
_PROCTOR_CODES = {"timeout": int(ExitCode.TIME_LIMIT), "stopped": int(ExitCode.INTERRUPTED)}
_WATCHED = {signal.SIGCHLD, signal.SIGTERM, signal.SIGINT}
_STOPS = {signal.SIGTERM, signal.SIGINT}
#: How long a command dead of a stop's signal waits for the wrapper's own. Slurm's proctrack
#: signals a step's processes one by one, deepest first: a loaded node can run the command's
#: whole exit before the wrapper's signal is sent (CI with a hog per core read 'failed').
_STOP_ECHO_S = 3.0
_STOP_CODES = {128 + signal.SIGTERM, 128 + signal.SIGINT, -signal.SIGTERM, -signal.SIGINT}


def _stop_arrived(info: Any, wait_status: int) -> bool:
    """A stop was taken by this sigtimedwait, is waiting (blocked, pending) behind it, or
    follows within _STOP_ECHO_S of a command that ended as a stop ends it (130, 143 or their
    signals); a command that ended otherwise waits for nothing."""
    if (info is not None and info.si_signo in _STOPS) or signal.sigpending() & _STOPS:
        return True
    if os.waitstatus_to_exitcode(wait_status) not in _STOP_CODES:
        return False
    return signal.sigtimedwait(_STOPS, _STOP_ECHO_S) is not None


def _become_subreaper() -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def _exit_text(wait_status: int) -> tuple[int, str | None]:
    code = os.waitstatus_to_exitcode(wait_status)
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"SIG{-code}"
        return 128 - code, name
    return code, None


#: The argv came on stdin and stdin was empty: the controller let go before the run started.
NOT_STARTED: list[str] = []


def _real_argv() -> list[str] | None:
    """The unmasked argv, which no file holds (it may carry a secret): from a pipe on stdin
    (the local launcher) or from one environment variable (the Slurm node launcher).

    The local launcher starts the wrapper before the run's record is written (its imports
    overlap with that work) and writes the argv once the run may start: nothing in the run
    directory is read before it comes. An empty stdin (the run was refused, or the controller
    died first) is NOT_STARTED."""
    if os.environ.pop("PROCTOR_WRAPPER_ARGV_STDIN", None):
        raw = sys.stdin.buffer.read()
        return list(json.loads(raw)) if raw else NOT_STARTED
    env = os.environ.pop("PROCTOR_WRAPPER_ARGV", None)
    return list(json.loads(env)) if env else None


class Wrapper:
    def __init__(self, run_dir: Path, argv: list[str] | None = None) -> None:
        self.run = RunDir(run_dir)
        self.recorder = Recorder(self.run, {})
        plan = self.run.read_json("plan.json")
        if plan is None:
            raise UsageError(
                f"no plan.json in {run_dir}", hint="give the directory of a run proctor created"
            )
        self.plan: dict[str, Any] = plan
        self.argv: list[str] = argv or list(plan["argv"])
        redact.process_redactor().learn_argv(self.argv)  # what this process writes is masked
        self.child: subprocess.Popen[bytes] | None = None
        self.child_status: int | None = None
        self.stop_reason: str | None = None  # "timeout" or "stopped"
        self.sampler: Any = None
        self.indexer: threading.Thread | None = None
        self.pending: dict[str, Any] = {}
        self.pending_events: list[dict[str, Any]] = []
        self.reserve = SpaceReserve(self.run.path)
        self.enospc = False
        self.deadline: float | None = None  # the time limit, on the monotonic clock
        # Set by the deadline guard's thread when it stopped the command at the time limit.
        self.deadline_fired = False
        self._reap_lock = threading.Lock()  # the guard never signals a reaped (reusable) pid
        self._guard: threading.Timer | None = None

    # -- record ---------------------------------------------------------------------------
    def update_record(self, **fields: Any) -> None:
        """Merge facts into record.json. On a full disk they are kept in memory and written
        with the final record, from the space reserve (see record/space.py)."""
        self.pending_events.extend(fields.pop("add_events", None) or [])
        self.pending.update(fields)
        try:
            self.recorder.update(add_events=self.pending_events, **self.pending)
        except OSError as error:
            if not is_enospc(error):
                raise
            self.enospc = True
            return
        self.pending.clear()
        self.pending_events.clear()

    def event(self, name: str, detail: str | None = None) -> dict[str, Any]:
        return record_event(name, detail)

    # -- process --------------------------------------------------------------------------
    def reap(self) -> None:
        with self._reap_lock:
            while True:
                try:
                    pid, status = os.waitpid(-1, os.WNOHANG)
                except ChildProcessError:
                    return
                if pid == 0:
                    return
                if self.child is not None and pid == self.child.pid and self.child_status is None:
                    self.child_status = status
                    self.child.returncode = os.waitstatus_to_exitcode(status)

    def arm_deadline_guard(self) -> None:
        """Stop the command at the time limit even while this thread is busy elsewhere.

        The main loop enforces the limit only when it gets round to it; a record write's fsync
        on a loaded disk can take seconds, and a command that ended meanwhile would read as
        in time. The guard sends the group's first SIGTERM on time; the main loop then runs
        the rest of the ladder and records the timeout.
        """
        if self.deadline is None or self.child is None:
            return
        self._guard = threading.Timer(max(0.0, self.deadline - time.monotonic()), self._on_deadline)
        self._guard.daemon = True
        self._guard.start()

    def _on_deadline(self) -> None:
        with self._reap_lock:
            if self.child is None or self.child_status is not None:
                return
            self.deadline_fired = True
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.child.pid, signal.SIGTERM)

    def start_child(self) -> None:
        argv = self.argv
        log_path = self.run.path / str(self.plan["log"])
        log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

        def in_child() -> None:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, _WATCHED)
            os.setpgid(0, 0)

        try:
            self.child = subprocess.Popen(
                argv,
                cwd=self.plan.get("cwd") or None,
                stdin=subprocess.DEVNULL,
                stdout=log_fd,
                stderr=log_fd,
                close_fds=True,
                preexec_fn=in_child,
            )
        finally:
            os.close(log_fd)

    def stop_tree(self, grace: float) -> int:
        pgid = self.child.pid if self.child is not None else None
        report = kill_ladder(pgid, [os.getpid()], grace=grace, reap=self.reap)
        return report.count

    def stop_leftovers(self, grace: float) -> list[dict[str, Any]]:
        """Stop what the exited command left running, and say what each process was.

        The GPU sampler's thread is halted first (its nvidia-smi is the wrapper's child too and
        must not be taken for a leftover); one sample now gives each leftover's GPU memory.
        """
        if self.sampler is not None:
            with contextlib.suppress(Exception):
                self.sampler.halt()
        pgid = self.child.pid if self.child is not None else None
        found = members(pgid, [os.getpid()])
        if not found:
            return []
        gpu: dict[int, float] | None = None
        if self.sampler is not None:
            with contextlib.suppress(Exception):
                gpu = gpu_by_pid(self.sampler.sample_once())
        seen = {p.pid: describe(p, gpu) for p in found}
        report = kill_ladder(pgid, [os.getpid()], grace=grace, reap=self.reap)
        entries = []
        for pid in dict.fromkeys([*seen, *report.terminated, *report.killed, *report.survivors]):
            entry = seen.get(pid) or {
                "pid": pid,
                "name": None,
                "cmdline": None,
                "gpu_memory_mib": None,
            }
            if pid in report.killed:
                entry["signal"] = "SIGKILL"
            elif pid in report.terminated:
                entry["signal"] = "SIGTERM"
            elif pid not in report.survivors:
                continue  # gone on its own before the ladder reached it
            entry["survived"] = pid in report.survivors
            entries.append(entry)
        return entries

    # -- main loop ------------------------------------------------------------------------
    def wait(self) -> None:
        try:
            self._wait()
        finally:
            if self._guard is not None:
                self._guard.cancel()
        if self.deadline_fired and self.stop_reason is None:
            self._record_timeout(self.plan.get("timeout_s"))  # the guard's SIGTERM ended it

    def _wait(self) -> None:
        timeout_s = self.plan.get("timeout_s")
        grace = float(self.plan.get("grace_s", 10.0))
        deadline = self.deadline
        while self.child_status is None:
            wait_for = 3600.0 if deadline is None else max(0.0, deadline - time.monotonic())
            info = signal.sigtimedwait(_WATCHED, wait_for) if wait_for > 0 else None
            self.reap()
            if self.child_status is not None:
                # A stop that reached the command and this wrapper together (Slurm's scancel
                # signals every process of the step) may find the command already gone, its
                # signal to this wrapper pending or still on its way: the run was still
                # stopped, never a failure of its own.
                if self.stop_reason is None and _stop_arrived(info, self.child_status):
                    self._record_stop()
                return
            if info is not None and info.si_signo in (signal.SIGTERM, signal.SIGINT):
                self._record_stop()
                self.stop_tree(grace)
            elif deadline is not None and (self.deadline_fired or time.monotonic() >= deadline):
                self._record_timeout(timeout_s)
                self.stop_tree(grace)
                deadline = None
        self.reap()

    def _record_stop(self) -> None:
        self.stop_reason = "stopped"
        self.update_record(add_events=[self.event("stop", "stop requested")])

    def _record_timeout(self, timeout_s: Any) -> None:
        self.stop_reason = "timeout"
        reached = self.event("timeout", f"time limit of {timeout_s}s reached")
        self.update_record(add_events=[reached])

    def start_sampler(self) -> None:
        interval = float(self.plan.get("gpu_sample_s") or 0)
        if interval <= 0 or not self.plan.get("gpu_present"):
            return
        try:
            from proctor.monitors.gpu import GpuSampler

            self.sampler = GpuSampler(self.run.gpu_csv_path, interval)
            self.sampler.start()
        except Exception as error:  # a broken GPU stack must not stop the run
            self.update_record(add_events=[self.event("gpu_sampler_failed", repr(error))])
            self.sampler = None

    def stop_sampler(self) -> list[dict[str, Any]]:
        if self.sampler is None:
            return []
        try:
            self.sampler.stop()
            summary = self.sampler.summary()
            self.update_record(
                gpu_sampling={k: summary[k] for k in ("interval_s", "samples", "errors")}
            )
            return list(summary["peaks"])
        except Exception as error:
            self.update_record(add_events=[self.event("gpu_sampler_failed", repr(error))])
            return []

    def gpu_health_after(self) -> None:
        """The preflight's counters again, now the command has ended: the change goes into
        the record and, for a bench, into its validity verdict (docs/gpu-health.md)."""
        before = self.recorder.read().get("gpu_health")
        if not isinstance(before, dict) or not before.get("devices"):
            return  # no GPU, or not checked: nothing to compare
        try:
            from proctor.monitors.gpu_health import after_run, change_line

            after, change = after_run(before)
            fields: dict[str, Any] = {"gpu_health_after": after, "gpu_health_change": change}
            if change is not None and not change.get("ok"):
                fields["add_events"] = [self.event("gpu_health_change", change_line(change))]
            self.update_record(**fields)
            if change is not None:
                self._judge_bench(change)
        except Exception as error:  # the evidence of the run itself must not depend on it
            self.update_record(add_events=[self.event("gpu_health_failed", repr(error))])

    def _judge_bench(self, change: dict[str, Any]) -> None:
        """A bench's metrics.json gets the "gpu" validity check. Its load generator imported
        pydantic already, so results/ may be imported here (never at the wrapper's start)."""
        doc = self.run.read_json("metrics.json")
        if not isinstance(doc, dict) or not isinstance(doc.get("validity"), dict):
            return
        from proctor.monitors.gpu_health import validity_check
        from proctor.results.validity import with_check

        check = validity_check(change)
        if check is None:
            return
        doc["validity"] = with_check(doc["validity"], "gpu", *check)
        if isinstance(doc.get("metrics"), dict) and "valid" in doc["metrics"]:
            doc["metrics"]["valid"] = int(doc["validity"]["verdict"] == "VALID")
        self.run.write_json("metrics.json", doc)

    def index(self) -> None:
        """Index the run in the store, after everything else: a locked store costs at most
        INDEX_WAIT_S here, and then the run is left pending for the next indexing."""
        from proctor.store.db import index_quietly

        index_quietly(self.plan.get("store_path"), self.run.path, "wrapper")

    def index_running(self) -> None:
        # A command that has ended already gets its row from finish(): writing the "running"
        # one first would cost a short run a store transaction (an fsync) for nothing.
        if self.child_status is None:
            self.index()

    def index_in_background(self) -> None:
        # The "running" row is a convenience; the time limit and the stop must never wait
        # for it, so it is written by a thread the main loop does not wait for.
        self.indexer = threading.Thread(target=self.index_running, daemon=True)
        self.indexer.start()

    def run_all(self) -> int:
        # First of all: a stop that arrives from here on is held for sigtimedwait, never lost
        # (the controller starts us with these blocked already; this covers other starters).
        signal.pthread_sigmask(signal.SIG_BLOCK, _WATCHED)
        # The run's owner lock, handed over by the controller: held until this process exits.
        owner.adopt_inherited(self.run.path)
        self.reserve.take()
        write_atomic(self.run.wrapper_pid_path, json.dumps(owner.pid_record(pgid=os.getpgid(0))))
        _become_subreaper()
        # The first GPU sample is the run's baseline: taken before the command can allocate,
        # so a command that takes GPU memory at once and keeps it is not read as released.
        self.start_sampler()
        started = time.time()
        # The time limit counts from the command's start, as timeout(1) does: not from after
        # this wrapper has recorded it (writing the record costs an fsync, long on a loaded disk).
        timeout_s = self.plan.get("timeout_s")
        self.deadline = time.monotonic() + float(timeout_s) if timeout_s else None
        try:
            self.start_child()
        except OSError as error:
            self.stop_sampler()
            # Shell convention: 126 not executable, 127 not found.
            code = 127 if isinstance(error, FileNotFoundError) else 126
            self.recorder.write_exit(code)
            self.update_record(
                outcome="failed",
                error=f"cannot start {self.plan['argv'][0]!r}: {error.strerror}",
                exit={"code": code, "signal": None, "decided_by": "proctor"},
                started_at=iso_at(started),
                ended_at=now_iso(),
                duration_s=0.0,
                wrapper=owner.pid_record(pgid=os.getpgid(0)),
            )
            self.finish()
            return 0
        assert self.child is not None
        self.arm_deadline_guard()
        # After the spawn, so the command itself keeps the default SIGHUP disposition.
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        child = psutil.Process(self.child.pid)
        self.update_record(
            outcome="running",
            started_at=iso_at(started),
            wrapper=owner.pid_record(pgid=os.getpgid(0)),
            process={
                "pid": child.pid,
                "create_time": child.create_time(),
                "pgid": child.pid,
                "start_ticks": owner.start_ticks(child.pid),
            },
            add_events=[self.event("start", " ".join(self.plan.get("argv", [])))],
        )
        self.index_in_background()
        self.wait()
        ended = time.time()
        assert self.child_status is not None
        code, sig = _exit_text(self.child_status)
        # The evidence first: the status is on disk before anything else can go wrong. When
        # proctor ended the run, its status is proctor's (4 time limit, 130 stopped), whatever
        # the command did on SIGTERM, and the command's own follows it in the file.
        if self.stop_reason:
            run_code = _PROCTOR_CODES[self.stop_reason]
            exit_ = {
                "code": run_code,
                "signal": None,
                "decided_by": "proctor",
                "reason": self.stop_reason,
                "command": {"code": code, "signal": sig},
            }
        else:
            exit_ = {"code": code, "signal": sig, "decided_by": "command"}
        self.enospc = self.enospc or disk_full(self.run.path)
        if not self.enospc:
            try:
                if self.stop_reason:
                    self.recorder.write_exit(run_code, None, self.stop_reason, (code, sig))
                else:
                    self.recorder.write_exit(code, sig)
            except OSError as error:
                if not is_enospc(error):
                    raise
                self.enospc = True
        leftovers = self.stop_leftovers(grace=float(self.plan.get("leftover_grace_s", 2.0)))
        peaks = self.stop_sampler()
        self.gpu_health_after()
        outcome = self.stop_reason or ("ok" if code == 0 else "failed")
        end = {
            "exit": exit_,
            "ended_at": iso_at(ended),
            "duration_s": round(ended - started, 6),
            "leftovers_killed": sum(1 for e in leftovers if not e["survived"]),
            "leftovers": leftovers,
            "gpu_peaks": peaks,
        }
        events = [self.event("end", f"exit {code}" + (f" ({sig})" if sig else ""))]
        if leftovers:
            events.append(self.event("leftovers", notice(leftovers)))
        self.update_record(outcome=outcome, **end, add_events=events)
        if self.enospc:
            self.end_on_full_disk()
        self.finish()
        return 0

    def end_on_full_disk(self) -> None:
        """The disk filled up: the evidence is incomplete, so the result is unknown (no
        exit_code), and the record says why, written into the space held back for it."""
        self.reserve.release()
        with contextlib.suppress(OSError):
            self.run.exit_code_path.unlink()
        reason = enospc_reason(self.run.path)
        self.update_record(
            outcome="unknown", error=reason, add_events=[self.event("enospc", reason)]
        )

    def finish(self) -> None:
        self.reserve.release()
        if self.indexer is not None:
            # Never two rows in flight: a late "running" row must not overwrite the final one.
            self.indexer.join()
        self.recorder.seal(self.plan.get("store_path"), "wrapper")


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        sys.stderr.write("usage: python -m proctor.supervise.wrapper RUN_DIR\n")
        return 64
    argv_in = _real_argv()
    if argv_in is NOT_STARTED:
        return 0  # nothing to run, nothing written
    wrapper = Wrapper(Path(args[0]), argv_in)
    try:
        return wrapper.run_all()
    except Exception:
        # Leave the reason in the record; without exit_code the run reads as unknown.
        wrapper.reserve.release()
        with contextlib.suppress(Exception):
            wrapper.update_record(error=traceback.format_exc(limit=5))
        raise


if __name__ == "__main__":
    from proctor.crash import guarded

    sys.exit(guarded("proctor wrapper", main))

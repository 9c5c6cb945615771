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
import time
import traceback
from pathlib import Path
from typing import Any

import psutil

from proctor import redact
from proctor.record.rundir import RunDir, write_atomic
from proctor.supervise.kill import kill_ladder

_PR_SET_CHILD_SUBREAPER = 36
_WATCHED = {signal.SIGCHLD, signal.SIGTERM, signal.SIGINT}


def now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime()) + _tz_suffix()


def _tz_suffix() -> str:
    offset = time.strftime("%z")
    return f"{offset[:3]}:{offset[3:]}" if offset else "+00:00"


def iso_at(epoch: float) -> str:
    lt = time.localtime(epoch)
    frac = f"{epoch % 1:.3f}"[1:]
    offset = time.strftime("%z", lt)
    return time.strftime("%Y-%m-%dT%H:%M:%S", lt) + frac + f"{offset[:3]}:{offset[3:]}"


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


class Wrapper:
    def __init__(self, run_dir: Path) -> None:
        self.run = RunDir(run_dir)
        plan = self.run.read_json("plan.json")
        if plan is None:
            raise SystemExit(f"proctor wrapper: no plan.json in {run_dir}")
        self.plan: dict[str, Any] = plan
        # The unmasked argv comes through the environment so that no file holds a secret.
        raw = os.environ.pop("PROCTOR_WRAPPER_ARGV", None)
        self.argv: list[str] = json.loads(raw) if raw else list(plan["argv"])
        redact.process_redactor().learn_argv(self.argv)  # what this process writes is masked
        self.child: subprocess.Popen[bytes] | None = None
        self.child_status: int | None = None
        self.stop_reason: str | None = None  # "timeout" or "stopped"
        self.sampler: Any = None

    # -- record ---------------------------------------------------------------------------
    def update_record(self, **fields: Any) -> None:
        record = self.run.read_json("record.json") or {}
        events = fields.pop("add_events", None)
        record.update(fields)
        if events:
            record.setdefault("events", []).extend(events)
        self.run.write_json("record.json", record)

    def event(self, name: str, detail: str | None = None) -> dict[str, Any]:
        return {"time": now_iso(), "event": name, "detail": detail}

    # -- process --------------------------------------------------------------------------
    def reap(self) -> None:
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

    # -- main loop ------------------------------------------------------------------------
    def wait(self) -> None:
        timeout_s = self.plan.get("timeout_s")
        grace = float(self.plan.get("grace_s", 10.0))
        deadline = time.monotonic() + float(timeout_s) if timeout_s else None
        while self.child_status is None:
            wait_for = 3600.0 if deadline is None else max(0.0, deadline - time.monotonic())
            info = signal.sigtimedwait(_WATCHED, wait_for) if wait_for > 0 else None
            self.reap()
            if self.child_status is not None:
                return
            if info is not None and info.si_signo in (signal.SIGTERM, signal.SIGINT):
                self.stop_reason = "stopped"
                self.update_record(add_events=[self.event("stop", "stop requested")])
                self.stop_tree(grace)
            elif deadline is not None and time.monotonic() >= deadline:
                self.stop_reason = "timeout"
                self.update_record(
                    add_events=[self.event("timeout", f"time limit of {timeout_s}s reached")]
                )
                self.stop_tree(grace)
                deadline = None
        self.reap()

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

    def index(self) -> None:
        from proctor.store.db import index_quietly

        index_quietly(self.plan.get("store_path"), self.run.path, "wrapper")

    def run_all(self) -> int:
        me = psutil.Process()
        write_atomic(
            self.run.wrapper_pid_path,
            json.dumps({"pid": me.pid, "create_time": me.create_time(), "pgid": os.getpgid(0)}),
        )
        _become_subreaper()
        signal.pthread_sigmask(signal.SIG_BLOCK, _WATCHED)
        started = time.time()
        try:
            self.start_child()
        except OSError as error:
            # Shell convention: 126 not executable, 127 not found.
            code = 127 if isinstance(error, FileNotFoundError) else 126
            write_atomic(self.run.exit_code_path, f"{code}\n")
            self.update_record(
                outcome="failed",
                error=f"cannot start {self.plan['argv'][0]!r}: {error.strerror}",
                exit={"code": code, "signal": None, "decided_by": "proctor"},
                started_at=iso_at(started),
                ended_at=now_iso(),
                duration_s=0.0,
                wrapper={"pid": me.pid, "create_time": me.create_time(), "pgid": os.getpgid(0)},
            )
            self.finish()
            return 0
        assert self.child is not None
        # After the spawn, so the command itself keeps the default SIGHUP disposition.
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        child = psutil.Process(self.child.pid)
        self.update_record(
            outcome="running",
            started_at=iso_at(started),
            wrapper={"pid": me.pid, "create_time": me.create_time(), "pgid": os.getpgid(0)},
            process={"pid": child.pid, "create_time": child.create_time(), "pgid": child.pid},
            add_events=[self.event("start", " ".join(self.plan.get("argv", [])))],
        )
        self.index()
        self.start_sampler()
        self.wait()
        ended = time.time()
        assert self.child_status is not None
        code, sig = _exit_text(self.child_status)
        decided_by = "proctor" if self.stop_reason else "command"
        # The evidence first: the status is on disk before anything else can go wrong.
        write_atomic(self.run.exit_code_path, f"{code} {sig}\n" if sig else f"{code}\n")
        leftovers = self.stop_tree(grace=float(self.plan.get("leftover_grace_s", 2.0)))
        peaks = self.stop_sampler()
        outcome = self.stop_reason or ("ok" if code == 0 else "failed")
        self.update_record(
            outcome=outcome,
            exit={"code": code, "signal": sig, "decided_by": decided_by},
            ended_at=iso_at(ended),
            duration_s=round(ended - started, 6),
            leftovers_killed=leftovers,
            gpu_peaks=peaks,
            add_events=[self.event("end", f"exit {code}" + (f" ({sig})" if sig else ""))],
        )
        self.finish()
        return 0

    def finish(self) -> None:
        with contextlib.suppress(Exception):
            from proctor.record.manifest import write_run_manifest

            write_run_manifest(self.run)
        self.index()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        sys.stderr.write("usage: python -m proctor.supervise.wrapper RUN_DIR\n")
        return 64
    wrapper = Wrapper(Path(args[0]))
    try:
        return wrapper.run_all()
    except Exception:
        # Leave the reason in the record; without exit_code the run reads as unknown.
        with contextlib.suppress(Exception):
            wrapper.update_record(error=traceback.format_exc(limit=5))
        raise


if __name__ == "__main__":
    sys.exit(main())

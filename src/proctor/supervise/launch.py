"""The controller side of a run: prepare its directory, start the wrapper, follow, wait, stop.

Foreground and detached runs are the same thing: the wrapper always runs in its own session;
a foreground `proctor run` just follows the log and forwards Ctrl-C as a stop. So a SIGKILL of
any controller leaves the run going, and its exit status still lands in `exit_code`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from proctor.errors import ProctorError, ResultUnknown, TargetUnavailable, UsageError
from proctor.record import owner
from proctor.record.finish import now_iso
from proctor.record.hostinfo import host_info
from proctor.record.recorder import Recorder
from proctor.record.rundir import RunDir, ignore_in_git, write_atomic
from proctor.record.schema import MODELS, LaunchedRecord, ProcessRef
from proctor.record.status import RunState, is_alive, read_wrapper_ref, run_state
from proctor.redact import Redactor
from proctor.spec.plan import RunPlan
from proctor.supervise.refs import resolve_run as resolve_run  # re-exported: callers import it here
from proctor.version import __version__

if TYPE_CHECKING:
    from proctor.monitors.gpu_health import HealthReader

WRAPPER_START_TIMEOUT_S = 15.0
WRAPPER_FINISH_TIMEOUT_S = 120.0


@dataclass
class RunSpec:
    """What to run, beyond the plan: the kind of run and extra record fields."""

    kind: str = "command"
    group: str | None = None
    target: dict[str, Any] = field(default_factory=lambda: {"kind": "local"})
    extra: dict[str, Any] = field(default_factory=dict)


def _as_dict(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if hasattr(value, "model_dump"):
        return dict(value.model_dump(mode="json"))
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dict(dataclasses.asdict(value))
    return dict(value) if isinstance(value, dict) else {"value": str(value)}


def proctor_outputs(runs_dir: Path, store_path: Path | None) -> list[Path]:
    """What proctor itself writes: never part of a run's source identity."""
    outputs = [runs_dir]
    if store_path is not None:
        sidecars = ("", "-wal", "-shm", "-journal")
        outputs += [store_path.with_name(store_path.name + s) for s in sidecars]
    return outputs


def collect_source(cwd: Path, outputs: list[Path] | None = None) -> dict[str, Any]:
    try:
        from proctor.source.identity import source_identity
    except ImportError:
        return {"is_git": False, "reason": "source identity not available in this build"}
    try:
        return _as_dict(source_identity(cwd, exclude=outputs or []))
    except ProctorError as error:
        return {"is_git": False, "reason": error.one_line()}


def collect_gpu() -> dict[str, Any]:
    try:
        from proctor.monitors.gpu import inventory
    except ImportError:
        return {"present": False, "reason": "GPU monitoring not available in this build"}
    try:
        data = _as_dict(inventory())
    except Exception as error:  # a broken driver must not stop the run
        return {"present": False, "reason": f"GPU inventory failed: {error}"}
    data.setdefault("present", bool(data.get("gpus")))
    return data


#: Kinds that are clients of a server (the server holds the GPUs): their preflight reads the
#: counters, records the processes without judging them, and runs no CUDA check.
CLIENT_KINDS = frozenset({"bench", "eval"})


def gpu_preflight(plan: RunPlan, kind: str, reader: HealthReader | None = None) -> dict[str, Any]:
    """The GPU health preflight of a run (monitors/gpu_health.py), under the run's own
    environment (its CUDA_VISIBLE_DEVICES decides which GPUs are read)."""
    from proctor.monitors.gpu_health import preflight

    env = {**os.environ, **plan.env_values}
    try:
        return preflight(reader, mode="counters" if kind in CLIENT_KINDS else "full", env=env)
    except Exception as error:  # a bug or a driver that breaks NVML: said, never a crash
        return {
            "ok": False,
            "status": "failed",
            "problems": [f"the GPU preflight failed: {error!r}"],
            "devices": [],
        }


def prepare_run(
    plan: RunPlan,
    spec: RunSpec | None = None,
    *,
    health_reader: HealthReader | None = None,
    on_created: Callable[[RunDir], object] | None = None,
) -> tuple[RunDir, Redactor]:
    """Create the run directory with plan.json and the first record. Nothing runs yet.

    `on_created(run)` is called as soon as the directory exists (its lock held by this
    process), before the record is built: start_run starts the wrapper there, so that its
    interpreter starts while the source identity and the record are made.

    A GPU preflight that fails ends the run here, recorded (outcome failed, exit 69), and
    raises TargetUnavailable, unless the plan allows an unhealthy GPU."""
    recorder: Recorder | None = None
    try:
        recorder = Recorder.create(Path(plan.runs_dir.value))
        if on_created is not None:
            on_created(recorder.run)
        return _prepare_run(plan, spec, recorder, health_reader)
    except OSError as error:
        from proctor.record.space import is_enospc

        if not is_enospc(error):
            raise
        if recorder is not None:
            # Refused before anything ran: a directory with no record is no evidence, only a
            # run that `runs list` would have to explain.
            shutil.rmtree(recorder.run.path, ignore_errors=True)
        raise ResultUnknown(
            f"no space left on device (ENOSPC) under {plan.runs_dir.value}: the run could not "
            f"be recorded, so it was not started",
            hint="free some space, or choose another --runs-dir",
        ) from None


def _prepare_run(
    plan: RunPlan, spec: RunSpec | None, recorder: Recorder, reader: HealthReader | None
) -> tuple[RunDir, Redactor]:
    spec = spec or RunSpec()
    redactor = plan.redactor()
    run = recorder.run
    _ignore_store_in_git(Path(str(plan.store_path.value)), Path(plan.runs_dir.value))
    run_id = run.run_id
    log_name = f"{plan.name.value}.log"
    argv_display = redactor.argv(plan.argv)
    gpu = collect_gpu() if plan.gpu_sample_s.value else {"present": False, "reason": "sampling off"}
    # A Slurm group run is prepared on the login host; its GPUs are on the nodes.
    health = gpu_preflight(plan, spec.kind, reader) if spec.kind != "slurm" else None
    allowed = bool(plan.allow_unhealthy_gpu.value)
    if health is not None and not health.get("ok"):
        health["allowed"] = allowed
    run.write_json(
        "plan.json",
        {
            # The real argv reaches the wrapper through its environment, never a file.
            "argv": argv_display,
            "cwd": plan.cwd.value,
            "log": log_name,
            "timeout_s": plan.timeout_s.value,
            "grace_s": plan.grace_s.value,
            "gpu_sample_s": plan.gpu_sample_s.value,
            "gpu_present": bool(gpu.get("present")),
            "store_path": plan.store_path.value,
            "key": redactor.text(plan.key.value) if plan.key.value else None,
        },
        # argv and key are masked above; the paths must stay exact even where a short secret
        # value happens to be part of one (a run must not break over its own redaction).
        mask=False,
    )
    model = MODELS.get(spec.kind, LaunchedRecord)
    if not issubclass(model, LaunchedRecord):
        model = LaunchedRecord
    record = model(
        run_id=run_id,
        name=str(plan.name.value),
        kind=spec.kind,
        key=plan.key.value,
        group=spec.group,
        argv=argv_display,
        cwd=str(plan.cwd.value),
        log=log_name,
        proctor_version=__version__,
        target={**spec.target, "host": spec.target.get("host") or host_info()["hostname"]},
        source=collect_source(
            Path(plan.cwd.value),
            proctor_outputs(Path(plan.runs_dir.value), Path(str(plan.store_path.value))),
        ),
        gpu=gpu,
        env_overrides=redactor.env(plan.env_values),
        options={k: v for k, v in plan.options(redactor).items()},  # type: ignore[misc]
        created_at=now_iso(),
    )
    data = record.to_record()
    data["host"] = host_info()
    data["argv_display"] = argv_display
    if health is not None:
        data["gpu_health"] = health
    data.update(spec.extra)
    recorder.start(data)
    (run.path / log_name).touch()
    if health is not None and not health.get("ok") and not allowed:
        _refuse_unhealthy(plan, recorder, health)
    return run, redactor


def _refuse_unhealthy(plan: RunPlan, recorder: Recorder, health: dict[str, Any]) -> None:
    """End the run before it starts: recorded (failed, exit 69, the reasons), then refused."""
    from proctor.monitors.gpu_health import one_line
    from proctor.record.recorder import event

    line = one_line(health)
    recorder.record.setdefault("events", []).append(event("gpu_preflight_failed", line))
    recorder.finish(
        code=int(TargetUnavailable.exit_code),
        outcome="failed",
        store_path=plan.store_path.value,
        who="controller",
        error=line,
    )
    raise TargetUnavailable(
        f"{line} (run {recorder.run.run_id} not started)",
        hint="free or fix the GPUs, or pass --allow-unhealthy-gpu to run anyway",
    )


def _ignore_store_in_git(store: Path, runs_dir: Path) -> None:
    """A `[store] path` outside the runs directory gets the runs directory's `.gitignore`
    too, where its directory holds nothing but the store (made here if missing)."""
    if store.parent == runs_dir or str(store) == ":memory:":
        return
    with contextlib.suppress(OSError):
        store.parent.mkdir(parents=True, exist_ok=True)
        ignore_in_git(store.parent, store.name)


def wrapper_env(run: RunDir, plan: RunPlan) -> dict[str, str]:
    """The wrapper's environment: the run's own, and where its run and its argv are."""
    env = dict(os.environ)
    env.update(plan.env_values)
    env["PROCTOR_RUN_DIR"] = str(run.path)
    env["PROCTOR_RUN_ID"] = run.run_id
    # The real argv goes through a pipe: never a file (no secret at rest), and never one
    # environment variable (Linux caps a single one at 128 KiB; a long command line is fine).
    env.pop("PROCTOR_WRAPPER_ARGV", None)
    env["PROCTOR_WRAPPER_ARGV_STDIN"] = "1"
    return env


def start_wrapper(run: RunDir, plan: RunPlan) -> ProcessRef:
    """Start the wrapper in a new session and wait until it has written its pid file."""
    return start_detached(
        "proctor.supervise.wrapper",
        run,
        what="run wrapper",
        err_name=".wrapper.err",
        timeout_s=WRAPPER_START_TIMEOUT_S,
        stdin_data=json.dumps(plan.argv).encode(),
        env=wrapper_env(run, plan),
        cwd=str(plan.cwd.value),
    )


def spawn_detached(
    module: str,
    run: RunDir,
    *,
    err_name: str,
    stdin: bool,
    env: dict[str, str] | None = None,
    cwd: str | None = None,
) -> subprocess.Popen[bytes]:
    """Start `python -m MODULE RUN_DIR` in a new session (it outlives this process), its
    stderr to RUN_DIR/`err_name`, with a pipe on its stdin if `stdin`. The run's owner lock
    goes with it (record/owner.py): held by this process until it lets go, by the child from
    its first instant, so the run is never without a live owner between."""
    held_fd = owner.owned_fd(run.path)
    env = dict(os.environ if env is None else env)
    env.pop(owner.FD_ENV, None)
    if held_fd is not None:
        env[owner.FD_ENV] = str(held_fd)
    with open(run.path / err_name, "ab") as err:  # the child has its own copy
        return subprocess.Popen(
            [sys.executable, "-m", module, str(run.path)],
            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=err,
            start_new_session=True,
            close_fds=True,
            pass_fds=() if held_fd is None else (held_fd,),
            env=env,
            cwd=cwd,
        )


def hand_over(
    proc: subprocess.Popen[bytes],
    run: RunDir,
    *,
    what: str,
    err_name: str,
    timeout_s: float,
    stdin_data: bytes | None = None,
) -> ProcessRef:
    """Let go of the run, feed the child `stdin_data` (its stdin is closed after, empty when
    None), and wait until it holds the run (its pid file is written). The tail of
    RUN_DIR/`err_name` is the error when it does not start."""
    owner.let_go(run.path)
    if proc.stdin is not None:
        with contextlib.suppress(BrokenPipeError):  # it died at once: reported below
            proc.stdin.write(stdin_data or b"")
        with contextlib.suppress(BrokenPipeError):
            proc.stdin.close()
    deadline = time.monotonic() + timeout_s
    wait = 0.001  # a wrapper started early holds the run within ms of its argv: look often
    while time.monotonic() < deadline:
        ref = read_wrapper_ref(run)
        if ref is not None:
            _reap_later(proc, run)
            return ref
        if proc.poll() is not None:
            break
        time.sleep(wait)
        wait = min(0.01, wait * 1.5)
    err = (run.path / err_name).read_text(errors="replace")[-400:]
    raise ResultUnknown(f"the {what} did not start: {err.strip() or 'no output'}")


def start_detached(
    module: str,
    run: RunDir,
    *,
    what: str,
    err_name: str,
    timeout_s: float,
    stdin_data: bytes | None = None,
    env: dict[str, str] | None = None,
    cwd: str | None = None,
) -> ProcessRef:
    """Start `python -m MODULE RUN_DIR` in a new session (spawn_detached), feed it
    `stdin_data`, and wait until it holds the run (hand_over)."""
    proc = spawn_detached(
        module, run, err_name=err_name, stdin=stdin_data is not None, env=env, cwd=cwd
    )
    return hand_over(
        proc, run, what=what, err_name=err_name, timeout_s=timeout_s, stdin_data=stdin_data
    )


class _EarlyWrapper:
    """The wrapper of a local run, started as soon as its directory exists: its interpreter
    starts and imports (tens of ms) while this process identifies the source and writes the
    record. It waits for its argv on stdin before it touches the run; an empty stdin (the run
    was refused, or this process died) ends it having done nothing."""

    def __init__(self, plan: RunPlan) -> None:
        self.plan = plan
        self.proc: subprocess.Popen[bytes] | None = None
        self.run: RunDir | None = None

    def spawn(self, run: RunDir) -> None:
        self.run = run
        try:
            self.proc = spawn_detached(
                "proctor.supervise.wrapper",
                run,
                err_name=".wrapper.err",
                stdin=True,
                env=wrapper_env(run, self.plan),
                cwd=str(self.plan.cwd.value),
            )
        except OSError:
            self.proc = None  # started again after the record, where its error is said

    def start(self, run: RunDir) -> None:
        if self.proc is None:
            start_wrapper(run, self.plan)
            return
        proc, self.proc = self.proc, None
        hand_over(
            proc,
            run,
            what="run wrapper",
            err_name=".wrapper.err",
            timeout_s=WRAPPER_START_TIMEOUT_S,
            stdin_data=json.dumps(self.plan.argv).encode(),
        )

    def abandon(self) -> None:
        """The run will not start: its wrapper gets an empty stdin and ends."""
        proc, self.proc = self.proc, None
        if proc is not None and proc.stdin is not None:
            with contextlib.suppress(OSError):
                proc.stdin.close()
            _reap_later(proc)


#: Run directory -> set when the wrapper this process started for it has exited: follow_log
#: wakes on it rather than at its next poll (a short command's end is seen at once).
_wrapper_gone: dict[str, threading.Event] = {}


def _reap_later(proc: subprocess.Popen[bytes], run: RunDir | None = None) -> None:
    # The wrapper is our child until we exit; a thread reaps it so no zombie lingers
    # while a foreground controller follows a long run.
    gone = threading.Event()
    if run is not None:
        _wrapper_gone[str(run.path)] = gone

    def reap() -> None:
        proc.wait()
        gone.set()

    threading.Thread(target=reap, daemon=True).start()


# -- keyed runs -------------------------------------------------------------------------------
@contextlib.contextmanager
def key_lock(runs_dir: Path, key: str) -> Iterator[Path]:
    locks = runs_dir / ".keys"
    locks.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    with (locks / f"{digest}.lock").open("a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield locks / f"{digest}.json"
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def live_keyed_run(key_file: Path) -> RunDir | None:
    try:
        data = json.loads(key_file.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None
    run = RunDir(Path(data["dir"]))
    state = run_state(run)
    return run if state.state in ("running", "starting") else None


@dataclass
class Started:
    run: RunDir
    attached: bool
    redactor: Redactor


_MAX_ARG_STRLEN = 32 * 4096  # Linux: the longest single argument or environment string


def check_exec_limits(argv: list[str], env: dict[str, str]) -> None:
    """A command line the kernel would refuse (E2BIG) is a usage error, said before any run
    directory exists, rather than a failure deep in a spawn."""
    longest = max((len(os.fsencode(a)) + 1 for a in argv), default=0)
    if longest > _MAX_ARG_STRLEN:
        raise UsageError(
            f"one argument of the command is {longest - 1} bytes; the system allows "
            f"{_MAX_ARG_STRLEN - 1} per argument",
            hint="pass long input through a file instead of the command line",
        )
    try:
        arg_max = int(os.sysconf("SC_ARG_MAX"))
    except (ValueError, OSError):
        return
    pointer = 8
    total = sum(len(os.fsencode(a)) + 1 + pointer for a in argv)
    total += sum(len(os.fsencode(k)) + len(os.fsencode(v)) + 2 + pointer for k, v in env.items())
    if total > arg_max:
        raise UsageError(
            f"the command line and environment are {total} bytes; the system allows {arg_max}",
            hint="pass long input through a file instead of the command line",
        )


def _prepare_and_start(plan: RunPlan, spec: RunSpec | None) -> tuple[RunDir, Redactor]:
    """Prepare the run and start its wrapper (started early: _EarlyWrapper). If the wrapper
    cannot be started, this process lets go of the run (it reads unknown, with the reason)
    rather than holding it as "starting" while it lives."""
    early = _EarlyWrapper(plan)
    try:
        run, redactor = prepare_run(plan, spec, on_created=early.spawn)
    except BaseException:
        early.abandon()
        if early.run is not None:
            owner.let_go(early.run.path)  # refused or failed: it reads so, not "starting"
        raise
    try:
        early.start(run)
    finally:
        early.abandon()
        owner.let_go(run.path)
    return run, redactor


def start_run(plan: RunPlan, spec: RunSpec | None = None) -> Started:
    """Start a run, or attach to the live run holding the same key."""
    check_exec_limits(plan.argv, {**os.environ, **plan.env_values})
    key = plan.key.value
    if not key:
        run, redactor = _prepare_and_start(plan, spec)
        return Started(run, False, redactor)
    with key_lock(Path(plan.runs_dir.value), str(key)) as key_file:
        existing = live_keyed_run(key_file)
        if existing is not None:
            return Started(existing, True, plan.redactor())
        run, redactor = _prepare_and_start(plan, spec)
        # The key may be a secret (masked); the directory must stay exact for the next attach.
        entry = {"key": redactor.text(str(key)), "run_id": run.run_id, "dir": str(run.path)}
        write_atomic(key_file, json.dumps(entry), mask=False)
        return Started(run, False, redactor)


# -- following and waiting --------------------------------------------------------------------
_CHUNK = 1 << 20


def _copier(out: IO[bytes]) -> Callable[[IO[bytes]], int]:
    """A function copying what is new in a file to `out`; sendfile (no copy through Python)
    where `out` is a real descriptor, read/write otherwise. Returns bytes copied."""
    try:
        out_fd = out.fileno()
    except (AttributeError, OSError, ValueError):
        out_fd = -1

    def by_read(handle: IO[bytes]) -> int:
        chunk = handle.read(_CHUNK)
        if chunk:
            out.write(chunk)
        return len(chunk)

    if out_fd < 0:
        return by_read

    use_sendfile = True

    def by_sendfile(handle: IO[bytes]) -> int:
        nonlocal use_sendfile
        if use_sendfile:
            out.flush()
            offset = handle.tell()
            try:
                sent = os.sendfile(out_fd, handle.fileno(), offset, _CHUNK * 8)
            except OSError:
                use_sendfile = False
            else:
                handle.seek(offset + sent)
                return sent
        return by_read(handle)

    return by_sendfile


def follow_log(
    run: RunDir,
    out: IO[bytes],
    *,
    from_start: bool = True,
    until_done: bool = True,
    stop_check: Callable[[], bool] | None = None,
    poll: float = 0.05,
) -> RunState:
    """Copy the run's log to `out` as it grows; return the run's state once it is done.

    Polls every 10 ms at first, slowing by half each idle poll to `poll`: a short command's
    end is seen within a few ms (part of what `proctor run -- true` costs over `true`,
    bench/startup.py), a long one is polled no more often than before."""
    wait = min(0.01, poll)
    gone = _wrapper_gone.get(str(run.path))

    def pause() -> None:
        nonlocal wait
        if gone is not None and not gone.is_set():
            gone.wait(wait)  # the wrapper's exit ends the wait at once
        else:
            time.sleep(wait)
        wait = min(poll, wait * 1.5)

    log = run.log_path()
    while not log.exists():
        if run_state(run).state in ("finished", "unknown"):
            return run_state(run)
        pause()
    copy = _copier(out)
    with log.open("rb") as handle:
        if not from_start:
            handle.seek(0, os.SEEK_END)
        while True:
            if copy(handle):
                continue
            out.flush()
            if stop_check is not None and stop_check():
                return run_state(run)
            state = run_state(run)
            if not until_done or (
                state.state in ("finished", "unknown") and not state.wrapper_alive
            ):
                while copy(handle):
                    pass
                out.flush()
                return state
            pause()


def wait_run(run: RunDir, timeout: float | None = None, poll: float = 0.1) -> RunState:
    """Block until the run has an exit status or its wrapper is gone (then: unknown)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        state = run_state(run)
        if state.state == "unknown" or (state.state == "finished" and not state.wrapper_alive):
            return state
        if state.state == "finished":
            # The status is known; let the wrapper finish the record (it hashes the artifacts,
            # which takes a while for a large log on a loaded machine).
            finish_by = time.monotonic() + WRAPPER_FINISH_TIMEOUT_S
            while state.wrapper_alive and time.monotonic() < finish_by:
                time.sleep(0.02)
                state = run_state(run)
            return state
        if deadline is not None and time.monotonic() >= deadline:
            return state
        time.sleep(poll)


def request_stop(run: RunDir, start_wait_s: float = WRAPPER_START_TIMEOUT_S) -> bool:
    """Ask the process running the run (its wrapper, or a flow's or sweep's controller) to stop
    it: SIGTERM, and it runs its own kill ladder and teardown. A run still starting is given
    until its runner has written its pid file. False if nothing holds the run."""
    holder = owner.held(run.path)
    if holder is False:
        return False
    deadline = time.monotonic() + start_wait_s
    while holder and not run.wrapper_pid_path.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
        holder = owner.held(run.path)
    if holder is False:
        return False
    ref = read_wrapper_ref(run)
    if not is_alive(ref):
        return False
    assert ref is not None
    with contextlib.suppress(ProcessLookupError):
        os.kill(ref.pid, 15)
    return True


def record_of(run: RunDir) -> dict[str, Any]:
    return run.read_json("record.json") or {}

"""The canonical server workflow as a resumable sequence of steps:

    stop -> start -> ready -> (workload -> drain)... -> [inspect on hang] -> stop

A flow runs one or more workloads in order against the same server (`workloads`, from a flow
file's `[[flow.workload]]` list; `--workload-cmd` is a list of one), each its own run, drained
and recorded as a step pair with its index. It stops at the first failing workload unless
`continue_on_failure`, and then only where the server is still up.

The flow is itself a run directory (kind "flow") whose record lists each step with its run id,
exit code and message; the server and the workload are runs of their own, grouped under the
flow's id. Teardown always runs (failed step, Ctrl-C, SIGTERM). The exit code is the first
failing step's. `resume` continues a flow whose controller died without a second server.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

from proctor import redact
from proctor.errors import ExitCode, ProctorError, UsageError
from proctor.jobs.argv import job_data
from proctor.jobs.flow import FlowJob, FlowWorkload, command_for, flow_job
from proctor.jobs.options import validated
from proctor.monitors.drain import DrainConfig
from proctor.monitors.server_metrics import ServerMetricsScraper
from proctor.record import owner
from proctor.record.finish import now_iso
from proctor.record.headline import headline_of, result_line
from proctor.record.recorder import Recorder
from proctor.record.rundir import RunDir
from proctor.record.schema import (
    FlowRecord,
    FlowStep,
    load_record,
    parse_as,
)
from proctor.record.status import run_state
from proctor.serve import (
    RunWatch,
    check_startable,
    live_runs,
    profiles_for,
    recorded_server,
    start_server,
    stop_server,
    worker_pids,
)
from proctor.spec.config import ProjectConfig
from proctor.spec.plan import RunFlags, resolve_run_plan, resolve_runs_dir, resolve_store_path
from proctor.supervise.controller import controller_fields, hold
from proctor.supervise.launch import RunSpec, start_run
from proctor.supervise.signals import deferred_stops
from proctor.supervise.sigterm import SigtermStop
from proctor.targets.service import SupervisedRun
from proctor.version import __version__

STEPS = ("stop", "start", "ready", "workload", "drain", "inspect", "teardown")
# The workload's own kill ladder (SIGTERM, its grace, SIGKILL) runs in its wrapper.
WORKLOAD_STOP_WAIT_S = 60.0


class _Terminated(Exception):
    pass


class Flow:
    def __init__(
        self,
        job: FlowJob,
        config: ProjectConfig,
        *,
        say: Callable[[str], None] = print,
        run: RunDir | None = None,
    ) -> None:
        self.job = job
        self.request = job.server.request(1.0)  # what the server workflow starts
        if run is None:  # a server that cannot start is refused before the flow's directory
            check_startable(self.request, config)
        self.drain_config = DrainConfig(
            max_s=job.max_,
            poll_s=job.poll,
            stuck_polls=job.stuck_polls,
            startup_max_s=job.startup_max,
            error_streak=job.error_streak,
        )
        self.config = config
        self.say = say
        self.runs_dir = Path(resolve_runs_dir(job.runs_dir, config).value)
        self.recorder = Recorder(run) if run else Recorder.create(self.runs_dir)
        self.dir = self.recorder.run
        if run is not None and not owner.take(run.path):
            raise UsageError(
                f"flow {run.run_id} is still running: its controller holds it",
                hint=f"proctor runs stop {run.run_id}, or wait for it",
            )
        self.server: RunDir | None = None
        self.scraper: ServerMetricsScraper | None = None  # the server's /metrics, ready to stop
        if not self.recorder.record:
            store = Path(str(resolve_store_path(config, self.runs_dir).value))
            self.recorder.start(
                {
                    "name": f"flow-{job.server.engine}-p{job.server.port}",
                    "kind": "flow",
                    **controller_fields(Path.cwd(), self.runs_dir, store),
                    "log": "flow.log",
                    "proctor_version": __version__,
                    "outcome": "running",
                    "job": job_data(job),  # infinities as "inf": a bench's request rate
                    "steps": [],
                }
            )
        # The flow's own state: steps are updated in place and the whole record rewritten.
        self.record: dict[str, Any] = self.recorder.record

    # -- bookkeeping ----------------------------------------------------------------------
    def save(self) -> None:
        self.recorder.save()

    def log(self, line: str) -> None:
        self.say(line)
        with (self.dir.path / "flow.log").open("a", encoding="utf-8") as handle:
            handle.write(redact.line(f"{now_iso()} {line}\n"))

    @property
    def typed(self) -> FlowRecord:
        """The flow's record as written so far, through its model."""
        return parse_as(FlowRecord, self.record)

    def step_done(self, name: str) -> FlowStep | None:
        return self.typed.step_done(name)

    def begin(self, name: str, **fields: Any) -> dict[str, Any]:
        step = {"step": name, "started_at": now_iso(), "exit_code": None, **fields}
        self.record["steps"].append(step)
        self.record.setdefault("events", []).append({"time": step["started_at"], "event": name})
        self.save()
        self.log(f"[{name}] ...")
        return step

    def end(self, step: dict[str, Any], code: int, message: str, **fields: Any) -> int:
        step.update(ended_at=now_iso(), exit_code=code, message=message, **fields)
        self.save()
        self.log(f"[{step['step']}] exit {code}: {message}")
        return code

    # -- steps ----------------------------------------------------------------------------
    def stop_leftovers(self) -> int:
        """Step 1: stop live server runs proctor started on this port (scoped, idempotent)."""
        step = self.begin("stop")
        port = self.request.port
        stale = [
            r
            for r in live_runs(self.runs_dir, "server")
            # Read leniently: a stale server whose record its model rejects is still stopped.
            if recorded_server(r).get("port") == port
        ]
        for run in stale:
            stop_server(run, vram_timeout_s=self.job.vram_timeout)
        return self.end(
            step,
            0,
            f"stopped {len(stale)} earlier server run(s) on port {port}",
            stopped=[r.run_id for r in stale],
        )

    def start_server(self) -> tuple[int, RunDir | None]:
        step = self.begin("start")
        flags = RunFlags(
            argv=[],
            runs_dir=str(self.runs_dir),
            gpu_sample=self.job.gpu_sample,
            env=list(self.job.server.env),
        )
        try:
            # A stop that arrives while the server starts is held until the flow knows the
            # run, so teardown always finds what was started.
            with deferred_stops():
                started, applied = start_server(
                    self.request, self.config, flags=flags, group=self.dir.run_id
                )
                self.record["server_run"] = started.run.run_id
                self.save()
        except ProctorError as error:
            return self.end(step, int(error.exit_code), error.one_line()), None
        env = " ".join(f"{k}={v}" for k, v in applied["applied_env"].items()) or "(none)"
        self.log(f"[start] model profile {applied['model_profile']}; env {env}")
        self.log(f"[start] {' '.join(applied['argv'])}")
        return self.end(
            step, 0, f"server run {started.run.run_id}", run_id=started.run.run_id
        ), started.run

    def start_scrape(self) -> None:
        """The server's /metrics into the flow's server_metrics.csv from ready to teardown."""
        host = self.request.host
        host = "127.0.0.1" if host in ("", "0.0.0.0", "::") else host
        self.scraper = ServerMetricsScraper(
            f"http://{host}:{self.request.port}", self.dir.path / "server_metrics.csv"
        )
        self.scraper.start()
        self.scraper.mark("ready")

    def stop_scrape(self) -> None:
        if self.scraper is None:
            return
        self.scraper.stop()
        summary = self.scraper.summary("ready", "stop")
        self.record["server_metrics"] = {
            k: summary[k]
            for k in (
                "available",
                "scrapes",
                "errors",
                "note",
                "engine",
                "generation_tokens",
                "ttft_ms",
            )
            if k in summary
        }
        self.scraper = None
        self.save()

    def ready(self, server: RunDir) -> int:
        from proctor.monitors.ready import ready_for_engine

        step = self.begin("ready", run_id=server.run_id)
        engine = profiles_for(self.config).engine(self.request.engine)
        result = ready_for_engine(
            engine,
            self.request.port,
            host=self.request.host,
            process=RunWatch(server),
            logs=[server.log_path()],
            timeout_s=self.job.ready_timeout,
            poll_s=self.job.ready_poll,
            on_status=self.log,
        )
        self._tails(result.tails)
        return self.end(
            step, result.exit_code, result.message(), elapsed_s=round(result.elapsed_s, 3)
        )

    def workload(
        self, server: RunDir, index: int = 0, listed: FlowWorkload | None = None
    ) -> tuple[int, RunDir | None]:
        listed = listed or self.job.workloads[index]
        step = self.begin("workload", index=index, label=listed.label)
        try:
            argv = command_for(
                listed, self.job.base_url, self.job.served_model, runs_dir=str(self.runs_dir)
            )
            flags = RunFlags(
                argv=argv,
                runs_dir=str(self.runs_dir),
                detach=True,
                env=[*self.job.workload_env, *listed.env],
                gpu_sample=0,
                name=f"{self.record['name']}-{index + 1}-{listed.label}"
                if len(self.job.workloads) > 1 or listed.kind != "cmd" or listed.name
                else None,
            )
            plan = resolve_run_plan(flags, self.config)
            with deferred_stops():
                started = start_run(
                    plan,
                    RunSpec(
                        kind=listed.run_kind,
                        group=self.dir.run_id,
                        extra={"server_run": server.run_id, "flow_workload": index},
                    ),
                )
                self.record["workload_run"] = started.run.run_id
                self.save()
        except ProctorError as error:
            return self.end(step, int(error.exit_code), error.one_line()), None
        return self.end(
            step, 0, f"workload run {started.run.run_id}", run_id=started.run.run_id
        ), started.run

    def drain(self, server: RunDir, workload: RunDir, index: int = 0) -> int:
        from proctor.monitors.drain import drain_for_engine

        step = self.begin("drain", run_id=server.run_id, index=index)
        engine = profiles_for(self.config).engine(self.request.engine)
        result = drain_for_engine(
            engine,
            self.drain_config,
            port=self.request.port,
            host=self.request.host,
            server=RunWatch(server),
            server_log=server.log_path(),
            extra_logs=[workload.log_path()],
            clients=[RunWatch(workload)],
            client_pattern=self.job.client_pattern,
            on_status=self.log,
        )
        self._tails(result.tails)
        code = result.exit_code
        if code == 0:
            wl = run_state(workload)
            if wl.exit is None:
                return self.end(
                    step,
                    int(ExitCode.UNKNOWN),
                    "drained, but the workload's exit status is unknown",
                )
            if wl.exit.code != 0:
                return self.end(
                    step,
                    int(ExitCode.WORKLOAD_FAILED),
                    f"drained; the workload exited {wl.exit.code}",
                )
        return self.end(step, code, result.message(), outcome=result.outcome.value)

    def inspect(self, server: RunDir) -> int:
        from proctor.supervise.inspect import inspect

        step = self.begin("inspect", run_id=server.run_id)
        engine = profiles_for(self.config).engine(self.request.engine)
        pids = worker_pids(server, engine)
        try:
            results = inspect(pids, server.path / "inspect", self.job.inspect_timeout)
        except ProctorError as error:
            return self.end(step, 0, f"no inspection: {error.one_line()}")
        files = [str(r.path) if hasattr(r, "path") else str(r) for r in results]
        return self.end(
            step, 0, f"stacks of {len(pids)} process(es) in {server.path / 'inspect'}", files=files
        )

    def stop_workload(self) -> list[str]:
        """Stop the workload run if it is still going (a failed step, Ctrl-C, SIGTERM)."""
        run_id = self.typed.workload_run
        if not run_id:
            return []
        run = RunDir(self.runs_dir / str(run_id))
        supervised = SupervisedRun(run)
        if run_state(run).state == "finished" or not supervised.stop():
            return []
        state = supervised.wait(WORKLOAD_STOP_WAIT_S)
        self.log(f"[teardown] workload run {run.run_id} stopped ({state.state})")
        return [run.run_id]

    def teardown(self, server: RunDir | None) -> int:
        step = self.begin("teardown")
        stopped = self.stop_workload()
        server_run = self.typed.server_run
        if server is None and server_run:
            server = RunDir(self.runs_dir / server_run)
        if server is None:
            return self.end(step, 0, "no server to stop", stopped_runs=stopped)
        report = stop_server(
            server,
            gpu_processes=self.job.gpu_processes,
            vram_timeout_s=self.job.vram_timeout,
        )
        stopped.append(server.run_id)
        if not report.memory_ok:
            return self.end(
                step,
                int(ExitCode.FAULT),
                f"GPU memory still held: {report.holders}",
                stop=report.to_dict(),
                stopped_runs=stopped,
            )
        return self.end(
            step, 0, f"server {server.run_id} stopped", stop=report.to_dict(), stopped_runs=stopped
        )

    def _noted(self, signum: int, frame: FrameType | None) -> None:
        # Asked to stop during the teardown: it finishes, and the flow still ends stopped
        # (a server sweep must not go on to its next point).
        self._stop_asked = True
        # A raw write: a buffered print from a signal handler can fail as a reentrant call.
        with contextlib.suppress(OSError):
            name = signal.Signals(signum).name
            os.write(2, f"proctor: {name}: finishing the teardown first\n".encode())

    def _tails(self, tails: dict[str, list[str]]) -> None:
        for path, lines in (tails or {}).items():
            self.log(f"--- last lines of {path} ---")
            for line in lines:
                self.log(line)

    # -- the sequence -----------------------------------------------------------------------
    def run(self, *, resume: bool = False) -> int:
        """Run the steps, then always tear down and end the flow's run directory. The exit
        code is the first failing step's, teardown included."""
        failures: list[int] = []
        self._stop_asked = False

        def note(code: int) -> int:
            if code:
                failures.append(code)
            return code

        # The first SIGTERM raises; a later one before the teardown's own handler (the wrapper's
        # guard and ladder send two) is only noted: raised there, it escaped the interrupt's
        # handling and the flow ended as a crash (exit 70).
        previous = signal.signal(signal.SIGTERM, SigtermStop(_Terminated))
        # This process is the flow's live controller: readers see it, `runs stop` signals it.
        hold(self.recorder)
        try:
            self._steps(note, resume=resume)
        except (KeyboardInterrupt, _Terminated):
            self.log("[flow] interrupted: tearing down")
            note(int(ExitCode.INTERRUPTED))
        finally:
            # Teardown is bounded; a second Ctrl-C or SIGTERM must not cut it short.
            previous_int = signal.signal(signal.SIGINT, self._noted)
            signal.signal(signal.SIGTERM, self._noted)
            # The record's end too: a SIGTERM restored to its default there would leave the
            # flow "running" with its server gone (the wrapper's guard and ladder send two).
            try:
                self.stop_scrape()
                note(self.teardown(self.server))
                code = failures[0] if failures else 0
                if code == 0 and self._stop_asked:
                    self.log("[flow] interrupted during the teardown: stopped")
                    code = int(ExitCode.INTERRUPTED)
                stopped = code == int(ExitCode.INTERRUPTED)
                if len(self.job.workloads) > 1:
                    self.results()
                self.recorder.finish(
                    code=code,
                    outcome="ok" if code == 0 else "stopped" if stopped else "failed",
                    reason="stopped" if stopped else None,
                    store_path=resolve_store_path(self.config, self.runs_dir).value,
                    who="flow",
                )
            finally:
                signal.signal(signal.SIGTERM, previous)
                signal.signal(signal.SIGINT, previous_int)
        return code

    def _steps(self, note: Callable[[int], int], *, resume: bool) -> None:
        server_run = self.typed.server_run
        if resume and server_run:
            self.server = RunDir(self.runs_dir / server_run)
            if run_state(self.server).state not in ("running", "starting"):
                self.log(f"[resume] server run {self.server.run_id} is no longer running")
                note(int(ExitCode.WORKLOAD_FAILED))
                return
        else:
            note(self.stop_leftovers())
            code, self.server = self.start_server()
            if note(code):
                return
        server = self.server
        assert server is not None
        done = self.step_done("ready")
        if (done is None or done.exit_code != 0) and note(self.ready(server)):
            return
        self.start_scrape()
        for index, listed in enumerate(self.job.workloads):
            code = self._one_workload(server, index, listed, note)
            if code == 0:
                continue
            if code == int(ExitCode.HANG) and not self.job.no_inspect:
                self.inspect(server)
            # Going on only makes sense against a server that is still up and not faulted.
            alive = run_state(server).state in ("running", "starting")
            if not (
                self.job.continue_on_failure and alive and code == int(ExitCode.WORKLOAD_FAILED)
            ):
                left = len(self.job.workloads) - index - 1
                if left:
                    self.log(f"[flow] {left} later workload(s) not run")
                return

    def _step_of(self, name: str, index: int) -> dict[str, Any] | None:
        for step in self.record["steps"]:
            if (
                step["step"] == name
                and step.get("index", 0) == index
                and step.get("exit_code") is not None
            ):
                return dict(step)
        return None

    def _one_workload(
        self, server: RunDir, index: int, listed: FlowWorkload, note: Callable[[int], int]
    ) -> int:
        """Start (or on resume, find) workload `index`, drain it, record it; its exit code."""
        drained = self._step_of("drain", index)
        if drained is not None:  # resumed past it
            return note(int(drained["exit_code"]))
        workload: RunDir | None = None
        done = self._step_of("workload", index)
        if done and done.get("run_id"):
            workload = RunDir(self.runs_dir / done["run_id"])
        else:
            code, workload = self.workload(server, index, listed)
            if note(code):
                self._result(index, listed, None, code)
                return code
        assert workload is not None
        code = note(self.drain(server, workload, index))
        self._result(index, listed, workload, code)
        return code

    def _result(self, index: int, listed: FlowWorkload, run: RunDir | None, code: int) -> None:
        """The flow record's one line per workload: what ran, its run, its exit code, and its
        headline (score, tok/s, latencies, verdict: record/headline.py), which is printed."""
        headline = headline_of(run.path) if run is not None else None
        rows = [r for r in self.record.setdefault("workload_runs", []) if r.get("index") != index]
        rows.append(
            {
                "index": index,
                "name": listed.label,
                "kind": listed.kind,
                "run_id": run.run_id if run else None,
                "exit_code": code,
                "headline": headline,
            }
        )
        self.record["workload_runs"] = sorted(rows, key=lambda r: int(r["index"]))
        self.save()
        self.log(f"[result] {result_line(listed.label, code, headline)}")

    def results(self) -> None:
        """Every workload's result again, once the flow has ended: what a user reads last."""
        rows = self.record.get("workload_runs") or []
        if not rows:
            return
        self.log("[flow] results:")
        for row in rows:
            line = result_line(str(row.get("name")), row.get("exit_code"), row.get("headline"))
            self.log(f"  {row.get('run_id') or '(not started)'}  {line}")


def resume_flow(
    ref: str, config: ProjectConfig, runs_dir: str | None, say: Callable[[str], None]
) -> int:
    from proctor.supervise.refs import FLOW_KINDS, resolve_run

    directory = Path(resolve_runs_dir(runs_dir, config).value)
    run = resolve_run(directory, ref, FLOW_KINDS)
    # An unreadable record, or one a newer proctor wrote, is RecordError (64) saying so.
    record = load_record(run.path, strict=True)
    if not isinstance(record, FlowRecord):
        raise UsageError(f"run {run.run_id} is not a flow", hint="pass the flow's run id")
    if record.ended_at:
        raise UsageError(f"flow {run.run_id} already ended with exit {record.exit_code}")
    _refuse_masked(record)
    if not record.job:
        # Before the typed job (proctor 0.x), a flow's record held hand-written "options".
        raise UsageError(
            f"flow {run.run_id} was recorded by proctor {record.proctor_version or '(unknown)'} "
            f"in the old options format; proctor {__version__} resumes only flows whose record "
            "holds their job",
            hint="stop what it left (proctor runs stop) and start the flow again",
        )
    job = validated(
        FlowJob,
        {**record.job, "runs_dir": str(directory)},
        what=f"flow {run.run_id}: its recorded job",
        hint="start the flow again with the same options",
    )
    return Flow(job, config, say=say, run=run).run(resume=True)


def _refuse_masked(record: FlowRecord) -> None:
    """A command whose secret was masked in the record cannot be run again from it: refuse
    rather than start it with `***` where its key was."""
    job = record.job or {}
    needed = []
    if not record.server_run:
        needed.append(("server command", job.get("server")))
    if record.step_done("workload") is None:
        needed.append(("workloads", job.get("workloads")))
    for what, value in needed:
        if redact.MASK in json.dumps(value, default=str):
            raise UsageError(
                f"flow {record.run_id} cannot be resumed: its {what} holds a secret, which"
                " proctor never writes down",
                hint="start the flow again with the same options",
            )


def load_flow_file(path: Path) -> dict[str, Any]:
    """A flow file's table: its [flow] table (or the whole file), with [[workload]] and [sweep]
    beside it; a missing file or bad TOML is a UsageError naming the place (docs/workflow.md)."""
    import sys

    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    try:
        from proctor.spec.config import read_toml

        data = read_toml(path)  # bad bytes or bad TOML: a ConfigError naming the place
    except FileNotFoundError:
        raise UsageError(f"flow file {path} not found") from None
    except tomllib.TOMLDecodeError as error:
        raise UsageError(f"{path}: invalid TOML: {error}") from None
    table = data.get("flow", data)
    table = dict(table) if isinstance(table, dict) else {}
    # [[workload]] and [sweep] may also stand beside the [flow] table.
    for key in ("workload", "sweep"):
        if key in data and key not in table and table is not data:
            table[key] = data[key]
    return table


__all__ = [
    "STEPS",
    "Flow",
    "FlowJob",
    "flow_job",
    "load_flow_file",
    "resume_flow",
]

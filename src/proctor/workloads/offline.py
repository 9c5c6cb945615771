"""Offline inference (no server) as a supervised workload, with a free-disk guard.

An `OfflineJob` (jobs/offline.py) is resolved against its engine profile (`resolve_offline`:
ATOM's `atom.examples.simple_inference`, `vllm bench throughput`, SGLang's
`bench_offline_throughput`, or any command with `cmd`) and run as `python -m proctor.jobs run
JOB`, which runs the command in this process group, echoing its output, and scans that output
as it arrives for the throughput lines the engine profile knows and for its fault patterns.
DIR/metrics.json ({"schema", "kind": "offline", "status", "metrics", "units", ...}) is written
before the command starts and rewritten whenever a figure is parsed, so a crash keeps what was
already printed; the store indexes its flat `metrics`.

Exit status: 0 the command exited 0; 2 a fault pattern was printed; 3 it failed otherwise;
69 not enough free disk (it never starts) or not found; 128+N stopped by signal N.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from proctor import redact
from proctor.errors import ConfigError, TargetUnavailable, UsageError
from proctor.jobs.argv import job_argv
from proctor.jobs.documents import OFFLINE_SCHEMA, OfflineDocument, write_checked
from proctor.jobs.offline import OfflineJob, OfflinePlan
from proctor.redact import Redactor
from proctor.results.names import metric_info
from proctor.spec.config import ProjectConfig
from proctor.spec.profiles.command import choose_launcher
from proctor.spec.profiles.models import EngineProfile, ModelProfile
from proctor.supervise.sigterm import sigterm_stop

if TYPE_CHECKING:
    from proctor.supervise.launch import Started

SCHEMA = OFFLINE_SCHEMA
GIB = 1024**3

# Used when the engine profile names none: vLLM's `bench throughput` line and LLM.generate's
# progress bar, and the `... throughput (tok/s): N` labels of vLLM/SGLang/ATOM summary blocks.
# A number as engines print it: sign, decimals and exponent (`1.5e+04`), never a piece of
# one (the `04` of `1.5e+04`, the `50` of `-50`). The scanner keeps finite values >= 0 only.
_NUM = r"(?<![\w.+-])([-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?)"
_LABEL = r"^{} throughput \({}/s\):\s*" + _NUM
_REQ = ("request", "req")
DEFAULT_THROUGHPUT_PATTERNS: dict[str, str] = {
    "request_throughput": r"(?i)^Throughput: " + _NUM + " requests/s|" + _LABEL.format(*_REQ),
    "total_token_throughput": r"(?i)"
    + _NUM
    + " total tokens/s|"
    + _LABEL.format("total token", "tok"),
    "output_throughput": r"(?i)"
    + _NUM
    + " output tokens/s|"
    + _LABEL.format("output token", "tok")
    + r"|est\. speed input: [-+0-9.eE]+ toks/s, output: "
    + _NUM
    + " toks/s",
    "input_throughput": "(?i)"
    + _LABEL.format("input token", "tok")
    + r"|est\. speed input: "
    + _NUM
    + " toks/s",
}


# -- the free-disk guard ----------------------------------------------------------------------
@dataclass(frozen=True)
class DiskCheck:
    what: str  # "model" | "cache"
    path: str  # the existing directory whose filesystem was measured
    free_gib: float
    need_gib: float

    @property
    def ok(self) -> bool:
        return self.free_gib >= self.need_gib


def _existing(path: Path) -> Path:
    path = path.expanduser()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def cache_dir(environ: Mapping[str, str] | None = None) -> Path:
    """Where engines download and cache weights: HF_HUB_CACHE, HF_HOME/hub, ~/.cache/huggingface."""
    env = os.environ if environ is None else environ
    if env.get("HF_HUB_CACHE"):
        return Path(env["HF_HUB_CACHE"])
    if env.get("HF_HOME"):
        return Path(env["HF_HOME"]) / "hub"
    base = Path(env["XDG_CACHE_HOME"]) if env.get("XDG_CACHE_HOME") else Path.home() / ".cache"
    return base / "huggingface" / "hub"


def check_free_disk(
    model: str | None, need_gib: float, environ: Mapping[str, str] | None = None
) -> list[DiskCheck]:
    """Free space on the filesystems holding the model (a local path) and the weights cache.

    One check per distinct filesystem. A model given as a hub id is not a path: only the cache
    (where it would be downloaded) is measured.
    """
    places: list[tuple[str, Path]] = []
    if model and (os.sep in model or Path(model).exists()) and Path(model).expanduser().exists():
        places.append(("model", Path(model).expanduser().resolve()))
    places.append(("cache", _existing(cache_dir(environ))))
    seen: set[int] = set()
    checks: list[DiskCheck] = []
    for what, path in places:
        try:
            st = os.stat(path)
            usage = shutil.disk_usage(path)
        except OSError as error:
            raise TargetUnavailable(
                f"cannot measure free disk at {path}: {error.strerror or error}",
                hint="check the model path, or pass --min-free-disk 0 to skip the guard",
            ) from error
        if st.st_dev in seen:
            continue
        seen.add(st.st_dev)
        checks.append(DiskCheck(what, str(path), round(usage.free / GIB, 2), need_gib))
    return checks


def disk_refusal(checks: Sequence[DiskCheck], engine: str) -> TargetUnavailable | None:
    short = [c for c in checks if not c.ok]
    if not short:
        return None
    c = short[0]
    return TargetUnavailable(
        f"only {c.free_gib:.1f} GiB free on {c.path} (holding the {c.what}); offline runs of "
        f"{engine} need {c.need_gib:g} GiB",
        hint="free some space, or pass --min-free-disk GiB (0 disables the guard)",
    )


# -- scanning the output ----------------------------------------------------------------------
def _compile(patterns: Mapping[str, str]) -> dict[str, re.Pattern[str]]:
    out: dict[str, re.Pattern[str]] = {}
    for name, pattern in patterns.items():
        try:
            out[name] = re.compile(pattern)
        except re.error as error:
            raise UsageError(f"invalid throughput pattern for {name}: {error}") from error
        if out[name].groups < 1:
            raise UsageError(f"throughput pattern for {name} has no group around the number")
    return out


class OutputScanner:
    """Finds throughput figures (last match wins) and fault lines in output as it arrives.

    Fed raw chunks; only complete lines are matched (a carriage return ends a line too, so
    tqdm's redraws are lines), and the cost is O(new bytes) per feed.
    """

    MAX_FAULTS = 20

    def __init__(self, patterns: Mapping[str, str], fault_patterns: Sequence[str] = ()) -> None:
        self.patterns = _compile(patterns)
        self.faults_re = [re.compile(p) for p in fault_patterns]
        self.metrics: dict[str, float] = {}
        self.lines: dict[str, str] = {}
        self.faults: list[str] = []
        self._partial = b""

    def feed(self, data: bytes) -> bool:
        """Scan what is new; True when a figure was found or changed."""
        text = self._partial + data
        *complete, self._partial = re.split(rb"\r\n|\r|\n", text)
        if len(self._partial) > 1 << 16:  # a line without end: scan its head, drop the rest
            complete.append(self._partial)
            self._partial = b""
        return self._lines(complete)

    def finish(self) -> bool:
        rest, self._partial = self._partial, b""
        return self._lines([rest]) if rest else False

    def _lines(self, lines: list[bytes]) -> bool:
        changed = False
        for raw in lines:
            if not raw.strip():
                continue
            line = raw.decode("utf-8", errors="replace").strip()
            if len(self.faults) < self.MAX_FAULTS and any(f.search(line) for f in self.faults_re):
                self.faults.append(line[:500])
            for name, regex in self.patterns.items():
                m = regex.search(line)
                if m is None:
                    continue
                group = next((g for g in m.groups() if g), None)
                try:
                    value = float(group) if group is not None else None
                except ValueError:
                    value = None
                # A throughput below 0, nan or inf is no measurement: not a figure.
                if value is not None and math.isfinite(value) and value >= 0:
                    changed = changed or self.metrics.get(name) != value
                    self.metrics[name] = value
                    self.lines[name] = line[:500]
        return changed


# -- building the command ---------------------------------------------------------------------
def build_offline_command(
    engine: EngineProfile,
    model: str,
    *,
    tp: int | None = None,
    extra: Sequence[str] = (),
    python: str | None = None,
    model_profile: ModelProfile | None = None,
) -> tuple[list[str], dict[str, str]]:
    """(argv, env overrides) of the engine's offline entry point for `model`.

    Order: launcher, model, tp, offline default args, model-profile args, `extra`.
    """
    spec = engine.offline
    if not spec.launchers:
        raise ConfigError(
            f"engine {engine.name!r} has no offline entry point",
            hint="give the whole command: proctor offline --engine "
            f"{engine.name} --cmd -- CMD [ARGS], or set [engines.{engine.name}.offline] launchers",
        )
    choice = choose_launcher(engine.model_copy(update={"launchers": spec.launchers}), python)
    argv = list(choice.argv)
    argv += [choice.launcher.model_arg, model] if choice.launcher.model_arg else [model]
    model_profile = model_profile or ModelProfile(name="(none)")
    tp_value = tp if tp is not None else model_profile.tp
    tp_arg = spec.tp_arg if spec.tp_arg is not None else engine.tp_arg
    if tp_value is not None:
        if tp_value < 1:
            raise ConfigError(f"tensor parallelism {tp_value} must be >= 1", hint="pass --tp 1")
        if tp_arg:
            argv += [tp_arg, str(tp_value)]
        elif tp_value > 1:
            raise ConfigError(
                f"engine {engine.name!r} has no offline tensor-parallel flag",
                hint=f"set tp_arg in [engines.{engine.name}.offline]",
            )
    argv += spec.default_args
    if model_profile.supports(engine.name):
        argv += model_profile.args
    argv += list(extra)
    return argv, {**engine.env, **model_profile.env}


def throughput_patterns(engine: EngineProfile) -> dict[str, str]:
    return dict(engine.offline.throughput_patterns or DEFAULT_THROUGHPUT_PATTERNS)


def resolve_offline(job: OfflineJob, config: ProjectConfig) -> tuple[OfflineJob, dict[str, str]]:
    """The job with what its engine profile makes of it (`resolved`: the command, the patterns
    its figures and faults are read with, the disk guard), and the profiles' environment for
    the command. Bad input is a UsageError or ConfigError here, before anything runs."""
    from proctor.serve import profiles_for
    from proctor.spec.plan import check_executable

    engine = profiles_for(config).engine(job.engine)
    env: dict[str, str] = {}
    if job.cmd:
        command = list(job.args)
        check_executable(command, Path.cwd())
    else:
        assert job.model is not None  # the job's own check
        command, env = build_offline_command(
            engine, job.model, tp=job.tp, extra=job.args, python=job.python
        )
    need = (
        job.min_free_disk_gib
        if job.min_free_disk_gib is not None
        else engine.offline.min_free_disk_gib
    )
    if not math.isfinite(need) or need < 0:  # nan would switch the guard off unsaid
        raise UsageError(
            f"--min-free-disk {need:g}: must be a number of GiB >= 0 (0 disables the guard)"
        )
    plan = OfflinePlan(
        engine=engine.name,
        command=command,
        min_free_disk_gib=need,
        patterns=throughput_patterns(engine),
        faults=engine.fault_patterns("runtime"),
        entry="command" if job.cmd else "profile",
    )
    return job.model_copy(update={"resolved": plan}), env


# -- starting a supervised offline run -------------------------------------------------------
@dataclass
class OfflineRequest:
    """What `proctor offline` was asked: the job, and how its supervised run is started."""

    job: OfflineJob
    name: str | None = None
    runs_dir: str | None = None
    timeout: str | None = None
    env: list[str] = field(default_factory=list)
    key: str | None = None
    detach: bool = False
    gpu_sample: float | None = None


def offline_name(job: OfflineJob) -> str:
    model = Path(job.model.rstrip("/")).name if job.model else None
    return "-".join(p for p in ("offline", job.engine, model) if p)


def start_offline(request: OfflineRequest, config: ProjectConfig) -> Started:
    """Resolve the job against its engine profile, refusing bad input before any run exists,
    and start its run: `python -m proctor.jobs run JOB` (the resolved job)."""
    from proctor.spec.plan import RunFlags, resolve_run_plan
    from proctor.supervise.launch import RunSpec, start_run

    job, env = resolve_offline(request.job, config)
    assert job.resolved is not None
    # The user's --env wins over the profile's.
    env_flags = [f"{k}={v}" for k, v in env.items()] + list(request.env)
    flags = RunFlags(
        argv=job_argv(job),
        name=request.name or offline_name(job),
        runs_dir=request.runs_dir,
        timeout=request.timeout,
        env=env_flags,
        key=request.key,
        detach=request.detach,
        gpu_sample=request.gpu_sample,
    )
    plan = resolve_run_plan(flags, config)
    redactor = plan.redactor()
    facts = {
        "engine": job.resolved.engine,
        "model": job.model,
        "tp": job.tp,
        "command": redactor.argv(job.resolved.command),
        "min_free_disk_gib": job.resolved.min_free_disk_gib,
        "entry": job.resolved.entry,
    }
    return start_run(plan, RunSpec(kind="offline", extra={"offline": facts}))


# -- running ----------------------------------------------------------------------------------
@dataclass
class OfflineResult:
    status: str  # running | ok | failed | fault | refused | stopped | not-found
    exit_code: int | None = None  # the command's own status (None: never ran / unknown)
    metrics: dict[str, float] = field(default_factory=dict)
    faults: list[str] = field(default_factory=list)
    wall_time_s: float | None = None
    disk: list[DiskCheck] = field(default_factory=list)
    error: str | None = None

    @property
    def proctor_exit(self) -> int:
        """The exit status the workload entry reports (see the module docstring)."""
        if self.status == "ok":
            return 0
        if self.status == "fault":
            return 2
        if self.status in ("refused", "not-found"):
            return 69
        if self.status == "stopped":
            return 128 + signal.SIGTERM
        return 3


class _Stopped(Exception):
    pass


def _write_json(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(path.name + ".tmp")

    def write(text: str) -> None:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)

    write_checked(redact.data(data), OfflineDocument, write)


def run_offline(
    command: Sequence[str],
    output_dir: Path,
    *,
    engine: str,
    model: str | None = None,
    min_free_disk_gib: float = 0.0,
    patterns: Mapping[str, str] | None = None,
    fault_patterns: Sequence[str] = (),
    echo: bool = True,
    env: Mapping[str, str] | None = None,
) -> OfflineResult:
    """Guard the disk, run `command`, parse its output; metrics.json is always written."""
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    scanner = OutputScanner(
        DEFAULT_THROUGHPUT_PATTERNS if patterns is None else patterns, fault_patterns
    )
    redactor = Redactor.from_environment({}, (), env)
    result = OfflineResult(status="running")
    doc: dict[str, Any] = {
        "schema": SCHEMA,
        "kind": "offline",
        "engine": engine,
        "model": model,
        "command": redactor.argv(command),
        "min_free_disk_gib": min_free_disk_gib,
        "patterns": {k: v.pattern for k, v in scanner.patterns.items()},
    }
    path = output_dir / "metrics.json"

    def save() -> None:
        doc.update(
            status=result.status,
            exit_code=result.exit_code,
            wall_time_s=result.wall_time_s,
            disk=[{**asdict(c), "ok": c.ok} for c in result.disk],
            error=result.error,
            metrics=dict(scanner.metrics),
            units={n: metric_info(n).unit for n in scanner.metrics},
            lines=dict(scanner.lines),
            faults=list(scanner.faults),
        )
        _write_json(path, doc)

    if min_free_disk_gib > 0:
        result.disk = check_free_disk(model, min_free_disk_gib, env)
        refusal = disk_refusal(result.disk, engine)
        if refusal is not None:
            result.status, result.error = "refused", refusal.one_line()
            save()
            return result
    save()
    started = time.monotonic()
    proc: subprocess.Popen[bytes] | None = None
    with sigterm_stop(_Stopped) as term:
        try:
            proc = subprocess.Popen(
                list(command),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=dict(env) if env else None,
            )
            assert proc.stdout is not None
            fd = proc.stdout.fileno()
            for chunk in iter(lambda: os.read(fd, 65536), b""):
                if echo:
                    _echo(chunk)
                if scanner.feed(chunk):
                    save()
            scanner.finish()
            result.exit_code = proc.wait()
            result.status = (
                "fault" if scanner.faults else "ok" if result.exit_code == 0 else "failed"
            )
        except OSError as error:
            result.status = "not-found"
            result.error = f"could not start {redactor.text(command[0])}: {error.strerror or error}"
        except _Stopped:
            result.status = "stopped"
            if proc is not None:
                # Same process group: the supervisor's SIGTERM reached the command too.
                try:
                    result.exit_code = proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    result.exit_code = proc.wait()
        finally:
            term.disarm()  # a second SIGTERM (the kill ladder's) must not cut the save short
            result.wall_time_s = round(time.monotonic() - started, 3)
            result.metrics = dict(scanner.metrics)
            result.faults = list(scanner.faults)
            save()
    return result


def _echo(chunk: bytes) -> None:
    try:
        sys.stdout.buffer.write(chunk)
        sys.stdout.buffer.flush()
    except (OSError, ValueError):
        pass


def run_resolved(
    job: OfflineJob, output_dir: Path, *, env: Mapping[str, str] | None = None, echo: bool = True
) -> OfflineResult:
    """Run a resolved job (`resolve_offline`): guard the disk, run its command, parse."""
    plan = job.resolved
    if plan is None:
        raise UsageError("an offline job must be resolved against its engine profile first")
    return run_offline(
        plan.command,
        output_dir,
        engine=plan.engine,
        model=job.model,
        min_free_disk_gib=plan.min_free_disk_gib,
        patterns=plan.patterns,
        fault_patterns=plan.faults,
        echo=echo,
        env=env,
    )


def offline_outcome(result: OfflineResult) -> list[str]:
    """What the run says at its end: why it did not run, the first fault lines, its figures."""
    lines = [result.error] if result.error else []
    lines += [f"fault: {line}" for line in result.faults[:5]]
    return [*lines, summary(result)]


def summary(result: OfflineResult) -> str:
    shown = [f"{n} {v:g} {metric_info(n).unit}".rstrip() for n, v in result.metrics.items()]
    figures = ", ".join(shown) or "no throughput line found"
    took = f" in {result.wall_time_s:.1f} s" if result.wall_time_s is not None else ""
    return f"offline {result.status} (exit {result.exit_code}){took}: {figures}"

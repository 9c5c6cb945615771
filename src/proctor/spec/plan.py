"""Resolving a run: flags over env over proctor.toml over defaults, each value with its origin."""

from __future__ import annotations

import errno
import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from proctor.errors import TargetUnavailable, UsageError
from proctor.redact import Redactor, is_secret_name, remember
from proctor.spec.config import STORE_NAME, ProjectConfig, find_project_root
from proctor.spec.durations import parse_duration
from proctor.spec.envnames import NAME_RULE, env_name_problem, env_value_problem
from proctor.spec.merge import Settings, config_origin
from proctor.spec.names import derive_name, safe_name
from proctor.spec.values import Value

DEFAULT_GRACE_S = 10.0
DEFAULT_GPU_SAMPLE_S = 3.0
RUNS_DIR_ENV = "PROCTOR_RUNS_DIR"


@dataclass
class RunFlags:
    """What the user said on the command line; None means 'not given'. Its job settings are
    those `proctor run` declares on CommandJob (jobs/command.py, `run_flags` makes these);
    `runs_dir` and `detach` are run control."""

    argv: list[str]
    name: str | None = None
    runs_dir: str | None = None
    timeout: str | None = None
    grace: str | None = None
    gpu_sample: float | None = None
    env: list[str] = field(default_factory=list)
    key: str | None = None
    detach: bool = False
    cwd: str | None = None
    # Run even when the GPU preflight fails (docs/gpu-health.md); None: not given.
    allow_unhealthy_gpu: bool | None = None


@dataclass
class RunPlan:
    argv: list[str]
    name: Value
    runs_dir: Value
    store_path: Value
    timeout_s: Value
    grace_s: Value
    gpu_sample_s: Value
    env: dict[str, Value]
    key: Value
    detach: Value
    cwd: Value
    config_path: str | None
    secret_names: list[str]
    allow_unhealthy_gpu: Value = field(default_factory=lambda: Value(False, "default"))

    @property
    def env_values(self) -> dict[str, str]:
        return {k: str(v.value) for k, v in self.env.items()}

    def redactor(self, environ: Mapping[str, str] | None = None) -> Redactor:
        """The process's redactor, taught this plan's secrets: its secret-named env values and
        what its command line shows (URL credentials, headers, --api-key X, NAME=VALUE)."""
        own = Redactor.from_environment(self.env_values, self.secret_names, environ)
        own.learn_argv(self.argv)
        return remember(own)

    def options(self, redactor: Redactor) -> dict[str, dict[str, Any]]:
        """Every resolved value with its origin, secrets masked: for the record and --dry-run."""
        out: dict[str, dict[str, Any]] = {}
        for label in (
            "name",
            "runs_dir",
            "store_path",
            "timeout_s",
            "grace_s",
            "gpu_sample_s",
            "key",
            "detach",
            "cwd",
            "allow_unhealthy_gpu",
        ):
            out[label] = getattr(self, label).as_dict()
        masked = redactor.env(self.env_values)
        for k, v in self.env.items():
            out[f"env.{k}"] = {"value": masked[k], "origin": v.origin}
        return out


def _parse_env(items: list[str]) -> dict[str, str]:
    parsed: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or env_name_problem(name):
            raise UsageError(
                f"invalid --env {name!r}: the name must be {NAME_RULE}",
                hint="write --env NAME=VALUE",
            )
        problem = env_value_problem(name, value)
        if problem:
            raise UsageError(f"invalid --env {name!r}: {problem}")
        parsed[name] = value
    return parsed


def check_executable(argv: list[str], cwd: Path) -> None:
    if not argv:
        raise UsageError(
            "no command given", hint="write the command after --, e.g. proctor run -- make test"
        )
    program = argv[0]
    if os.sep in program:
        path = (cwd / program) if not os.path.isabs(program) else Path(program)
        if not path.exists():
            raise TargetUnavailable(f"command not found: {program}", hint="check the path")
        if path.is_dir() or not os.access(path, os.X_OK):
            raise TargetUnavailable(f"not executable: {program}", hint=f"chmod +x {program}")
        return
    if shutil.which(program) is None:
        raise TargetUnavailable(
            f"command not found on PATH: {program}",
            hint="install it, activate its environment, or give its full path",
        )


def resolve_runs_dir(
    flag: str | None,
    config: ProjectConfig,
    environ: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> Value:
    here = cwd or Path.cwd()
    root = config.source_path.parent if config.source_path else find_project_root(here)
    settings = Settings(
        flags={"runs_dir": flag},
        table={"runs_dir": config.run.runs_dir},
        table_origin=config_origin(config.source_path),
        environ=os.environ if environ is None else environ,
        env_names={"runs_dir": RUNS_DIR_ENV},
    )
    picked = settings.pick("runs_dir")
    base = root if picked.origin.startswith("config") else here
    if picked.value is None:
        return _usable_dir(Value(str(root / "logs"), "default"), "--runs-dir")
    given_by = {"flag": "--runs-dir", "default": "--runs-dir"}.get(
        picked.origin,
        RUNS_DIR_ENV if picked.origin.startswith("env:") else f"runs_dir in {config.source_path}",
    )
    given = base / picked.value
    try:
        resolved = given.resolve()
    except (OSError, RuntimeError) as error:  # RuntimeError: a symlink loop (Python < 3.13)
        raise UsageError(
            f"runs directory {given} cannot be used: {_why(error)}",
            hint=f"set {given_by} to a directory",
        ) from None
    return _usable_dir(Value(str(resolved), picked.origin), given_by)


def _why(error: BaseException) -> str:
    if isinstance(error, RuntimeError) or getattr(error, "errno", None) == errno.ELOOP:
        return "a symbolic link loop"
    if isinstance(error, OSError) and error.strerror:
        return error.strerror[0].lower() + error.strerror[1:]
    return str(error)


def _usable_dir(value: Value, given_by: str) -> Value:
    """A runs directory that is a file (or lies under one), a loop of symbolic links, or a
    name the filesystem refuses (a component over 255 bytes) is bad input, said as such."""
    path = Path(value.value)
    for candidate in (path, *path.parents):
        try:
            os.stat(candidate)
        except (FileNotFoundError, NotADirectoryError):
            continue  # created later; a file above it is named when the loop reaches it
        except OSError as error:
            raise UsageError(
                f"runs directory {path} cannot be used: {_why(error)}",
                hint=f"set {given_by} to a directory that can exist",
            ) from None
        if candidate.is_dir():
            break
        raise UsageError(
            f"runs directory {path} cannot be used: {candidate} is not a directory",
            hint=f"set {given_by} to a directory, or move {candidate} away",
        )
    return value


def resolve_store_path(config: ProjectConfig, runs_dir: Path, cwd: Path | None = None) -> Value:
    if config.store.path:
        root = config.source_path.parent if config.source_path else (cwd or Path.cwd())
        return Value(str((root / config.store.path).resolve()), f"config:{config.source_path}")
    return Value(str(runs_dir / STORE_NAME), "default")


def resolve_run_plan(
    flags: RunFlags,
    config: ProjectConfig,
    environ: Mapping[str, str] | None = None,
) -> RunPlan:
    env = os.environ if environ is None else environ
    cwd = Path(flags.cwd).resolve() if flags.cwd else Path.cwd()
    if flags.cwd and not cwd.is_dir():
        raise UsageError(f"--cwd {flags.cwd} is not a directory")
    check_executable(flags.argv, cwd)
    origin = config_origin(config.source_path)

    runs_dir = resolve_runs_dir(flags.runs_dir, config, env, cwd)
    store_path = resolve_store_path(config, Path(runs_dir.value), cwd)

    settings = Settings(
        flags={
            "timeout": flags.timeout,
            "grace": flags.grace,
            "gpu_sample": flags.gpu_sample,
            "allow_unhealthy_gpu": flags.allow_unhealthy_gpu or None,
        },
        table=config.run.model_dump(),
        table_origin=origin,
        environ={},
    )
    timeout = settings.pick("timeout", parse=lambda v: parse_duration(str(v), option="--timeout"))
    if timeout.value == 0:
        timeout = Value(None, timeout.origin)
    grace = settings.pick(
        "grace", DEFAULT_GRACE_S, parse=lambda v: parse_duration(str(v), option="--grace")
    )
    if flags.gpu_sample is not None and flags.gpu_sample < 0:
        raise UsageError("--gpu-sample must be 0 (off) or a positive number of seconds")
    gpu_sample = settings.pick("gpu_sample", DEFAULT_GPU_SAMPLE_S)
    allow_unhealthy = settings.pick("allow_unhealthy_gpu", False, parse=bool)

    merged: dict[str, Value] = {k: Value(v, origin) for k, v in config.run.env.items()}
    merged.update({k: Value(v, "flag") for k, v in _parse_env(flags.env).items()})
    if flags.name:
        name = Value(safe_name(flags.name), "flag")
    else:
        # From the masked argv: a secret typed on the command line must not name the log.
        redactor = Redactor.from_environment(
            {k: str(v.value) for k, v in merged.items()}, config.run.secret_names, env
        )
        redactor.learn_argv(flags.argv)
        masked = remember(redactor).argv(flags.argv)
        name = Value(derive_name(masked), "derived from the command")

    return RunPlan(
        argv=list(flags.argv),
        name=name,
        runs_dir=runs_dir,
        store_path=store_path,
        timeout_s=timeout,
        grace_s=grace,
        gpu_sample_s=gpu_sample,
        env=merged,
        key=Value(flags.key, "flag" if flags.key else "default"),
        detach=Value(flags.detach, "flag" if flags.detach else "default"),
        cwd=Value(str(cwd), "flag" if flags.cwd else "current directory"),
        config_path=str(config.source_path) if config.source_path else None,
        secret_names=list(config.run.secret_names),
        allow_unhealthy_gpu=allow_unhealthy,
    )


__all__ = ["RunFlags", "RunPlan", "Value", "is_secret_name", "resolve_run_plan"]

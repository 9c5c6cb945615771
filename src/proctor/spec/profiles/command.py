"""Turn an engine profile + model profile + run values into the server's argv and env."""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from proctor.errors import ConfigError, TargetUnavailable
from proctor.spec.profiles.models import AddonUse, EngineProfile, Launcher, ModelProfile

#: Probing an interpreter must never hang a run: a few seconds, then "unusable".
PROBE_TIMEOUT_S = 20.0

# Run inside the engine's interpreter: is the distribution installed, is the module there?
# find_spec on the top package only, then a file check, so vLLM is not imported (seconds).
_PROBE = r"""
import importlib.metadata as md, importlib.util as iu, json, os, sys
dist, module = sys.argv[1], sys.argv[2]
out = {"dist": None, "module": None}
if dist:
    try:
        out["dist"] = md.version(dist)
    except md.PackageNotFoundError:
        pass
if module:
    parts = module.split(".")
    spec = iu.find_spec(parts[0])
    if spec is not None:
        roots = list(spec.submodule_search_locations or [])
        if len(parts) == 1:
            out["module"] = spec.origin or "namespace"
        for root in roots:
            base = os.path.join(root, *parts[1:])
            cands = [base + ".py"] + [os.path.join(base, f) for f in ("__init__.py", "__main__.py")]
            for cand in cands:
                if os.path.isfile(cand):
                    out["module"] = cand
                    break
print(json.dumps(out))
"""


@dataclass(frozen=True)
class LauncherChoice:
    launcher: Launcher
    argv: list[str]  # the launcher's prefix: [python, "-m", module] or [/path/cmd, sub...]
    reason: str  # why this launcher (and why earlier ones were skipped), for the record


@functools.lru_cache(maxsize=64)
def _probe(python: str, dist: str, module: str, pythonpath: str) -> tuple[str | None, str | None]:
    # pythonpath is part of the cache key because it changes the answer.
    try:
        proc = subprocess.run(
            [python, "-c", _PROBE, dist, module],
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
            check=False,
        )
        data = json.loads(proc.stdout.strip().splitlines()[-1]) if proc.stdout.strip() else {}
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError):
        return None, None
    return data.get("dist"), data.get("module")


def _shebang_python(script: Path) -> str | None:
    try:
        with script.open("rb") as fh:
            first = fh.readline(512)
    except OSError:
        return None
    if not first.startswith(b"#!"):
        return None
    parts = first[2:].decode(errors="replace").split()
    if not parts:
        return None
    if Path(parts[0]).name == "env" and len(parts) > 1:
        return shutil.which(parts[1])
    return parts[0] if "python" in Path(parts[0]).name else None


def _find_python(engine: EngineProfile, python: str | None) -> str | None:
    chosen = python or engine.python
    if chosen:
        found = shutil.which(chosen) if os.sep not in chosen else chosen
        if found is None or not os.access(found, os.X_OK):
            raise TargetUnavailable(
                f"python interpreter {chosen!r} for engine {engine.name!r} not found",
                hint="pass --python with a path to an existing interpreter",
            )
        return found
    return shutil.which("python3") or shutil.which("python")


def _find_command(name: str, python: str | None) -> str | None:
    # With an explicit interpreter, its own bin directory is searched first (a venv's script).
    if python is not None and os.sep in name:
        return name if os.access(name, os.X_OK) else None
    if python is not None:
        sibling = Path(python).parent / name
        if sibling.is_file() and os.access(sibling, os.X_OK):
            return str(sibling)
    return shutil.which(name)


def choose_launcher(engine: EngineProfile, python: str | None = None) -> LauncherChoice:
    """The first usable launcher of `engine`, with the reason. TargetUnavailable if none."""
    interpreter = _find_python(engine, python)
    explicit = bool(python or engine.python)
    skipped: list[str] = []
    pythonpath = os.environ.get("PYTHONPATH", "")
    for i, launcher in enumerate(engine.launchers):
        last = i == len(engine.launchers) - 1
        if launcher.command is not None:
            cmd = _find_command(launcher.command[0], interpreter if explicit else None)
            if cmd is None:
                skipped.append(f"{launcher.command[0]!r} not found on PATH")
                continue
            if launcher.requires_distribution:
                owner = _shebang_python(Path(cmd)) or interpreter
                if owner is not None:
                    dist, _ = _probe(owner, launcher.requires_distribution, "", pythonpath)
                    if dist is None:
                        skipped.append(
                            f"{cmd} is unusable: distribution "
                            f"{launcher.requires_distribution!r} is not installed for {owner}"
                        )
                        continue
            return LauncherChoice(
                launcher, [cmd, *launcher.command[1:]], "; ".join([*skipped, f"using {cmd}"])
            )
        assert launcher.module is not None
        if interpreter is None:
            skipped.append("no python interpreter on PATH")
            continue
        if not last:
            _, found = _probe(interpreter, "", launcher.module, pythonpath)
            if found is None:
                skipped.append(f"module {launcher.module} not importable by {interpreter}")
                continue
        return LauncherChoice(
            launcher,
            [interpreter, "-m", launcher.module],
            "; ".join([*skipped, f"using {interpreter} -m {launcher.module}"]),
        )
    raise TargetUnavailable(
        f"no usable launcher for engine {engine.name!r}: {'; '.join(skipped)}",
        hint=f"install the engine, or point --python (or [engines.{engine.name}] python) at "
        "the interpreter that has it",
    )


def check_runnable(engine: str, argv: Sequence[str]) -> None:
    """Refuse (TargetUnavailable, 69) a server command that cannot start: `choose_launcher`
    takes an engine's last module launcher without asking its python, so `python -m vllm...`
    with no vLLM in that python started, and failed only at the ready gate."""
    if len(argv) < 3 or argv[1] != "-m":
        return  # a command launcher was found on PATH (and its distribution checked)
    python, module = argv[0], argv[2]
    _, found = _probe(python, "", module, os.environ.get("PYTHONPATH", ""))
    if found is None:
        raise TargetUnavailable(
            f"engine {engine!r} cannot start: module {module} is not importable by {python}",
            hint=f"install the engine there, or pass --python (or [engines.{engine}] python)"
            " with the interpreter of the environment that has it",
        )


def build_server_command(
    engine: EngineProfile,
    model_profile: ModelProfile | None,
    model_path: str,
    tp: int | None = None,
    port: int = 8000,
    extra: Sequence[str] = (),
    python: str | None = None,
    *,
    host: str | None = "127.0.0.1",
    served_model_name: str | None = None,
    addons: Sequence[AddonUse] = (),
    base_env: Mapping[str, str] | None = None,
) -> tuple[list[str], dict[str, str]]:
    """(argv, env overrides) to start `engine` serving `model_path`.

    Order: launcher, model, tp, port, host, engine defaults, model args, add-on args, `extra`
    (last, so a user's flag wins where the engine takes the last occurrence). `env` holds only
    the overrides (engine env, then model env, then add-on env); merge it over os.environ.
    """
    model = model_profile or ModelProfile(name="(none)")
    if not model.supports(engine.name):
        raise ConfigError(
            f"model profile {model.name!r} is written for {', '.join(model.engines or [])},"
            f" not {engine.name}",
            hint="choose a model profile for this engine",
        )
    if not 1 <= port <= 65535:
        raise ConfigError(f"port {port} is out of range", hint="use a port between 1 and 65535")
    choice = choose_launcher(engine, python)
    argv = list(choice.argv)
    if choice.launcher.model_arg:
        argv += [choice.launcher.model_arg, model_path]
    else:
        argv.append(model_path)
    tp_value = tp if tp is not None else model.tp
    if tp_value is not None:
        if tp_value < 1:
            raise ConfigError(f"tensor parallelism {tp_value} must be >= 1", hint="pass --tp 1")
        if engine.tp_arg:
            argv += [engine.tp_arg, str(tp_value)]
        elif tp_value > 1:
            raise ConfigError(
                f"engine {engine.name!r} has no tensor-parallel flag; cannot run tp={tp_value}",
                hint=f"use --tp 1, or set tp_arg in [engines.{engine.name}]",
            )
    argv += [engine.port_arg, str(port)]
    if host and engine.host_arg:
        argv += [engine.host_arg, host]
    if served_model_name and engine.served_model_name_arg:
        argv += [engine.served_model_name_arg, served_model_name]
    argv += engine.default_args
    argv += model.args
    env: dict[str, str] = dict(base_env or {})
    env.update(engine.env)
    env.update(model.env)
    for use in addons:
        if use.addon.engines is not None and engine.name not in use.addon.engines:
            raise ConfigError(
                f"add-on {use.addon.name!r} is not available for engine {engine.name!r}",
                hint=f"it is written for {', '.join(use.addon.engines)}",
            )
        try:
            argv += use.addon.render_args(use.values)
        except ValueError as exc:
            raise ConfigError(str(exc), hint="pass the add-on's parameter") from exc
        env.update(use.addon.env)
    argv += list(extra)
    return argv, env


def uses_chat_template(addons: Sequence[AddonUse]) -> bool:
    """Whether benchmarks against this server must apply the chat template (e.g. MTP)."""
    return any(use.addon.use_chat_template for use in addons)

"""A server request and the command line its engine and model profiles make of it.

Pure planning (no process is started here): the server workflow (proctor.serve) starts what
these build, and targets that launch servers elsewhere (Slurm) build the same command.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from proctor.redact import Redactor
from proctor.spec.config import ProjectConfig
from proctor.spec.plan import RunFlags, RunPlan, Value, resolve_run_plan
from proctor.spec.profiles.loader import ProfileSet, load_profiles
from proctor.spec.profiles.models import AddonUse, EngineProfile


def profiles_for(config: ProjectConfig) -> ProfileSet:
    table = {k: config.table(k) for k in ("engines", "models", "addons", "fault_sets")}
    origin = str(config.source_path) if config.source_path else "proctor.toml"
    return load_profiles(table, origin=origin)


@dataclass
class ServerRequest:
    engine: str
    model: str
    port: int = 8000
    host: str = "127.0.0.1"
    tp: int | None = None
    model_profile: str | None = None
    addons: list[tuple[str, dict[str, str | int]]] = field(default_factory=list)
    extra: list[str] = field(default_factory=list)
    python: str | None = None
    served_model_name: str | None = None
    min_free_disk_gib: float = 1.0


def server_command(
    request: ServerRequest, profiles: ProfileSet
) -> tuple[EngineProfile, str, list[str], dict[str, str], bool]:
    engine = profiles.engine(request.engine)
    model = profiles.resolve_model(request.model_profile, request.model, engine)
    uses = [AddonUse(addon=profiles.addon(name), values=values) for name, values in request.addons]
    argv, env = build_command(engine, model, request, uses)
    chat = any(use.addon.use_chat_template for use in uses)
    return engine, model.name, argv, env, chat


def build_command(
    engine: EngineProfile, model: Any, request: ServerRequest, uses: Sequence[AddonUse]
) -> tuple[list[str], dict[str, str]]:
    from proctor.spec.profiles.command import build_server_command

    return build_server_command(
        engine,
        model,
        request.model,
        tp=request.tp,
        port=request.port,
        extra=request.extra,
        python=request.python,
        host=request.host,
        served_model_name=request.served_model_name,
        addons=uses,
    )


def server_plan(
    flags: RunFlags,
    config: ProjectConfig,
    *,
    argv: list[str],
    name: str,
    env: dict[str, str],
    origin: str,
) -> RunPlan:
    """The detached run of a server: `argv`, `name` unless the user named it, the profile's `env`
    under the user's --env, and every env value the profile set marked as coming from `origin`."""
    flags.argv = argv
    flags.name = flags.name or name
    flags.env = [f"{k}={v}" for k, v in env.items()] + list(flags.env)
    flags.detach = True
    plan = resolve_run_plan(flags, config)
    for k, v in env.items():
        if plan.env[k].value == v:
            plan.env[k] = Value(v, origin)
    return plan


def applied_facts(
    request: ServerRequest,
    redactor: Redactor,
    *,
    engine: str,
    model_profile: str,
    argv: list[str],
    plan: RunPlan,
    chat: bool,
) -> dict[str, Any]:
    """What the server record says was applied: profiles, command and env (secrets masked).

    The env is the run plan's: every variable the server's process gets on top of the
    inherited environment (the profiles', the project config's and the user's --env), never
    the profiles' alone, so what is printed and recorded is what the process got.
    """
    env = plan.env_values
    return {
        "engine": engine,
        "model": request.model,
        "model_profile": model_profile,
        "addons": [name for name, _ in request.addons],
        "port": request.port,
        "host": request.host,
        "tp": request.tp,
        "applied_env": redactor.env(env),
        "argv": redactor.argv(argv),
        "use_chat_template": chat,
        "served_model_name": request.served_model_name,
    }


def server_name(request: ServerRequest) -> str:
    base = os.path.basename(request.model.rstrip("/")) or "model"
    return f"serve-{request.engine}-{base}-p{request.port}"


__all__ = [
    "ServerRequest",
    "build_command",
    "profiles_for",
    "server_command",
    "server_name",
]

"""The target registry: `parse_target(url)` -> a Target, whatever its kind.

Every kind is one `TargetKind` entry: its URL schemes, a pydantic options model (discriminated
by `kind`), how options are built from the URL + flags + proctor.toml, how a Target is built
from them (or, for kinds that rent machines, acquired), how one is rebuilt from a run's
record, and the capabilities it declares (targets/base.py). Commands never branch on a kind:

    spec = target_options("ssh://me@gpu1", config, identity_file="~/.ssh/k")   # typed, validated
    target = parse_target("ssh://me@gpu1", config)                             # a Target
    acquired = acquire(spec, TargetContext(config, runs_dir), identity)        # 1..N Targets
    target = target_from_record(remote_json)                                   # reconnect
    kind_of_run(run_dir).inspect_run                                           # INSPECT

Adding a target is one module with one `register_target(TargetKind(...))`. The built-in
kinds (local, ssh, runpod, slurm) are in targets/kinds.py; modules named in the environment
variable PROCTOR_TARGETS (comma-separated) or in the `proctor.targets` entry-point group are
imported on first use, so a plugin (or a test) registers its own.
"""

from __future__ import annotations

import importlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, ValidationError

from proctor.errors import UsageError, invalid
from proctor.spec.config import ProjectConfig
from proctor.targets.base import PLAN, PlanCapable, Target, capable

if TYPE_CHECKING:
    from proctor.spec.plan import RunPlan

PLUGINS_ENV = "PROCTOR_TARGETS"
ENTRY_POINTS = "proctor.targets"


class TargetOptions(BaseModel):
    """The options of one target kind; subclasses narrow `kind` to a Literal."""

    model_config = ConfigDict(extra="forbid")

    kind: str
    url: str  # what the user typed (recorded; never a secret: keys are named by path)


@dataclass
class TargetContext:
    """What building a target may need besides its options."""

    config: ProjectConfig = field(default_factory=ProjectConfig)
    runs_dir: Path | None = None
    timeout_s: float | None = None  # the run's time limit (Slurm derives --time from it)
    keep_for_server: bool = False  # a server will outlive the command on the machine
    one_machine: bool = False  # a self-contained command: one machine (node), not a group


@dataclass
class Acquired:
    """The machines a command runs on, ready to prepare: one for most kinds, N pods for a
    Runpod group. `deadline` is the budget's end (unix time) when the kind has one; `view()`
    reports what was acquired and how it was released (for `--json` and the text report)."""

    targets: list[Target]
    group: str | None = None
    deadline: float | None = None
    started_at: float | None = None  # when the budget started (with `deadline`)
    view_key: str = "machine"  # the --json key of view() ("pod" for Runpod)
    view: Callable[[], dict[str, Any]] | None = None
    text: Callable[[dict[str, Any]], str] | None = None


Parse = Callable[[str, ProjectConfig, dict[str, Any]], TargetOptions]
Build = Callable[[Any, TargetContext], Target]
Acquire = Callable[[Any, TargetContext, Any], Acquired]
FromRecord = Callable[[dict[str, Any]], Target]
#: INSPECT: (run dir, per-tool timeout s, worker patterns) -> a local inspect's rows (+ node).
InspectRun = Callable[[Path, float, tuple[str, ...], tuple[int, ...]], list[dict[str, Any]]]


@dataclass(frozen=True)
class TargetKind:
    """One kind of target. `overrides` names the flags it accepts (option -> flag text);
    a flag given for a kind that does not accept it is a usage error naming the kinds that do."""

    kind: str
    schemes: tuple[str, ...]
    options: type[TargetOptions]
    parse: Parse
    capabilities: frozenset[str]
    syntax: str  # e.g. "ssh://user@host[:port]", for hints
    overrides: frozenset[str] = frozenset()
    build: Build | None = None  # None: machines are acquired (acquire)
    acquire: Acquire | None = None
    from_record: FromRecord | None = None
    inspect_run: InspectRun | None = None  # INSPECT: stacks where the run's processes are


_REGISTRY: dict[str, TargetKind] = {}
_SCHEMES: dict[str, str] = {}
_loaded = False

FLAG_NAMES = {"reuse_pods": "--pod", "time_limit": "--time", "remote_python": "--remote-python"}


def flag_name(option: str) -> str:
    return FLAG_NAMES.get(option, "--" + option.replace("_", "-"))


def register_target(kind: TargetKind) -> TargetKind:
    """Add (or replace) a kind; its schemes then parse to it."""
    for scheme in kind.schemes:
        owner = _SCHEMES.get(scheme)
        if owner is not None and owner != kind.kind:
            raise ValueError(f"scheme {scheme!r} is already {owner!r}'s")
    _REGISTRY[kind.kind] = kind
    for scheme in kind.schemes:
        _SCHEMES[scheme] = kind.kind
    return kind


def _load() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    importlib.import_module("proctor.targets.kinds")
    from importlib.metadata import entry_points

    names = [m.strip() for m in os.environ.get(PLUGINS_ENV, "").split(",") if m.strip()]
    for name in names:
        try:
            importlib.import_module(name)
        except ImportError as error:
            raise UsageError(
                f"cannot load target module {name!r} named in {PLUGINS_ENV}: {error}",
                hint=f"fix or unset {PLUGINS_ENV}",
            ) from None
    for point in entry_points(group=ENTRY_POINTS):
        point.load()


def kinds() -> dict[str, TargetKind]:
    _load()
    return dict(_REGISTRY)


def _hint() -> str:
    return "use " + ", ".join(k.syntax for k in kinds().values())


def scheme_of(url: str) -> str:
    """`ssh://u@h` -> ssh; `runpod?keep` and `runpod:ID` -> runpod; `local` -> local."""
    return url.split(":", 1)[0].split("?", 1)[0].strip().lower()


def kind_for_url(url: str) -> TargetKind:
    _load()
    name = _SCHEMES.get(scheme_of(url))
    if name is None:
        raise UsageError(f"unknown --target {url!r}", hint=_hint())
    return _REGISTRY[name]


def kind_named(name: str) -> TargetKind:
    _load()
    if name not in _REGISTRY:
        raise UsageError(f"unknown target kind {name!r}", hint=_hint())
    return _REGISTRY[name]


def target_options(
    url: str | None, config: ProjectConfig | None = None, **overrides: Any
) -> TargetOptions:
    """The typed options of `url` (default local) from the URL, the flags in `overrides` (None
    and False mean "not given") and proctor.toml. Flags the kind does not take: UsageError."""
    kind = kind_for_url(url or "local")
    given = {k: v for k, v in overrides.items() if v is not None and v is not False and v != []}
    foreign = sorted(set(given) - kind.overrides)
    if foreign:
        flags = "/".join(flag_name(f) for f in foreign)
        takers = [k.syntax for k in kinds().values() if set(foreign) <= k.overrides]
        raise UsageError(
            f"{flags} do not apply to a {kind.kind} target",
            hint=f"use a target that takes them: {', '.join(takers)}" if takers else "drop them",
        )
    try:
        return kind.parse(url or "local", config or ProjectConfig(), given)
    except ValidationError as error:
        raise invalid(error, what=f"--target {url}", hint=kind.syntax) from None


def options_from_dict(data: dict[str, Any]) -> TargetOptions:
    """Options back from their JSON form, validated by the model of their `kind`."""
    kind = kind_named(str(data.get("kind")))
    return kind.options.model_validate(data)


def open_target(options: TargetOptions, context: TargetContext | None = None) -> Target:
    """The Target for `options` (kinds that rent machines: see `acquire`)."""
    kind = kind_named(options.kind)
    if kind.build is None:
        raise UsageError(
            f"a {kind.kind} target is acquired, not opened", hint="proctor.targets.registry.acquire"
        )
    return kind.build(options, context or TargetContext())


def open_planner(options: TargetOptions, plan: RunPlan, config: ProjectConfig) -> PlanCapable:
    """The target that starts `plan` from here (local, Slurm), opened for the plan's runs dir and
    time limit; a kind that cannot run a command is a usage error. Close it once started."""
    context = TargetContext(config, Path(plan.runs_dir.value), plan.timeout_s.value)
    planned = capable(open_target(options, context), PLAN)
    if planned is None:
        raise UsageError(f"a {options.kind} target cannot run a command")
    return planned


def parse_target(url: str | None, config: ProjectConfig | None = None, **overrides: Any) -> Target:
    """`url` (+ flags, + proctor.toml) -> its Target, through the registry."""
    cfg = config or ProjectConfig()
    return open_target(target_options(url, cfg, **overrides), TargetContext(cfg))


def acquire(options: TargetOptions, context: TargetContext, identity: Any) -> Acquired:
    """The machines to run on: rented/reused by kinds that do so, else the one target."""
    kind = kind_named(options.kind)
    if kind.acquire is not None:
        return kind.acquire(options, context, identity)
    from proctor.record.rundir import new_run_id

    return Acquired([open_target(options, context)], group=new_run_id())


def target_from_record(remote: dict[str, Any]) -> Target:
    """The target a far run was started on, rebuilt from its `.remote.json`."""
    info = remote.get("target") or {}
    kind = kind_named(str(info.get("kind")))
    if kind.from_record is None:
        raise UsageError(f"a {kind.kind} run cannot be reconnected to from its record")
    return kind.from_record(remote)


def kind_of_run(run_dir: Path) -> TargetKind:
    """The kind a run directory belongs to: for a far run, the target in its `.remote.json`
    (the far record may say "local": it ran locally *there*); else its record's
    `target.kind`; local when neither says. A kind not registered here is a usage error."""
    name = "local"
    for file in (".remote.json", "record.json"):
        try:
            data = json.loads((run_dir / file).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        target = data.get("target") if isinstance(data, dict) else None
        if isinstance(target, dict) and target.get("kind"):
            name = str(target["kind"])
            break
    _load()
    if name not in _REGISTRY:
        raise UsageError(
            f"{run_dir.name} ran on a {name!r} target, which is not registered here",
            hint=f"load the module that registers it ({PLUGINS_ENV})",
        )
    return _REGISTRY[name]


__all__ = [
    "PLUGINS_ENV",
    "Acquired",
    "TargetContext",
    "TargetKind",
    "TargetOptions",
    "acquire",
    "flag_name",
    "kind_for_url",
    "kind_named",
    "kind_of_run",
    "kinds",
    "open_planner",
    "open_target",
    "options_from_dict",
    "parse_target",
    "register_target",
    "scheme_of",
    "target_from_record",
    "target_options",
]

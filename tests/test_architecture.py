"""Dependencies flow one way: a module imports only from its own layer or the layers below it.

The layers and why they are in this order are in docs/architecture.md; LAYERS here is that table.
Every import counts, including the ones inside functions (a lazy import hides a cycle, it does
not remove it) and the ones under TYPE_CHECKING.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "proctor"

# Lowest first. A module may import from its own layer and any layer listed before it.
LAYERS: list[tuple[str, ...]] = [
    ("errors", "redact", "crash", "version", "stats"),  # foundation: imports nothing above
    ("spec",),  # what the user asked for: config, durations, plans, profiles
    ("jobs",),  # typed jobs and the documents their runs leave (data only)
    ("source",),  # which code: identity, archive, manifest of a tree
    # The record's typed models (data only), below the results and the store that read them;
    # the rest of `record` writes the store row, so it sits above it. A module named here has
    # this layer instead of its package's.
    ("record.schema", "record.version", "record.exitfile", "record.runid"),
    ("results",),  # reading numbers out of files: parsers, baselines
    ("store",),  # the SQLite index (rows from the typed records)
    ("record",),  # the evidence in a run directory: schema, status, manifest, finish
    ("monitors",),  # watching without acting: processes, logs, GPU, readiness, drain
    ("supervise",),  # acting on processes: launch, wrapper, kill ladder, inspection
    ("targets",),  # where runs execute (local, ssh, runpod, slurm) and the run service on them
    ("serve",),  # the inference-server workflow: start, ready, stop
    ("workloads",),  # load generator, gsm8k, offline, sweep
    # server + workloads + drain + teardown as one run; grids of them; running any typed job
    ("flow", "server_sweep", "jobs.run", "jobs.submit", "jobs.step_run", "jobs.__main__"),
    ("report",),  # HTML and tables read from the store and run directories
    ("api", "cli", "__init__", "__main__"),  # the public API and the thin shell on top
]
LAYER_OF = {name: rank for rank, names in enumerate(LAYERS) for name in names}


def _top(module: str) -> str:
    """'proctor.spec.plan' -> 'spec'; 'proctor.record.schema' -> 'record.schema' (a module
    with its own layer); 'proctor' -> '__init__'."""
    parts = module.split(".")
    if ".".join(parts[1:3]) in LAYER_OF:
        return ".".join(parts[1:3])
    return parts[1] if len(parts) > 1 else "__init__"


def _imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [
                (node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "proctor"
            ]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "proctor":
                # `from proctor import spec` names a package; `import __version__` the top module
                found += [
                    (node.lineno, f"proctor.{a.name}" if a.name in LAYER_OF else "proctor")
                    for a in node.names
                ]
            elif node.module.startswith("proctor."):
                found.append((node.lineno, node.module))
    return found


def _own_top(path: Path) -> str:
    rel = path.relative_to(SRC)
    module = ".".join(rel.with_suffix("").parts)
    if module in LAYER_OF:
        return module
    return rel.parts[0].removesuffix(".py") if len(rel.parts) > 1 else rel.stem


def _violations() -> list[str]:
    bad = []
    for path in sorted(SRC.rglob("*.py")):
        own = _own_top(path)
        for line, module in _imports(path):
            other = _top(module)
            if other not in LAYER_OF:
                bad.append(f"{path.relative_to(SRC)}:{line}: {module}: no layer for {other!r}")
            elif LAYER_OF[other] > LAYER_OF[own]:
                bad.append(
                    f"{path.relative_to(SRC)}:{line}: {own} imports {module} (a layer above)"
                )
    return bad


def test_every_package_has_a_layer() -> None:
    tops = {_own_top(p) for p in SRC.rglob("*.py")}
    assert sorted(tops - set(LAYER_OF)) == []


def test_imports_only_go_down_the_layers() -> None:
    assert _violations() == []


@pytest.mark.parametrize(
    "upper,lower", [("cli", "spec"), ("supervise", "monitors"), ("store", "record.schema")]
)
def test_the_check_sees_a_wrong_way_import(tmp_path: Path, upper: str, lower: str) -> None:
    """A test that cannot fail is a defect: an import up the layers is reported."""
    planted = tmp_path / "m.py"
    planted.write_text(f"def f():\n    from proctor.{upper} import x\n", encoding="utf-8")
    (module,) = [m for _, m in _imports(planted)]
    assert LAYER_OF[_top(module)] > LAYER_OF[lower]

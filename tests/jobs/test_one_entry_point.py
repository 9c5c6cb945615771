"""One entry point runs a job: no module builds a command line of proctor's own CLI or of a
workload module from options (the argv-rebuilding sites issue 21 removed). The one command line
that runs a workload is `python -m proctor.jobs run JOB` (jobs/argv.py); the far side of
`--target` is handed a typed request, not flags: a typed job's submission (`python -m
proctor.jobs submit`) or a server workflow step (`python -m proctor.jobs step`), both from the
far step (targets/remote/step.py); no CLI module is ever launched."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "proctor"
# What runs a workload or a command: the workload modules, the CLI and the jobs entry. (Other
# helpers a target launches, such as Slurm's node-side inspector, are not workloads.)
WORKLOAD_OR_CLI = ("proctor.workloads", "proctor.cli", "proctor.jobs")
# The one place each may be named in a command line.
ALLOWED = {
    "proctor.jobs": {"jobs/argv.py", "targets/remote/step.py"},
}


def launched_modules(path: Path) -> list[tuple[int, str]]:
    """(line, module) of each list literal holding "-m" followed by a proctor module."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.List):
            continue
        words = [e.value if isinstance(e, ast.Constant) else None for e in node.elts]
        for i, word in enumerate(words[:-1]):
            nxt = words[i + 1]
            if word == "-m" and isinstance(nxt, str) and nxt.startswith("proctor"):
                found.append((node.lineno, nxt))
    return found


def test_only_the_jobs_entry_and_the_far_request_are_launched_by_module() -> None:
    bad = []
    for path in sorted(SRC.rglob("*.py")):
        rel = str(path.relative_to(SRC))
        for line, module in launched_modules(path):
            if module.startswith(WORKLOAD_OR_CLI) and rel not in ALLOWED.get(module, set()):
                bad.append(f"{rel}:{line}: launches {module}")
    assert bad == []


def test_the_check_sees_a_rebuilt_command_line(tmp_path: Path) -> None:
    """A test that cannot fail is a defect: the old flow workload's argv is reported."""
    planted = tmp_path / "m.py"
    planted.write_text(
        'import sys\nargv = [sys.executable, "-m", "proctor.workloads.loadgen", "--isl", "8"]\n',
        encoding="utf-8",
    )
    assert launched_modules(planted) == [(2, "proctor.workloads.loadgen")]

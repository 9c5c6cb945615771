"""One node's share of `proctor inspect` on a Slurm group run, run where the processes are:
`python -m proctor.targets.slurm.nodeinspect REMOTE_RUN_DIR OUT_DIR TIMEOUT_S [--pids P,Q]
[PATTERN...]`.

The controller starts it on every node of the live job as one overlapping step
(`srun --jobid J --overlap`). Each task finds its node's run (`nodes/<node>/record.json`: the
wrapper recorded the engine's process there), takes the stacks of the engine's workers (the
descendants whose command line matches a PATTERN, the engine profile's worker patterns; with
none, every descendant; with --pids, those of the given pids that are the engine or one of
its descendants on this node) exactly as a local `proctor inspect` does, and writes what it found to
OUT_DIR/<node>.json on the shared filesystem: the rows, each tool's output text, or why not.
It always exits 0 once that file is written; the controller decides the exit code.

Like the node runner, it imports no pydantic, rich or typer.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from proctor.errors import ProctorError
from proctor.record.rundir import RunDir
from proctor.targets.slurm.node import node_name

#: A node's answer keeps at most this much of each tool's output (a gdb `bt` of a big engine).
MAX_TEXT = 4 << 20
#: Helpers outside the worker patterns that also get a stack, as a local inspect takes.
EXTRA_DESCENDANTS = 4
PIDS_FLAG = "--pids"


def node_pids(run: RunDir, patterns: list[str], wanted: list[int] | None = None) -> list[int]:
    """The engine's workers on this node (within its process tree only), else its root; with
    `wanted`, those of its pids that are the root or one of its descendants."""
    from proctor.monitors.proctree import ProcessIdentity, descendants, find_workers

    process = (run.read_json("record.json") or {}).get("process") or {}
    if not process.get("pid"):
        return []
    root = ProcessIdentity(int(process["pid"]), float(process["create_time"]))
    if not root.is_alive():
        return []
    if wanted:
        tree = {root.pid, *(d.pid for d in descendants(root))}
        return [pid for pid in wanted if pid in tree]
    pids = [w.pid for w in find_workers(root, patterns)] or [root.pid]
    if root.pid not in pids:
        pids.insert(0, root.pid)
    extra = [d.pid for d in descendants(root) if d.pid not in pids][:EXTRA_DESCENDANTS]
    return pids + extra


def inspect_node(
    run_dir: Path, timeout_s: float, patterns: list[str], wanted: list[int] | None = None
) -> dict[str, Any]:
    """This node's answer: {"node", "rows", "files" (name -> text), "error", "exit"}."""
    from proctor.supervise.inspect import inspect

    node = node_name()
    answer: dict[str, Any] = {"node": node, "rows": [], "files": {}, "error": None, "exit": 0}
    run = RunDir(run_dir / "nodes" / node)
    pids = node_pids(run, patterns, wanted)
    if not pids:
        what = (
            f"none of pids {wanted} is a live process of this run"
            if wanted
            else ("no live process of this run")
        )
        answer.update(error=f"{what} on {node}", exit=64)
        return answer
    with tempfile.TemporaryDirectory(prefix="proctor-inspect-") as tmp:
        try:
            results = inspect(pids, tmp, timeout_s)
        except ProctorError as error:
            answer.update(error=error.one_line(), exit=int(error.exit_code))
            return answer
        for result in results:
            text = result.path.read_text(encoding="utf-8", errors="replace")
            answer["files"][result.path.name] = text[:MAX_TEXT]
            answer["rows"].append(result.to_dict())
    return answer


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) < 3:
        sys.stderr.write(
            "usage: python -m proctor.targets.slurm.nodeinspect REMOTE_RUN_DIR "
            "OUT_DIR TIMEOUT_S [--pids P,Q] [PATTERN...]\n"
        )
        return 64
    rest = list(args[3:])
    wanted = None
    if rest[:1] == [PIDS_FLAG] and len(rest) > 1:
        wanted = [int(p) for p in rest[1].split(",") if p]
        rest = rest[2:]
    answer = inspect_node(Path(args[0]), float(args[2]), rest, wanted)
    out = Path(args[1])
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / f".{answer['node']}.json.tmp"
    tmp.write_text(json.dumps(answer, allow_nan=False), encoding="utf-8")
    os.replace(tmp, out / f"{answer['node']}.json")
    return 0


if __name__ == "__main__":
    from proctor.crash import guarded

    sys.exit(guarded("proctor node inspect", main))

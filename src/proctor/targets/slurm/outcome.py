"""One outcome for a multi-node run, from Slurm's verdict and every node's own evidence.

Rules (never success without every node's exit_code saying 0):
- TIMEOUT / DEADLINE: `timeout`, with Slurm's reason.
- CANCELLED: `stopped` (by `proctor runs stop` or anyone's scancel).
- NODE_FAIL, BOOT_FAIL, PREEMPTED, OUT_OF_MEMORY, ...: `failed`, with Slurm's reason; a node
  that left no exit status is named as the failed node.
- COMPLETED / FAILED: from the nodes: all expected nodes 0 -> `ok`; any node non-zero ->
  `failed` (that node's status passes through); a node with no exit status -> `unknown`.
- A node whose own wrapper hit proctor's --timeout makes the run `timeout`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from proctor.errors import ExitCode

SLURM_TIMEOUT = frozenset({"TIMEOUT", "DEADLINE"})
SLURM_STOPPED = frozenset({"CANCELLED"})
SLURM_RAN_TO_END = frozenset({"COMPLETED", "FAILED"})


@dataclass
class NodeResult:
    """What one node's fetched run directory says."""

    node: str
    present: bool
    exit_code: int | None = None
    signal: str | None = None
    outcome: str | None = None
    verified: bool = False
    problem: str | None = None

    def as_dict(self) -> dict[str, Any]:
        # The node's name is the key its entry is filed under, not part of the entry.
        return {k: v for k, v in asdict(self).items() if k != "node"}


@dataclass
class GroupOutcome:
    outcome: str  # ok | failed | timeout | stopped | unknown
    exit_code: int | None
    signal: str | None
    decided_by: str  # "command" (a node's own status) or "proctor" (Slurm or proctor decided)
    reason: str | None
    failed_nodes: list[str] = field(default_factory=list)


def slurm_reason(state: str, reason: str | None, time_limit: str | None) -> str:
    text = f"Slurm ended the job: {state}"
    details = []
    if reason and reason not in ("None", "(null)"):
        details.append(f"reason {reason}")
    if state in SLURM_TIMEOUT and time_limit:
        details.append(f"time limit {time_limit}")
    return text + (f" ({', '.join(details)})" if details else "")


def _worst(nodes: list[NodeResult]) -> NodeResult | None:
    failed = [n for n in nodes if n.exit_code not in (None, 0)]
    return failed[0] if failed else None


def decide(
    state: str,
    nodes: list[NodeResult],
    *,
    reason: str | None = None,
    time_limit: str | None = None,
    stop_requested: bool = False,
) -> GroupOutcome:
    """The run's outcome. `nodes` lists every node Slurm allocated (present or not)."""
    missing = [n.node for n in nodes if n.exit_code is None]
    worst = _worst(nodes)
    any_code = worst or next((n for n in nodes if n.exit_code is not None), None)
    code = any_code.exit_code if any_code else None
    sig = any_code.signal if any_code else None
    said = slurm_reason(state, reason, time_limit)
    if state in SLURM_TIMEOUT:
        return GroupOutcome(
            "timeout",
            code if code is not None else int(ExitCode.TIME_LIMIT),
            sig,
            "proctor",
            said,
            missing,
        )
    if state in SLURM_STOPPED:
        why = (
            "stopped by proctor (scancel)"
            if stop_requested
            else said + " (cancelled outside proctor)"
        )
        return GroupOutcome(
            "stopped", code if code is not None else 143, sig or "SIGTERM", "proctor", why, missing
        )
    if state not in SLURM_RAN_TO_END:
        # Slurm killed it (node failure, preemption, memory): a failure, never success.
        lost = missing or [n.node for n in nodes if n.exit_code not in (None, 0)]
        where = f" on {', '.join(lost)}" if lost else ""
        return GroupOutcome("failed", int(ExitCode.FAULT), None, "proctor", said + where, lost)
    if any(n.outcome == "timeout" for n in nodes):
        timed = [n.node for n in nodes if n.outcome == "timeout"]
        return GroupOutcome(
            "timeout",
            code,
            sig,
            "proctor",
            f"proctor's time limit reached on {', '.join(timed)}",
            timed,
        )
    if worst is not None:
        bad = [n.node for n in nodes if n.exit_code not in (None, 0)]
        return GroupOutcome(
            "failed",
            worst.exit_code,
            worst.signal,
            "command",
            f"exit {worst.exit_code} on {', '.join(bad)}",
            bad,
        )
    if missing or not nodes:
        why = f"no exit status from {', '.join(missing)}" if missing else "no node ran"
        return GroupOutcome("unknown", None, None, "proctor", f"{said}; {why}", missing)
    return GroupOutcome("ok", 0, None, "command", None, [])

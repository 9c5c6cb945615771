"""A budget stop is proctor's own reason: it stays in the completion even when following the
stopped job then fails (the report says what proctor did, whatever came after)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

from proctor.errors import TargetUnavailable
from proctor.targets import base
from proctor.targets.remote.orchestrate import REMOTE_FILE, finish_remote

REASON = "cost budget spent: about 0.03 of --max-cost 0.03 at 2.50/hr"


class _StoppedThenLost:
    """A budgeted target whose follow stops the job for the budget, then loses the link."""

    kind = "stub"
    capabilities = frozenset({base.BUDGET})

    def __init__(self) -> None:
        self.limit_reached: str | None = None

    def follow(
        self, run_id: str, out: Any, *, offset: int = 0, until_done: bool = True
    ) -> base.RunStatus:
        self.limit_reached = REASON
        raise TargetUnavailable("connection lost while waiting for the stopped job")

    def price_per_hr(self) -> tuple[float | None, str]:
        return 2.5, "stub"

    def release(self) -> base.Released:
        return base.Released(action="stop", verified=True)


def test_budget_stop_is_kept_when_the_follow_then_fails(tmp_path: Path) -> None:
    (tmp_path / REMOTE_FILE).write_text(json.dumps({"run_id": "r1", "target": {"kind": "stub"}}))
    completion = finish_remote(_StoppedThenLost(), tmp_path, io.BytesIO())  # type: ignore[arg-type]
    assert completion.limit == REASON
    assert f"budget: {REASON}" in completion.unmet
    assert completion.to_dict()["limit"] == REASON

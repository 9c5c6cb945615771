"""Multi-turn conversations: each conversation on one session, its turns in order.

--concurrency conversations are in flight at once; within a conversation, turn t+1 is sent
when turn t has ended (successfully or not), carrying the history built in workload.py with
the dataset's replies. Using the dataset's replies keeps every turn's prompt the same on every
run and repeat (comparable runs, a prefix cache that sees the same bytes); the server's own
reply has the same token length when --ignore-eos holds it to the dataset's length.
A failed turn is recorded and the conversation goes on: its history does not depend on it.
Each turn is its own record (`conversation`, `turn`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from proctor.workloads.loadgen.client import PlannedRequest
from proctor.workloads.loadgen.records import RequestRecord
from proctor.workloads.loadgen.scheduler import Counter
from proctor.workloads.loadgen.turns import Turns


def conversations(requests: Sequence[PlannedRequest]) -> list[list[PlannedRequest]]:
    """The requests grouped by conversation, in first-seen order, turns in order."""
    groups: dict[int | None, list[PlannedRequest]] = {}
    for r in requests:
        groups.setdefault(r.conversation, []).append(r)
    return [sorted(g, key=lambda r: r.turn or 0) for g in groups.values()]


async def run_conversations(
    send: Callable[[PlannedRequest, RequestRecord], Awaitable[Any]],
    requests: Sequence[PlannedRequest],
    *,
    concurrency: int,
    counter: Counter | None = None,
) -> list[RequestRecord]:
    """`send(req, record)` sends one request and fills its record (the client's send)."""
    convs = iter(conversations(requests))
    records: list[RequestRecord] = []
    turns = Turns(asyncio.get_running_loop())

    async def session_loop() -> None:
        for conv in convs:
            for req in conv:
                if turns.spent():  # many turns ending together: the reads go first
                    await turns.next_round()
                rec = RequestRecord(
                    index=req.index,
                    prompt_len=req.prompt_len,
                    expected_output_len=req.output_len,
                    warmup=req.warmup,
                    queued_at=time.perf_counter(),
                    conversation=req.conversation,
                    turn=req.turn,
                )
                await send(req, rec)
                records.append(rec)
                if counter is not None:
                    counter.done(rec)

    await asyncio.gather(*(session_loop() for _ in range(concurrency)))
    return sorted(records, key=lambda r: r.index)

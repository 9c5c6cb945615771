"""The x-request-id every request carries: chosen by proctor, recorded, found in server logs.

An id is `BASE-REPEAT-INDEX`: BASE is the run's id for a supervised run (PROCTOR_RUN_ID, set
by its wrapper), else `bench-` and 12 hex digits drawn once per benchmark; REPEAT and INDEX
are the request's repeat (warmups in 0) and its index in that repeat's list, so ids are unique
within a run and the same request gets the same id in the records of one worker or of many.
vLLM takes the header as its request id (`cmpl-ID-0`, `chatcmpl-ID`) and logs it with
`--enable-log-requests` ("Received request ..."); report/slowest.py finds those lines.
"""

from __future__ import annotations

import os
import re
import secrets
from collections.abc import Iterable

from proctor.workloads.loadgen.client import PlannedRequest

RUN_ID_ENV = "PROCTOR_RUN_ID"
HEADER = "x-request-id"
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def run_base() -> str:
    """BASE for this benchmark: header-safe (no spaces, no CR/LF), at most 64 characters."""
    run = _UNSAFE.sub("_", os.environ.get(RUN_ID_ENV, "").strip())[:64]
    return run or f"bench-{secrets.token_hex(6)}"


def assign(requests: Iterable[PlannedRequest], base: str, repeat: int) -> None:
    for req in requests:
        req.request_id = f"{base}-{repeat}-{req.index}"

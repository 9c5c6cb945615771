"""Per-request records: what one request did, failures included, as plain data.

Times are `time.perf_counter()` seconds. On Linux that is CLOCK_MONOTONIC, shared by every
process on the host, so records from several worker processes can be merged directly.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

# Why a request failed; one of these in RequestRecord.reason.
REASONS = (
    "http_error",  # non-2xx status (body excerpt in `error`)
    "rate_limited",  # HTTP 429
    "disconnect",  # server closed the connection mid-response
    "timeout",  # per-request total or idle (between chunks) timeout
    "malformed_sse",  # a data: message that is not JSON, or a usage count that is not whole
    "aborted",  # finish_reason "abort" or "error": the server gave up on the request
    "bad_usage",  # usage.completion_tokens beyond the request's max_tokens
    "no_output",  # stream ended without a single message carrying choices
    "connect_error",  # could not connect
    "client_error",  # anything else raised by the client
)


@dataclass(slots=True)
class RequestRecord:
    index: int
    prompt_len: int
    expected_output_len: int
    warmup: bool = False
    worker: int = 0
    queued_at: float = 0.0  # when the request was due to be sent (arrival time)
    start_time: float = 0.0  # just before the POST (after waiting on the semaphore)
    ttft: float = 0.0
    itl: list[float] = field(default_factory=list)
    latency: float = 0.0  # last content message minus start_time
    end_time: float = 0.0  # when the request ended, successful or not
    output_tokens: int = 0
    output_tokens_source: str = "usage"  # usage | tokenizer | chunks
    prompt_tokens: int | None = None  # the server's usage.prompt_tokens when it sent one
    chunks: int = 0
    saw_done: bool = False
    success: bool = False
    status: int | None = None
    error: str = ""
    reason: str = ""
    generated_chars: int = 0
    repeat: int = 0  # which repeat of the measured phase (--repeat); warmups are 0
    conversation: int | None = None  # multi-turn: the conversation and turn (from 0)
    turn: int | None = None
    # The x-request-id header the request carried (request_ids.py): finds it in server logs.
    request_id: str = ""

    @property
    def queue_time(self) -> float:
        return max(0.0, self.start_time - self.queued_at)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RequestRecord:
        return cls(**data)

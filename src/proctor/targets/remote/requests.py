"""The far-side agent's requests, typed: one pydantic model per agent command.

The controller validates a request before it is sent (SshTarget.agent) and the agent validates
it again on arrival (agent.main), so a malformed request is a usage error naming the field on
either side, never a KeyError deep in the far code. The JSON on the agent's stdin is exactly
`Model.model_dump_json()`.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from proctor.jobs.steps import StepOf
from proctor.jobs.submission import Submission
from proctor.source.identity import SourceIdentity
from proctor.targets.base import JobSpec


class AgentRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ProbeRequest(AgentRequest):
    """What python and proctor the far side has."""


class VenvRequest(AgentRequest):
    dest: str
    tag: str
    wheel: str | None = None


class InspectRequest(AgentRequest):
    path: str
    identity: SourceIdentity | None = None


class UnpackRequest(AgentRequest):
    archive: str
    dest: str
    sha256: str | None = None


class StoreRequest(AgentRequest):
    """A file the command reads (a dataset), stored content-addressed in the far workspace:
    written to `dest` only if its bytes hash to `sha256`."""

    dest: str
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    data_b64: str


class StartRequest(AgentRequest):
    job: JobSpec  # the dataclass itself, validated field by field
    runs_dir: str
    checkout: str
    identity: SourceIdentity | None = None
    target: dict[str, Any] = Field(default_factory=dict)


class StepRequest(AgentRequest):
    """A server workflow step to run far away (jobs/steps.py: serve start|ready|stop, drain,
    inspect), as itself: the far side (`python -m proctor.jobs step`) validates it and calls
    the same `step_here` as the near side's command, no CLI; with `answer`, its stdout is the
    step's one JSON document (with `error` added when it fails)."""

    step: StepOf
    answer: bool = False

    def title(self) -> str:
        return self.step.title

    @property
    def command(self) -> list[str]:
        return self.title().split()


class SubmitRequest(AgentRequest):
    """A typed job and how its run goes (proctor.jobs.submission.Submission) to run far away:
    the far side (`python -m proctor.jobs submit`) validates it and calls the same `submit` as
    the near side's command, so the far run's argv is `python -m proctor.jobs run JOB`. Carried
    as the submission's JSON text (infinities as "inf", the API key never in it)."""

    submission: str

    @field_validator("submission")
    @classmethod
    def _valid(cls, v: str) -> str:
        try:
            Submission.model_validate(json.loads(v))
        except ValidationError as e:  # said as this field's error, naming the job's field
            raise ValueError(str(e)) from None
        return v

    @classmethod
    def of(cls, submission: Submission) -> SubmitRequest:
        from proctor.jobs.argv import job_json

        return cls(submission=job_json(submission))

    def parsed(self) -> Submission:
        return Submission.model_validate(json.loads(self.submission))

    def title(self) -> str:
        return self.parsed().title()

    @property
    def command(self) -> list[str]:
        return self.title().split()


class ProctorRequest(AgentRequest):
    """A proctor command in the verified checkout, with the far runs dir (agent.run_proctor):
    a typed submission, or a server workflow step."""

    request: SubmitRequest | StepRequest
    checkout: str
    runs_dir: str
    identity: SourceIdentity | None = None


class RunRequest(AgentRequest):
    runs_dir: str
    run_id: str


class FollowRequest(RunRequest):
    offset: int = 0
    until_done: bool = True


REQUESTS: dict[str, type[AgentRequest]] = {
    "probe": ProbeRequest,
    "venv": VenvRequest,
    "proctor": ProctorRequest,
    "inspect": InspectRequest,
    "unpack": UnpackRequest,
    "start": StartRequest,
    "status": RunRequest,
    "stop": RunRequest,
    "listing": RunRequest,
    "follow": FollowRequest,
    "store": StoreRequest,
}


def request_for(command: str, data: dict[str, Any] | AgentRequest) -> AgentRequest:
    """`data` as the model of `command` (validated); UsageError naming the field if it is not."""
    from pydantic import ValidationError

    from proctor.errors import UsageError, invalid

    model = REQUESTS.get(command)
    if model is None:
        raise UsageError(f"unknown agent command {command!r}", hint=f"one of {', '.join(REQUESTS)}")
    if isinstance(data, model):
        return data
    try:
        return model.model_validate(data if isinstance(data, dict) else data.model_dump())
    except ValidationError as error:
        raise invalid(error, what=f"agent {command}") from None


__all__ = [
    "REQUESTS",
    "AgentRequest",
    "FollowRequest",
    "InspectRequest",
    "ProbeRequest",
    "ProctorRequest",
    "RunRequest",
    "StartRequest",
    "StepRequest",
    "StoreRequest",
    "SubmitRequest",
    "UnpackRequest",
    "VenvRequest",
    "request_for",
]

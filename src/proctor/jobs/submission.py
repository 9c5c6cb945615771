"""A job and how it is run: the `Submission` that `proctor bench|sweep|eval gsm8k|offline`,
`flow` and `sweep --server-grid|--file` build and hand to `proctor.jobs.submit.submit`, here
or on a target's far machine.

The job says what is measured; the submission's other fields say how the run goes (its name,
attach key, time limit, --detach, the --server run it targets, the GPU preflight, whether the
answer is JSON). A submission travels as its JSON (`Submission.model_dump_json()`) to the far
side of `--target`, which validates it and calls the same `submit` there; the API key is never
in it (BenchJob.api_key is excluded from every dump: OPENAI_API_KEY gives it where it runs).

Whether a server the job targets must outlive it (a rented machine kept) is a property of
these fields (`server_lives`), not of the command's name.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, model_validator

from proctor.jobs.bench import BenchJob
from proctor.jobs.eval import EvalJob
from proctor.jobs.flow import FlowJob
from proctor.jobs.grid import ServerGridJob
from proctor.jobs.offline import OfflineJob
from proctor.jobs.sweep import SweepJob

AnyJob = BenchJob | SweepJob | EvalJob | OfflineJob | FlowJob | ServerGridJob
Job = Annotated[AnyJob, Field(discriminator="kind")]
JOB: TypeAdapter[AnyJob] = TypeAdapter(Job)

# What a server run's recorded facts may fill in a job (where the user did not set them).
ServerField = Literal["base_url", "model", "endpoint"]


class ServerRef(BaseModel):
    """`--server RUN`: the server run the job targets, resolved where the job runs (the far
    runs dir under --target), and which of the job's fields its facts fill: those the user did
    not set (base_url always; model and, for a bench, the chat endpoint where it serves one)."""

    model_config = ConfigDict(extra="forbid")

    run: str = Field(min_length=1)
    fills: list[ServerField] = Field(default_factory=list)


# The run-control fields each kind's run takes (a sweep's name is its job's own `name`; its
# points are supervised runs of their own, so the sweep is never detached, keyed or timed).
_COMMON = ("detach", "name", "key", "timeout", "server", "answer")
TAKEN: dict[str, tuple[str, ...]] = {
    "bench": (*_COMMON, "allow_unhealthy_gpu"),
    "eval": (*_COMMON, "allow_unhealthy_gpu"),
    "sweep": ("server", "answer"),
    "offline": ("detach", "name", "key", "timeout", "answer", "env", "gpu_sample", "config"),
    # A flow is its own run (its steps' runs under it) and tears its server down; a server grid
    # is one home run over a flow per server point. Their settings are the job's own fields.
    "flow": ("answer",),
    "server-grid": ("answer",),
}


class Submission(BaseModel):
    """A typed job plus how its run goes; what `submit` takes here and on the far side."""

    model_config = ConfigDict(extra="forbid")

    job: Job
    name: str | None = None  # the run's name (default: made from the job)
    key: str | None = None  # attach key: a second equal submission attaches to the live run
    detach: bool = False  # start the run and return its id; `proctor runs wait ID` follows it
    timeout: str | None = None  # time limit of the run (exit 4)
    server: ServerRef | None = None  # the --server run it targets
    allow_unhealthy_gpu: bool = False  # run even when the GPU preflight fails
    answer: bool = False  # --json: the answer is one JSON document on stdout
    # offline: the command's environment (NAME=VALUE; secret values are masked in records),
    # GPU sampling and the proctor.toml it resolves its engine profile from.
    env: list[str] = Field(default_factory=list)
    gpu_sample: float | None = None
    config: str | None = None

    @model_validator(mode="after")
    def _taken_by_the_kind(self) -> Submission:
        """A run-control field the job's kind does not take is refused, never ignored."""
        given = {name for name in self.model_fields_set if name != "job"}
        fields = Submission.model_fields
        given = {
            n for n in given if getattr(self, n) != fields[n].get_default(call_default_factory=True)
        }
        wrong = sorted(given - set(TAKEN[self.job.kind]))
        if wrong:
            raise ValueError(f"a {self.job.kind} job's run takes no {', '.join(wrong)}")
        return self

    @property
    def kind(self) -> str:
        return self.job.kind

    def title(self) -> str:
        """The command it is: `bench`, `sweep`, `eval gsm8k`, `offline`, `flow` (a server grid
        is `sweep --server-grid`'s: `sweep`)."""
        if isinstance(self.job, EvalJob):
            return f"eval {self.job.task}"
        if isinstance(self.job, ServerGridJob):
            return "sweep"
        return self.job.kind

    @property
    def server_lives(self) -> bool:
        """Whether a server this run needs must outlive the command on a target's machine (a
        rented one is kept): the job targets a server run (--server: it is still serving for
        whoever comes next), or the run itself is detached (it goes on after the command)."""
        return self.detach or self.server is not None

    def with_server_facts(self, facts: dict[str, Any]) -> Submission:
        """The job with the --server run's facts in the fields `server.fills` names; the
        server stays named (for the record), its facts are now the job's."""
        if self.server is None:
            return self
        fills = set(self.server.fills)
        updates: dict[str, Any] = {}
        if "base_url" in fills and facts.get("base_url"):
            updates["base_url"] = str(facts["base_url"])
        if "model" in fills and facts.get("checked_model"):
            updates["model"] = str(facts["checked_model"])
        if "endpoint" in fills and facts.get("use_chat_template"):
            updates["endpoint"] = "chat"
        return self.model_copy(update={"job": filled(self.job, updates)})


def filled(job: AnyJob, updates: dict[str, Any]) -> AnyJob:
    """`job` with `updates` (a sweep: its bench job's), validated again."""
    if not updates:
        return job
    if isinstance(job, SweepJob):
        return job.model_copy(update={"bench": job.bench.updated(**updates)})
    if isinstance(job, BenchJob):
        return job.updated(**updates)
    if isinstance(job, EvalJob):
        updates = {k: v for k, v in updates.items() if k != "endpoint"}
        return EvalJob.model_validate({**job.model_dump(), **updates})
    return job


__all__ = ["JOB", "TAKEN", "AnyJob", "Job", "ServerField", "ServerRef", "Submission", "filled"]

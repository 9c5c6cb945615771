"""EvalJob: one GSM8K accuracy evaluation through lm-eval, every setting declared once.

Each field's description is its flag's help (`proctor eval gsm8k --help`), its `Opt` the flag
(jobs/options.py): the eval command, `python -m proctor.workloads.gsm8k`, a flow file's `eval`
table and the library (`proctor.Gsm8kConfig`, this model) take exactly these settings. Where
lm-eval writes, and the task file over `data`, are the run directory's (workloads/gsm8k.py).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
)

from proctor.errors import UsageError
from proctor.jobs.options import NoOpt, Opt, option_of

EVAL_TASKS = ("gsm8k",)


class EvalJob(BaseModel):
    """What to evaluate: the server, the model it serves, the GSM8K settings and lm-eval's."""

    model_config = ConfigDict(extra="forbid")

    kind: Annotated[Literal["eval"], NoOpt("the job's kind")] = "eval"
    task: Annotated[
        Literal["gsm8k"], NoOpt("the command's name (`proctor eval gsm8k`), a flow's `task`")
    ] = "gsm8k"
    base_url: Annotated[str, Opt("--base-url", metavar="URL")] = Field(
        default="http://127.0.0.1:8000",
        description="Server root, `/v1` or full endpoint URL, e.g. http://127.0.0.1:8000 "
        "(default: --port's).",
    )
    model: Annotated[str | None, Opt("--model")] = Field(
        default=None, description="Served model name (default: the --server run's)."
    )
    num_fewshot: Annotated[int, Opt("--fewshot")] = Field(
        default=3, description="Few-shot examples per question."
    )
    limit: Annotated[int | None, Opt("--limit")] = Field(
        default=None, description="Only the first N test questions."
    )
    chat: Annotated[bool, Opt("--chat")] = Field(
        default=False, description="Chat completions, chat template, multi-turn few-shot."
    )
    num_concurrent: Annotated[int, Opt("--num-concurrent")] = Field(
        default=65, description="Requests in flight."
    )
    max_retries: Annotated[int, Opt("--max-retries")] = Field(
        default=3, description="Times lm-eval retries a failed request."
    )
    gen_kwargs: Annotated[str | None, Opt("--gen-kwargs")] = Field(
        default=None, description="lm-eval generation overrides, e.g. max_gen_toks=512."
    )
    data: Annotated[str | None, Opt("--data", metavar="DIR")] = Field(
        default=None,
        description="Folder with GSM8K train.jsonl/test.jsonl: run offline from it.",
    )
    log_samples: Annotated[bool, Opt("--log-samples")] = Field(
        default=False, description="Keep lm-eval's samples."
    )
    lm_eval: Annotated[str | None, Opt("--lm-eval", metavar="PATH")] = Field(
        default=None,
        description="Path of the lm_eval executable (default: lm_eval on PATH, or this "
        "Python's module).",
    )
    max_error_rate: Annotated[float, Opt("--max-error-rate")] = Field(
        default=0.0,
        description="Fraction of samples allowed to go unanswered (default 0); above it exit 3.",
    )

    @field_validator("model")
    @classmethod
    def _model_name(cls, v: str | None) -> str | None:
        if v is not None and (not v or any(c in v for c in ",=")):
            raise ValueError("give the served model name, without ',' or '='")
        return v

    @field_validator("num_fewshot", "max_retries")
    @classmethod
    def _not_negative(cls, v: int, info: ValidationInfo) -> int:
        if v < 0:
            raise ValueError(f"{_flag(cls, info)} must be >= 0")
        return v

    @field_validator("limit", "num_concurrent")
    @classmethod
    def _positive(cls, v: int | None, info: ValidationInfo) -> int | None:
        if v is not None and v < 1:
            raise ValueError(f"{_flag(cls, info)} must be >= 1")
        return v

    @field_validator("max_error_rate")
    @classmethod
    def _fraction(cls, v: float) -> float:
        if not 0 <= v <= 1:  # nan too: `rate <= nan` failed every eval
            raise ValueError(f"--max-error-rate {v:g}: must be a fraction from 0 to 1")
        return v

    @field_validator("base_url")
    @classmethod
    def _url(cls, v: str) -> str:
        if not v.startswith(("http://", "https://")):
            raise ValueError("use http://HOST:PORT")
        return v

    def require_model(self) -> str:
        """The served model name; a usage error where nobody gave one. Checked where the job
        runs and where the CLI builds it, not on validation: a job whose model the --server
        run gives (resolved on the far machine under --target) has none yet."""
        if self.model is None:
            raise UsageError("a served model name is needed: --model, or --server RUN")
        return self.model


def _flag(model: type[BaseModel], info: ValidationInfo) -> str:
    """The flag of the field being validated, as the user wrote it (messages name it)."""
    opt = option_of(model.model_fields[info.field_name or ""])
    return opt.flag if isinstance(opt, Opt) else str(info.field_name)

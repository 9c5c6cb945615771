"""BenchConfig: every knob of one serving benchmark, with the seed's defaults.

Defaults follow ATOM's benchmark script (a copy of vLLM's): ISL 1024, OSL 1024,
concurrency 128, prompts = concurrency x 10, range ratio 0.8, warmups = 2 x concurrency,
request rate inf, ignore_eos on.
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from proctor.spec.datasets import (
    DATASET_KINDS,
    DATASET_SPECS,
    FILE_DATASETS,
    split_dataset,
)

Endpoint = Literal["completions", "chat"]
TokenizerMode = Literal["auto", "server", "local", "approx"]
SLO_KEYS = ("ttft", "tpot", "e2el")


class BenchConfig(BaseModel):
    """Everything a serving benchmark needs: server, dataset shape, load shape, limits, outputs."""

    model_config = ConfigDict(extra="forbid")

    base_url: str = "http://127.0.0.1:8000"
    endpoint: Endpoint = "completions"
    model: str | None = None  # None: the first id that /v1/models lists
    tokenizer: str | None = None  # a local tokenizer (transformers) name or path
    tokenizer_mode: TokenizerMode = "auto"
    isl: int = Field(default=1024, ge=1)
    osl: int = Field(default=1024, ge=1)
    concurrency: int = Field(default=128, ge=1)
    prompt_multiplier: int = Field(default=10, ge=1)
    num_prompts: int | None = Field(default=None, ge=1)  # overrides concurrency x multiplier
    range_ratio: float = Field(default=0.8, ge=0.0, lt=1.0)
    num_warmups: int | None = Field(default=None, ge=0)  # None: 2 x concurrency
    request_rate: float = Field(default=math.inf, gt=0)  # inf: all at once, up to concurrency
    burstiness: float = Field(default=1.0, gt=0)  # 1 = Poisson, else gamma
    seed: int = 0
    ignore_eos: bool = True
    temperature: float = 0.0
    profile: bool = False
    workers: int = Field(default=1, ge=1)
    percentiles: list[float] = Field(default_factory=lambda: [99.0])
    goodput_slos_ms: dict[str, float] = Field(default_factory=dict)
    request_timeout_s: float = Field(default=6 * 3600.0, gt=0)  # whole request, as vLLM's 6 h
    idle_timeout_s: float = Field(default=600.0, gt=0)  # longest silence between chunks
    connect_timeout_s: float = Field(default=30.0, gt=0)
    save_detailed: bool = False
    progress: bool = True
    # Failed measured requests allowed, as a fraction; above it the benchmark fails (exit 3).
    max_error_rate: float = Field(default=0.0, ge=0.0, le=1.0)
    # Seconds between progress lines on stdout (the run's log); 0 = none.
    log_every_s: float = Field(default=5.0, ge=0.0)
    api_key: SecretStr | None = Field(default=None, exclude=True)
    # What is sent (docs/bench.md#datasets): DATASET_SPECS.
    dataset: str = "random"
    prefix_groups: int = Field(default=4, ge=1)  # shared-prefix: groups sharing one prefix
    prefix_hit_rate: float = Field(default=0.5, ge=0.0, lt=1.0)  # target prefix-cache hits
    prefix_len: int | None = Field(default=None, ge=1)  # overrides the target hit rate
    # trace: the trace's clock divided by this (2 = twice as fast); finite.
    trace_speed: float = Field(default=1.0, gt=0, allow_inf_nan=False)
    # The measured phase is run this many times; metrics get mean, stdev and a 95% CI.
    repeat: int = Field(default=1, ge=1)
    # Telemetry (docs/monitors.md): the server's /metrics every N s (0: off), GPU samples every
    # N s into gpu.csv (0: off), idle GPU power for energy/token (None: measured before the load).
    server_metrics_s: float = Field(default=1.0, ge=0.0)
    gpu_sample_s: float = Field(default=1.0, ge=0.0)
    idle_power_w: float | None = Field(default=None, ge=0.0)
    # Validity thresholds (docs/bench.md): fewer measured requests or a shorter window is INVALID.
    min_requests: int = Field(default=100, ge=0)
    min_window_s: float = Field(default=10.0, ge=0.0)

    @field_validator("base_url")
    @classmethod
    def _strip_url(cls, v: str) -> str:
        v = v.rstrip("/")
        if v.endswith("/v1"):
            v = v[:-3]
        if not v.startswith(("http://", "https://")):
            raise ValueError("base_url must start with http:// or https://")
        return v

    @field_validator("percentiles")
    @classmethod
    def _check_pct(cls, v: list[float]) -> list[float]:
        for p in v:
            if not 0 < p < 100:
                raise ValueError(f"percentile {p} must be in (0, 100)")
        return v

    @field_validator("goodput_slos_ms")
    @classmethod
    def _check_slos(cls, v: dict[str, float]) -> dict[str, float]:
        for key, ms in v.items():
            if key not in SLO_KEYS:
                raise ValueError(f"goodput SLO {key!r} must be one of {', '.join(SLO_KEYS)}")
            if not math.isfinite(ms) or ms <= 0:  # nan would pass `<= 0` and reach the JSON
                raise ValueError(f"goodput SLO {key} must be a number of ms above 0, not {ms}")
        return v

    @field_validator("dataset")
    @classmethod
    def _check_dataset(cls, v: str) -> str:
        kind, path = split_dataset(v)
        if kind not in DATASET_KINDS:
            raise ValueError(f"dataset {v!r} must be one of: {DATASET_SPECS}")
        if kind in FILE_DATASETS and not path:
            raise ValueError(f"dataset {kind} needs a file: {kind}:PATH")
        if kind not in FILE_DATASETS and path:
            raise ValueError(f"dataset {kind} takes no file")
        return v

    @model_validator(mode="after")
    def _check_workers(self) -> BenchConfig:
        if self.workers > self.concurrency:
            raise ValueError("workers must not exceed concurrency")
        if self.dataset_kind == "multi-turn" and (self.workers > 1 or self.rate_or_none):
            raise ValueError(
                "multi-turn runs conversations at --concurrency sessions; "
                "it takes neither --workers nor a finite --request-rate"
            )
        if self.dataset_kind == "trace" and (self.workers > 1 or self.rate_or_none):
            raise ValueError(
                "a trace is sent on its own clock (--trace-speed scales it), from one client "
                "process; it takes neither --workers nor a finite --request-rate"
            )
        if self.dataset_kind != "trace" and self.trace_speed != 1.0:
            raise ValueError("--trace-speed applies to --dataset trace:PATH only")
        return self

    @property
    def dataset_kind(self) -> str:
        return split_dataset(self.dataset)[0]

    @property
    def dataset_path(self) -> str:
        return split_dataset(self.dataset)[1]

    @property
    def total_prompts(self) -> int:
        return self.num_prompts or self.concurrency * self.prompt_multiplier

    @property
    def warmups(self) -> int:
        return 2 * self.concurrency if self.num_warmups is None else self.num_warmups

    @property
    def rate_or_none(self) -> float | None:
        return None if math.isinf(self.request_rate) else self.request_rate

    def public_dict(self) -> dict[str, object]:
        """The resolved config for metrics.json (no credentials; inf as a string)."""
        data = self.model_dump(mode="json")
        if math.isinf(self.request_rate):
            data["request_rate"] = "inf"
        return data


def parse_rate(text: str) -> float:
    if text.strip().lower() in ("inf", "infinity"):
        return math.inf
    return float(text)


def parse_goodput(items: list[str]) -> dict[str, float]:
    """`ttft:500 tpot:50` (vLLM's --goodput syntax) -> {"ttft": 500.0, "tpot": 50.0}."""
    out: dict[str, float] = {}
    for item in items:
        for part in item.split():
            key, sep, value = part.partition(":")
            if not sep:
                raise ValueError(f"goodput SLO {part!r} must look like ttft:500")
            out[key.strip().lower()] = float(value)
    return out

"""BenchJob: every knob of one serving benchmark, with the seed's defaults, declared once.

Defaults follow ATOM's benchmark script (a copy of vLLM's): ISL 1024, OSL 1024, concurrency 128,
prompts = concurrency x 10, range ratio 0.8, warmups = 2 x concurrency, request rate inf,
ignore_eos on. Each field's description is its flag's help (`proctor bench --help`), its `Opt`
the flag (jobs/options.py): the bench and sweep commands, the flow file's `bench` and `sweep`
tables and the library all take exactly these settings.
"""

from __future__ import annotations

import math
from typing import Annotated, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    field_serializer,
    field_validator,
    model_validator,
)

from proctor.jobs.options import NoOpt, Opt
from proctor.spec.datasets import (
    DATASET_KINDS,
    DATASET_SPECS,
    FILE_DATASETS,
    split_dataset,
)

Endpoint = Literal["completions", "chat"]
TokenizerMode = Literal["auto", "server", "local", "approx"]
SLO_KEYS = ("ttft", "tpot", "e2el")
TRACE_SPEED_HELP = "trace: replay the trace's clock this many times faster (2 = twice as fast)."
DATASET_HELP = (
    "What to send: random | jsonl:PATH (prompt, output_len per line) | sharegpt:PATH (first "
    "human turn; the gpt reply's length) | shared-prefix (groups sharing a prefix) | "
    "multi-turn:PATH (ShareGPT conversations, turn by turn) | trace:PATH (a Mooncake JSONL or "
    "BurstGPT CSV trace, replayed on its own clock). docs/bench.md#datasets."
)


def parse_rate(text: str | float) -> float:
    """`inf` (or `infinity`) or a number of requests per second."""
    if isinstance(text, int | float):
        return float(text)
    if text.strip().lower() in ("inf", "infinity"):
        return math.inf
    return float(text)


def parse_goodput(items: list[str] | str) -> dict[str, float]:
    """`ttft:500 tpot:50` (vLLM's --goodput syntax) -> {"ttft": 500.0, "tpot": 50.0}."""
    out: dict[str, float] = {}
    for item in [items] if isinstance(items, str) else items:
        for part in item.split():
            key, sep, value = part.partition(":")
            if not sep:
                raise ValueError(f"goodput SLO {part!r} must look like ttft:500")
            out[key.strip().lower()] = float(value)
    return out


def parse_percentiles(text: str | list[float]) -> list[float]:
    """`50,90,99` -> [50.0, 90.0, 99.0] (a list is taken as it is)."""
    if isinstance(text, list):
        return [float(p) for p in text]
    return [float(p) for p in str(text).split(",") if p.strip()]


def parse_cores(text: str | list[int]) -> list[int]:
    """`2-5,8` -> [2, 3, 4, 5, 8] (a list is taken as it is; "" -> [])."""
    if isinstance(text, list):
        return [int(c) for c in text]
    out: list[int] = []
    for part in str(text).split(","):
        first, sep, last = part.strip().partition("-")
        if first:
            out += range(int(first), int(last) + 1) if sep else [int(first)]
    return out


def _endpoint(chat: bool | str) -> str:
    if isinstance(chat, str):  # a flow table may name the endpoint itself
        return chat
    return "chat" if chat else "completions"


class BenchJob(BaseModel):
    """Everything a serving benchmark needs: server, dataset shape, load shape, limits, outputs."""

    model_config = ConfigDict(extra="forbid")

    kind: Annotated[Literal["bench"], NoOpt("the job's kind")] = "bench"
    base_url: Annotated[str, Opt("--base-url", metavar="URL")] = Field(
        default="http://127.0.0.1:8000",
        description="Server URL (default http://127.0.0.1:PORT, --port's).",
    )
    endpoint: Annotated[
        Endpoint, Opt("--chat", cli_type=bool, parse=_endpoint, cli_default=False)
    ] = Field(default="completions", description="Use /v1/chat/completions.")
    model: Annotated[str | None, Opt("--model")] = Field(
        default=None, description="Model name (default: the first id /v1/models lists)."
    )
    tokenizer: Annotated[str | None, Opt("--tokenizer", metavar="DIR")] = Field(
        default=None, description="A local tokenizer (transformers) name or directory."
    )
    tokenizer_mode: Annotated[TokenizerMode, Opt("--tokenizer-mode", cli_type=str)] = Field(
        default="auto", description="How tokens are counted: auto | server | local | approx."
    )
    isl: Annotated[int, Opt("--isl")] = Field(
        default=1024, ge=1, description="Input length (tokens)."
    )
    osl: Annotated[int, Opt("--osl")] = Field(
        default=1024, ge=1, description="Output length (tokens)."
    )
    concurrency: Annotated[int, Opt("--concurrency")] = Field(
        default=128, ge=1, description="Maximum requests in flight."
    )
    prompt_multiplier: Annotated[int, Opt("--prompt-multiplier")] = Field(
        default=10, ge=1, description="Prompts = concurrency x this."
    )
    num_prompts: Annotated[int | None, Opt("--num-prompts")] = Field(
        default=None, ge=1, description="Prompts sent (overrides --prompt-multiplier)."
    )
    range_ratio: Annotated[float, Opt("--range-ratio")] = Field(
        default=0.8, ge=0.0, lt=1.0, description="Lengths on L(1±r), as vLLM."
    )
    num_warmups: Annotated[int | None, Opt("--num-warmups")] = Field(
        default=None, ge=0, description="Warm-up requests (default 2 x concurrency)."
    )
    request_rate: Annotated[float, Opt("--request-rate", cli_type=str, parse=parse_rate)] = Field(
        default=math.inf, gt=0, description="inf (all at once, up to --concurrency) or requests/s."
    )
    burstiness: Annotated[float, Opt("--burstiness")] = Field(
        default=1.0, gt=0, description="Arrival burstiness: 1 = Poisson, else gamma."
    )
    seed: Annotated[int, Opt("--seed")] = Field(
        default=0, description="Seed N of the prompts and arrival times."
    )
    ignore_eos: Annotated[bool, Opt("--ignore-eos/--no-ignore-eos")] = Field(
        default=True,
        description="Ask the server to generate --osl tokens whatever the model says (as vLLM's "
        "bench).",
    )
    temperature: Annotated[float, Opt("--temperature")] = Field(
        default=0.0, ge=0.0, description="Sampling temperature sent with each request."
    )
    profile: Annotated[bool, Opt("--profile")] = Field(
        default=False,
        description="Call /start_profile and /stop_profile around the measured phase.",
    )
    workers: Annotated[int, Opt("--workers")] = Field(
        default=1, ge=1, description="Client processes."
    )
    client_cores: Annotated[
        list[int], Opt("--client-cores", cli_type=str, parse=parse_cores, cli_default="")
    ] = Field(
        default_factory=list,
        description="Pin the client to these CPU cores (e.g. 2-5): worker i on the i-th, the "
        "parent on any after the last worker's (default: not pinned). A core this machine "
        "lacks is refused before the run starts (exit 64); with --target, there.",
    )
    percentiles: Annotated[
        list[float], Opt("--percentiles", cli_type=str, parse=parse_percentiles, cli_default="99")
    ] = Field(default_factory=lambda: [99.0], description="Percentiles reported, e.g. 50,90,99.")
    goodput_slos_ms: Annotated[
        dict[str, float],
        Opt("--goodput", cli_type=list[str], parse=parse_goodput, cli_default=[], multiple=True),
    ] = Field(default_factory=dict, description="Goodput SLO like ttft:500 (repeatable).")
    request_timeout_s: Annotated[float, Opt("--request-timeout")] = Field(
        default=6 * 3600.0, gt=0, description="Seconds a whole request may take (vLLM's 6 h)."
    )
    idle_timeout_s: Annotated[float, Opt("--idle-timeout")] = Field(
        default=600.0, gt=0, description="Longest silence between chunks of a stream (s)."
    )
    connect_timeout_s: Annotated[float, Opt("--connect-timeout")] = Field(
        default=30.0, gt=0, description="Seconds to open a connection to the server."
    )
    save_detailed: Annotated[bool, Opt("--save-detailed")] = Field(
        default=False, description="Write every request's timings to requests.jsonl."
    )
    progress: Annotated[bool, NoOpt("a bar or progress lines unless the output is JSON")] = True
    max_error_rate: Annotated[float, Opt("--max-error-rate")] = Field(
        default=0.0,
        ge=0.0,
        le=1.0,
        description="Fraction of requests allowed to fail (default 0: any failed request fails "
        "the bench, exit 3).",
    )
    log_every_s: Annotated[float, Opt("--log-every")] = Field(
        default=5.0,
        ge=0.0,
        description="Seconds between progress lines in the run's log (0: none).",
    )
    api_key: Annotated[SecretStr | None, NoOpt("OPENAI_API_KEY, never a flag or a file")] = Field(
        default=None, exclude=True
    )
    dataset: Annotated[str, Opt("--dataset")] = Field(default="random", description=DATASET_HELP)
    prefix_groups: Annotated[int, Opt("--prefix-groups")] = Field(
        default=4, ge=1, description="shared-prefix: groups of prompts sharing one prefix."
    )
    prefix_hit_rate: Annotated[float, Opt("--prefix-hit-rate")] = Field(
        default=0.5,
        ge=0.0,
        lt=1.0,
        description="shared-prefix: target prefix-cache hit rate (sizes the prefix).",
    )
    prefix_len: Annotated[int | None, Opt("--prefix-len")] = Field(
        default=None,
        ge=1,
        description="shared-prefix: prefix tokens (overrides --prefix-hit-rate).",
    )
    trace_speed: Annotated[float, Opt("--trace-speed")] = Field(
        default=1.0, gt=0, allow_inf_nan=False, description=TRACE_SPEED_HELP
    )
    repeat: Annotated[int, Opt("--repeat")] = Field(
        default=1,
        ge=1,
        description="Run the measured phase N times: each metric gets mean, stdev and a 95% "
        "confidence interval.",
    )
    server_metrics_s: Annotated[float, Opt("--server-metrics")] = Field(
        default=1.0,
        ge=0.0,
        description="Seconds between scrapes of the server's /metrics into server_metrics.csv "
        "(0: none).",
    )
    gpu_sample_s: Annotated[float, Opt("--gpu-sample")] = Field(
        default=1.0,
        ge=0.0,
        description="Seconds between GPU samples (memory, power, clock) into the bench's gpu.csv "
        "(0: none).",
    )
    idle_power_w: Annotated[float | None, Opt("--idle-power-w")] = Field(
        default=None,
        ge=0.0,
        description="Idle GPU power in W (all GPUs) for energy/token; default: measured before "
        "the load.",
    )
    min_requests: Annotated[int, Opt("--min-requests")] = Field(
        default=100, ge=0, description="Fewer measured requests make the benchmark INVALID."
    )
    min_window_s: Annotated[float, Opt("--min-window")] = Field(
        default=10.0,
        ge=0.0,
        description="A shorter measured window (s) makes the benchmark INVALID.",
    )

    @field_serializer("request_rate", when_used="json")
    def _rate_json(self, v: float) -> float | str:
        # JSON has no infinity: "inf" reads back as the same rate (a flow's workloads, a record).
        return "inf" if math.isinf(v) else v

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
    def _check_workers(self) -> BenchJob:
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

    @model_validator(mode="after")
    def _check_cores(self) -> BenchJob:
        if self.client_cores and (
            len(self.client_cores) < self.workers
            or len(set(self.client_cores)) < len(self.client_cores)
            or min(self.client_cores) < 0
        ):
            raise ValueError(
                "client_cores must name a different core (>= 0) for each of the "
                f"{self.workers} worker(s)"
            )
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
        data = self.model_dump(mode="json", exclude={"kind"})
        if math.isinf(self.request_rate):
            data["request_rate"] = "inf"
        return data

    def updated(self, **changes: object) -> BenchJob:
        """This job with `changes` (a sweep point, the server's facts), validated again (unlike
        `model_copy(update=...)`); the API key is kept."""
        data = {**self.model_dump(), **changes}
        job = BenchJob.model_validate(data)
        return job.model_copy(update={"api_key": self.api_key}) if self.api_key else job

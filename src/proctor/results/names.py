"""Normalized metric names, with unit and direction (which way is better).

Serving metrics use vLLM's result-JSON keys (`total_token_throughput`, `mean_ttft_ms`,
`p99_itl_ms`, ...); accuracy metrics are `<task>_<metric>_<filter>`, e.g.
`gsm8k_exact_match_flexible` and `gsm8k_exact_match_strict`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

Direction = Literal["higher", "lower", "none"]

_STAT = r"(mean|median|std|min|max|p\d+(?:\.\d+)?)"
_KIND = r"(ttft|tpot|itl|e2el|queue)"
LATENCY_RE = re.compile(rf"^{_STAT}_{_KIND}_ms$")

_FIXED: dict[str, tuple[str, Direction]] = {
    "completed": ("requests", "higher"),
    "failed": ("requests", "lower"),
    "duration": ("s", "none"),
    "max_concurrency": ("requests", "none"),
    "request_rate": ("req/s", "none"),
    "concurrency": ("requests", "none"),
    "total_input_tokens": ("tokens", "none"),
    "total_output_tokens": ("tokens", "none"),
    "total_output_tokens_retokenized": ("tokens", "none"),
    "request_throughput": ("req/s", "higher"),
    "request_goodput": ("req/s", "higher"),
    "input_throughput": ("tok/s", "higher"),
    "output_throughput": ("tok/s", "higher"),
    "total_token_throughput": ("tok/s", "higher"),
    "max_output_tokens_per_s": ("tok/s", "higher"),
    "max_concurrent_requests": ("requests", "none"),
    "peak_concurrency": ("requests", "none"),
    "spec_acceptance_rate": ("%", "higher"),  # vLLM's `Acceptance rate (%)`
    "spec_acceptance_length": ("tokens", "higher"),
    "mtp_acceptance_rate": ("fraction", "higher"),
    # proctor's bench: the validity verdict (1 VALID, 0 INVALID) and energy (docs/bench.md)
    "valid": ("bool", "higher"),
    "energy_per_output_token_j": ("J/token", "lower"),
    "gpu_power_mean_w": ("W", "none"),
    # cost on a priced machine (Runpod), from the run's .cost.json (results/cost.py)
    "usd_per_million_output_tokens": ("USD/Mtok", "lower"),
    "run_cost_usd": ("USD", "none"),
}


@dataclass(frozen=True)
class MetricInfo:
    name: str
    unit: str
    direction: Direction


def metric_info(name: str) -> MetricInfo:
    if name in _FIXED:
        unit, direction = _FIXED[name]
        return MetricInfo(name, unit, direction)
    if LATENCY_RE.match(name):
        return MetricInfo(name, "ms", "lower")
    if name.endswith("_n_samples"):
        return MetricInfo(name, "samples", "none")
    if re.search(r"(exact_match|_acc|accuracy|_f1|_score)", name):
        return MetricInfo(name, "fraction", "higher")
    if name.endswith("_throughput"):
        return MetricInfo(name, "tok/s", "higher")
    return MetricInfo(name, "", "none")


# Printed summary labels (lower-cased, single-spaced, no trailing colon) -> name.
SUMMARY_LABELS: dict[str, str] = {
    "successful requests": "completed",
    "failed requests": "failed",
    "maximum request concurrency": "max_concurrency",
    "max request concurrency": "max_concurrency",
    "request rate configured (rps)": "request_rate",
    "traffic request rate": "request_rate",
    "benchmark duration (s)": "duration",
    "total input tokens": "total_input_tokens",
    "total generated tokens": "total_output_tokens",
    "total generated tokens (retokenized)": "total_output_tokens_retokenized",
    "request throughput (req/s)": "request_throughput",
    "request goodput (req/s)": "request_goodput",
    "input token throughput (tok/s)": "input_throughput",
    "output token throughput (tok/s)": "output_throughput",
    "peak output token throughput (tok/s)": "max_output_tokens_per_s",
    "peak concurrent requests": "max_concurrent_requests",
    "total token throughput (tok/s)": "total_token_throughput",
    "concurrency": "concurrency",
    "acceptance rate (%)": "spec_acceptance_rate",
    "acceptance length": "spec_acceptance_length",
    "accept length": "spec_acceptance_length",
}

_LABEL_KIND = {
    "ttft": "ttft",
    "tpot": "tpot",
    "itl": "itl",
    "e2el": "e2el",
    "e2e latency": "e2el",
    "queue time": "queue",
}
LABEL_STAT_RE = re.compile(
    r"^(mean|median|std|min|max|p\d+(?:\.\d+)?) (ttft|tpot|itl|e2el|e2e latency|queue time) \(ms\)$"
)

# Result-JSON keys that other tools spell differently.
JSON_ALIASES: dict[str, str] = {
    "total_throughput": "total_token_throughput",
    "benchmark_duration": "duration",
    "max_concurrency_observed": "max_concurrent_requests",
}


def label_to_name(label: str) -> str | None:
    key = " ".join(label.strip().rstrip(":").lower().split())
    if key in SUMMARY_LABELS:
        return SUMMARY_LABELS[key]
    m = LABEL_STAT_RE.match(key)
    if m:
        return f"{m.group(1)}_{_LABEL_KIND[m.group(2)]}_ms"
    return None


def json_key_to_name(key: str) -> str | None:
    key = JSON_ALIASES.get(key, key)
    key = key.replace("_e2e_latency_ms", "_e2el_ms")
    if key in _FIXED or LATENCY_RE.match(key):
        return key
    return None

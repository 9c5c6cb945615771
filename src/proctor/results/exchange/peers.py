"""Read the result files of the tools proctor is compared with, into proctor's names and units.

    vllm       `vllm bench serve --save-result`: one JSON object with vLLM's result keys, which
               are proctor's own metric names (results/names.py), so they map one to one.
    guidellm   GuideLLM's `benchmarks.json`: a list of benchmarks (one per rate or
               concurrency of a sweep); each becomes a run. Latencies in ms (TTFT, ITL,
               TPOT) or s (request latency); GuideLLM's ITL is vLLM's TPOT (per token, first
               excluded), so it is read as `*_tpot_ms`.
    aiperf     AIPerf's `profile_export_aiperf.json`: one entry per metric tag with its unit
               and avg/p50/.../std. AIPerf's inter_token_latency is per token (vLLM's TPOT),
               its inter_chunk_latency per message (vLLM's ITL).

A value that is not a finite number is left out and named (`not_numbers`); a file whose
shape is not the tool's is a UsageError (exit 64) that says which field is wrong.
"""

from __future__ import annotations

import re
from datetime import datetime, timezone
from typing import Any

from proctor.errors import UsageError
from proctor.redact import data as redact_data
from proctor.results.exchange.model import ALWAYS_LACKS, ImportedResult, number, text
from proctor.results.names import json_key_to_name

# -- vLLM ----------------------------------------------------------------------------------
_VLLM_SETTINGS = (
    "backend",
    "endpoint_type",
    "num_prompts",
    "request_rate",
    "burstiness",
    "max_concurrency",
    "label",
)
_VLLM_DETAIL = ("ttfts", "itls", "input_lens", "output_lens")


def read_vllm(obj: dict[str, Any], source: str) -> list[ImportedResult]:
    """vLLM's --save-result JSON (also ATOM's copy of vLLM's client)."""
    res = ImportedResult(
        tool="vllm",
        format="vllm",
        name=f"vllm-bench-{text(obj.get('model_id'), 60) or 'serve'}",
        model=text(obj.get("model_id")),
    )
    for key, value in obj.items():
        name = json_key_to_name(key)
        if name is None or name == "request_rate":
            continue
        res.put(name, value)
    res.ended_at = _vllm_date(obj.get("date"))
    res.settings = {k: obj[k] for k in _VLLM_SETTINGS if k in obj and not isinstance(obj[k], dict)}
    if isinstance(obj.get("tokenizer_id"), str):
        res.settings["tokenizer"] = obj["tokenizer_id"]
    res.tool_version = text(obj.get("vllm_version") or obj.get("version"), 40)
    res.lacks = [
        *ALWAYS_LACKS,
        *([] if res.tool_version else ["vLLM version (--save-result does not record it)"]),
        "start time (vLLM records when it saved the result, in local time without offset)",
        *(
            []
            if any(isinstance(obj.get(k), list) for k in _VLLM_DETAIL)
            else ["per-request records (--save-detailed was not given)"]
        ),
        "warm-up requests and dataset identity",
    ]
    return [_require_metrics(res, source, "vLLM result")]


def _vllm_date(value: Any) -> str | None:
    """vLLM's `date` ("20261202-162655", local time of the machine that ran it)."""
    if not isinstance(value, str):
        return None
    try:
        return datetime.strptime(value, "%Y%m%d-%H%M%S").isoformat()
    except ValueError:
        return None


# -- AIPerf --------------------------------------------------------------------------------
_AIPERF_KIND = {
    "ttft": "ttft",
    "time_to_first_token": "ttft",
    "inter_token_latency": "tpot",
    "inter_chunk_latency": "itl",
    "request_latency": "e2el",
}
_AIPERF_FIXED = {
    "request_throughput": "request_throughput",
    "output_token_throughput": "output_throughput",
    "total_token_throughput": "total_token_throughput",
    "request_count": "completed",
    "completed_request_count": "completed",
    "error_request_count": "failed",
    "benchmark_duration": "duration",
    "total_isl": "total_input_tokens",
    "total_osl": "total_output_tokens",
    "goodput": "request_goodput",
}
_AIPERF_STATS = ("avg", "p50", "std", "min", "max", "p1", "p5", "p10", "p25", "p75", "p90")
_AIPERF_STATS_ALL = (*_AIPERF_STATS, "p95", "p99", "p99.9")
_STAT_NAME = {"avg": "mean", "p50": "median"}
#: Multipliers to ms (latencies) and to s (durations), by the unit AIPerf writes.
_TO_MS = {"ms": 1.0, "sec": 1e3, "s": 1e3, "us": 1e-3, "ns": 1e-6}
_TO_S = {"sec": 1.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}


def _aiperf_entries(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The metric entries: under `records` (AIPerf 0.1-0.3) or at the top level (later)."""
    records = obj.get("records")
    if records is not None and not isinstance(records, dict):
        raise UsageError("AIPerf export: `records` is not a JSON object", hint=_FIX_FILE)
    source = records if isinstance(records, dict) else obj
    return {
        str(k): v for k, v in source.items() if isinstance(v, dict) and ("avg" in v or "unit" in v)
    }


def read_aiperf(obj: dict[str, Any], source: str) -> list[ImportedResult]:
    """AIPerf's profile_export_aiperf.json."""
    config = _dict(obj.get("input_config"))
    model = _aiperf_model(config)
    res = ImportedResult(
        tool="aiperf",
        format="aiperf",
        tool_version=text(obj.get("aiperf_version"), 40),
        name=f"aiperf-{model or 'profile'}".replace("/", "_")[:80],
        model=model,
        started_at=text(obj.get("start_time"), 40),
        ended_at=text(obj.get("end_time"), 40),
    )
    entries = _aiperf_entries(obj)
    for tag, entry in entries.items():
        unit = str(entry.get("unit") or "")
        kind = _AIPERF_KIND.get(tag)
        if kind is not None:
            scale = _TO_MS.get(unit)
            if scale is None:
                res.not_numbers[tag] = f"unit {unit!r} is not a time"
                continue
            for stat in _AIPERF_STATS_ALL:
                value = number(entry.get(stat))
                if value is not None:
                    res.put(f"{_STAT_NAME.get(stat, stat)}_{kind}_ms", value * scale)
            continue
        name = _AIPERF_FIXED.get(tag)
        if name is None or (tag == "request_count" and "completed_request_count" in entries):
            continue  # later AIPerf counts completed requests under their own tag
        value = entry.get("avg")
        seconds = number(value)
        if name == "duration" and seconds is not None:
            value = seconds * _TO_S.get(unit, 1.0)
        res.put(name, value)
    res.settings = _aiperf_settings(obj, config)
    res.put("max_concurrency", res.settings.get("concurrency"))
    errors = obj.get("error_summary")
    if isinstance(errors, list) and errors:
        res.settings["errors"] = redact_data(errors[:10])
    if "failed" not in res.metrics and "completed" in res.metrics:
        res.metrics["failed"] = 0.0  # AIPerf writes no error count when nothing failed
    res.lacks = [
        *ALWAYS_LACKS,
        *([] if res.tool_version else ["AIPerf version (this export does not record it)"]),
        "per-request records (profile_export.jsonl was not imported)",
    ]
    if obj.get("was_cancelled") is True:
        res.lacks.append("a complete run: AIPerf says it was cancelled")
    return [_require_metrics(res, source, "AIPerf export")]


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _aiperf_model(config: dict[str, Any]) -> str | None:
    """The model: `models.items[].name` (AIPerf 0.13) or `endpoint.model_names` (earlier)."""
    items = _dict(config.get("models")).get("items")
    if isinstance(items, list) and items and isinstance(items[0], dict):
        return text(items[0].get("name"))
    names = _dict(config.get("endpoint")).get("model_names")
    return text(names[0]) if isinstance(names, list) and names else None


def _aiperf_settings(obj: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
    """The load asked for: `phases` (0.13) or `loadgen` (earlier), the lengths asked, and
    the command (redacted: it may carry an API key)."""
    plain = (str, int, float, bool)
    out: dict[str, Any] = {}
    phases = config.get("phases")
    source = (
        next((p for p in phases if isinstance(p, dict) and p.get("kind") == "profiling"), None)
        if isinstance(phases, list)
        else None
    )
    for key, value in _dict(source or config.get("loadgen")).items():
        if isinstance(value, plain):
            out[key] = value
    datasets = config.get("datasets")
    if isinstance(datasets, list) and datasets and isinstance(datasets[0], dict):
        prompts = _dict(datasets[0].get("prompts"))
        for key in ("isl", "osl"):
            mean = number(_dict(prompts.get(key)).get("mean"))
            if mean is not None:
                out[f"{key}_mean"] = mean
    command = _dict(obj.get("run_info")).get("cli_command") or config.get("cli_command")
    if isinstance(command, str):
        out["command"] = redact_data(command[:2000])
    return out


# -- GuideLLM ------------------------------------------------------------------------------
_GL_KIND = {
    "time_to_first_token_ms": ("ttft", 1.0),
    "inter_token_latency_ms": ("tpot", 1.0),
    "time_per_output_token_ms": ("tpot_all", 1.0),
    "request_latency": ("e2el", 1e3),
}
_GL_PCT = re.compile(r"^p(\d+)$")


def _gl_stats(dist: Any) -> dict[str, float]:
    """GuideLLM's distribution summary ({mean, median, std_dev, min, max, percentiles:
    {p50, p99, p999...}}) as proctor's statistic names."""
    out: dict[str, float] = {}
    if not isinstance(dist, dict):
        return out
    for key, name in (("mean", "mean"), ("median", "median"), ("std_dev", "std")):
        value = number(dist.get(key))
        if value is not None:
            out[name] = value
    for key in ("min", "max"):
        value = number(dist.get(key))
        if value is not None:
            out[key] = value
    pct = dist.get("percentiles")
    if isinstance(pct, dict):
        for key, raw in pct.items():
            m = _GL_PCT.match(str(key))
            value = number(raw)
            if m is None or value is None:
                continue
            digits = m.group(1)
            # p001 is 0.1, p999 is 99.9 (GuideLLM's names); p50 is 50
            if len(digits) == 3:
                label = f"p{digits[:2].lstrip('0') or '0'}.{digits[2]}"
            else:
                label = f"p{int(digits)}"
            out.setdefault("median" if label == "p50" else label, value)
    return out


def _gl_successful(metric: Any) -> Any:
    """A GuideLLM metric's figures over successful requests (`successful`), the status
    vLLM and proctor compute theirs over."""
    return metric.get("successful") if isinstance(metric, dict) else None


def read_guidellm(obj: dict[str, Any], source: str) -> list[ImportedResult]:
    """GuideLLM's benchmarks JSON (`guidellm run ... --output kind=json`; `benchmark` before)."""
    benchmarks = obj.get("benchmarks")
    if not isinstance(benchmarks, list) or not benchmarks:
        raise UsageError(f"{source}: GuideLLM file without benchmarks", hint=_FIX_FILE)
    version = text(_dict(obj.get("metadata")).get("guidellm_version"), 40)
    backend = _dict(_dict(_dict(obj.get("config")).get("spec")).get("backend"))
    model = text(backend.get("model"))
    for index, bench in enumerate(benchmarks):  # every shape first: all imported or none
        if not isinstance(bench, dict) or not isinstance(bench.get("metrics"), dict):
            raise UsageError(
                f"{source}: benchmarks[{index}] has no `metrics` object", hint=_FIX_FILE
            )
    return [
        _guidellm_one(bench, index, len(benchmarks), version, model, source)
        for index, bench in enumerate(benchmarks)
    ]


def _guidellm_one(
    bench: dict[str, Any],
    index: int,
    count: int,
    version: str | None,
    model: str | None,
    source: str,
) -> ImportedResult:
    metrics = bench["metrics"]
    strategy = _gl_strategy(bench)
    res = ImportedResult(
        tool="guidellm",
        format="guidellm",
        tool_version=version,
        name=f"guidellm-{index + 1}of{count}-{strategy.get('type_') or 'benchmark'}",
        model=model or _gl_model(bench),
    )
    for key, (kind, scale) in _GL_KIND.items():
        if kind == "tpot_all":
            continue  # GuideLLM's TPOT counts the first token in: no vLLM equivalent
        for stat, value in _gl_stats(_gl_successful(metrics.get(key))).items():
            res.put(f"{stat}_{kind}_ms", value * scale)
    totals = _dict(metrics.get("request_totals") or bench.get("request_totals"))
    completed = number(totals.get("successful"))
    res.put("completed", completed)
    failed = [number(totals.get(k)) for k in ("errored", "incomplete")]
    if any(v is not None for v in failed):
        res.put("failed", sum(v for v in failed if v is not None))
    tokens = {}
    for key, name in (
        ("prompt_token_count", "total_input_tokens"),
        ("output_token_count", "total_output_tokens"),
    ):
        tokens[name] = number(_dict(_gl_successful(metrics.get(key))).get("total_sum"))
        res.put(name, tokens[name])
    duration = number(bench.get("duration")) or _gl_duration(bench)
    res.put("duration", duration)
    # Throughputs as vLLM and proctor define them (totals over the measured duration);
    # GuideLLM's requests_per_second is a mean of instantaneous rates, kept as a setting.
    if duration and completed is not None:
        res.put("request_throughput", completed / duration)
        inp, out = tokens["total_input_tokens"], tokens["total_output_tokens"]
        if out is not None:
            res.put("output_throughput", out / duration)
        if inp is not None:
            res.put("input_throughput", inp / duration)
        if inp is not None and out is not None:
            res.put("total_token_throughput", (inp + out) / duration)
    res.started_at = _epoch_iso(bench.get("start_time"))
    res.ended_at = _epoch_iso(bench.get("end_time"))
    res.settings = {k: v for k, v in strategy.items() if isinstance(v, (str, int, float))}
    res.put("max_concurrency", strategy.get("max_concurrency"))
    rps = _gl_stats(_gl_successful(metrics.get("requests_per_second"))).get("mean")
    if rps is not None:
        res.settings["guidellm_requests_per_second_mean"] = rps
    res.lacks = [
        *ALWAYS_LACKS,
        *([] if version else ["GuideLLM version (this file does not record it)"]),
        "vLLM's per-chunk ITL (GuideLLM's inter-token latency is per token, read as TPOT)",
    ]
    return _require_metrics(res, f"{source} benchmarks[{index}]", "GuideLLM benchmark")


def _gl_strategy(bench: dict[str, Any]) -> dict[str, Any]:
    for holder in (bench.get("config"), bench.get("args"), bench):
        if isinstance(holder, dict) and isinstance(holder.get("strategy"), dict):
            return dict(holder["strategy"])
    return {}


def _gl_model(bench: dict[str, Any]) -> str | None:
    for holder in (bench.get("config"), bench.get("worker"), bench.get("backend")):
        if isinstance(holder, dict):
            for key in ("model", "requests_model"):
                if isinstance(holder.get(key), str):
                    return str(holder[key])[:200]
            inner = holder.get("backend")
            if isinstance(inner, dict) and isinstance(inner.get("model"), str):
                return str(inner["model"])[:200]
    return None


def _gl_duration(bench: dict[str, Any]) -> float | None:
    start, end = number(bench.get("start_time")), number(bench.get("end_time"))
    return end - start if start is not None and end is not None and end >= start else None


def _epoch_iso(value: Any) -> str | None:
    seconds = number(value)
    if seconds is None or not 0 < seconds < 4e9:
        return None
    return datetime.fromtimestamp(seconds, tz=timezone.utc).isoformat(timespec="milliseconds")


# -- shared --------------------------------------------------------------------------------
_FIX_FILE = "give the file the tool wrote, unedited, or force the format with --format"


def _require_metrics(res: ImportedResult, source: str, what: str) -> ImportedResult:
    if not res.metrics:
        bad = f" ({', '.join(sorted(res.not_numbers))} not numbers)" if res.not_numbers else ""
        raise UsageError(f"{source}: {what} holds no metric proctor can read{bad}", hint=_FIX_FILE)
    return res


__all__ = ["read_aiperf", "read_guidellm", "read_vllm"]

"""llm-d's Benchmark Report v0.2, both ways.

`to_br(source)` writes a Benchmark Report from a proctor result (a bench, or any run with
serving metrics): `run` (the run id as uid, times, the validity verdict as a keyword),
`scenario.load` (the dataset and lengths asked, rate and concurrency, the bench's config
as its native form), `scenario.stack` (the engine, where the bench measured a proctor server
run), and `results.request_performance.aggregate` (requests, latency and throughput
statistics). Latencies keep proctor's ms (`ms`, `ms/token`); throughputs are `tokens/s` and
`queries/s`. The schema (llm-d-benchmark's `br_v0_2_json_schema.json`, "Benchmark Report
v0.2.1") is vendored under tests/data/exchange/llm-d-benchmark/, and tests validate every
report written here against it.

`read_br(obj)` reads one back (from proctor or from llm-d's converters), converting units.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from typing import Any

from proctor.errors import UsageError
from proctor.results.exchange.model import ALWAYS_LACKS, ImportedResult, number, text
from proctor.results.names import LATENCY_RE

#: The version written: the v0.2 line's revision the vendored schema describes.
BR_VERSION = "0.2.1"
#: proctor latency kind -> (Benchmark Report field, its unit as written)
_KINDS = {
    "ttft": ("time_to_first_token", "ms"),
    "tpot": ("time_per_output_token", "ms/token"),
    "itl": ("inter_token_latency", "ms/token"),
    "e2el": ("request_latency", "ms"),
}
#: proctor statistic -> Benchmark Report statistic (the report has no other percentiles)
_STATS = {
    "mean": "mean",
    "median": "p50",
    "std": "stddev",
    "min": "min",
    "max": "max",
    "p0.1": "p0p1",
    "p1": "p1",
    "p5": "p5",
    "p10": "p10",
    "p25": "p25",
    "p50": "p50",
    "p75": "p75",
    "p90": "p90",
    "p95": "p95",
    "p99": "p99",
    "p99.9": "p99p9",
}
_FROM_STAT = {v: k for k, v in _STATS.items() if k not in ("p50",)}
_RATES = {
    "request_throughput": ("request_rate", "queries/s"),
    "input_throughput": ("input_token_rate", "tokens/s"),
    "output_throughput": ("output_token_rate", "tokens/s"),
    "total_token_throughput": ("total_token_rate", "tokens/s"),
}
#: Units a report may give a latency in -> multiplier to ms
_TO_MS = {"ms": 1.0, "s": 1e3, "ms/token": 1.0, "s/token": 1e3}
_TO_PER_S = {"tokens/s": 1.0, "queries/s": 1.0}


def _stats(metrics: dict[str, float], kind: str, unit: str) -> dict[str, Any] | None:
    out: dict[str, Any] = {"units": unit}
    for stat, field in _STATS.items():
        value = metrics.get(f"{stat}_{kind}_ms")
        if value is not None and field not in out:
            out[field] = value if field != "stddev" else max(value, 0.0)
    return out if "mean" in out else None


def _length_stats(summary: Any) -> dict[str, Any] | None:
    if not isinstance(summary, dict) or number(summary.get("mean")) is None:
        return None
    out: dict[str, Any] = {"units": "count", "mean": float(summary["mean"])}
    for key in ("min", "max"):
        if number(summary.get(key)) is not None:
            out[key] = summary[key]
    return out


def _iso_duration(seconds: float | None) -> str | None:
    return None if seconds is None else f"PT{seconds:.6f}S"


def _seconds_of(duration: Any) -> float | None:
    """An ISO-8601 duration (PT1H2M3.5S) in seconds, or None."""
    m = re.fullmatch(r"P(?:(\d+)D)?T?(?:(\d+)H)?(?:(\d+)M)?(?:([\d.]+)S)?", str(duration or ""))
    if not m or not any(m.groups()):
        return None
    d, h, mi, s = (float(g) if g else 0.0 for g in m.groups())
    return d * 86400 + h * 3600 + mi * 60 + s


def to_br(
    *,
    run_id: str,
    metrics: dict[str, float],
    bench: dict[str, Any] | None,
    record: dict[str, Any],
    server: dict[str, Any] | None,
    proctor_version: str,
) -> dict[str, Any]:
    """The Benchmark Report of one result (metrics by proctor's names; `bench`: its
    metrics.json when it is a proctor bench; `record`: its record.json; `server`: the record
    of the server run it measured, if any)."""
    if not any(LATENCY_RE.match(k) for k in metrics) and "request_throughput" not in metrics:
        raise UsageError(
            f"run {run_id} holds no serving metrics to write as a Benchmark Report",
            hint="export a bench run (or an imported serving result), or use --format proctor",
        )
    bench = bench or {}
    validity = bench.get("validity") if isinstance(bench.get("validity"), dict) else None
    keywords = ["proctor", str(record.get("kind") or "run")]
    if validity and validity.get("verdict"):
        keywords.append(f"validity:{validity['verdict']}")
    imported = record.get("imported") if isinstance(record.get("imported"), dict) else None
    if imported:
        keywords.append(f"imported-from:{imported.get('tool')}")
    time_part = {
        k: v
        for k, v in (
            ("start", bench.get("started_at") or record.get("started_at")),
            ("end", bench.get("finished_at") or record.get("ended_at")),
            ("duration", _iso_duration(metrics.get("duration"))),
        )
        if v
    }
    run: dict[str, Any] = {"uid": run_id, "keywords": keywords}
    if time_part:
        run["time"] = time_part
    if record.get("name"):
        run["description"] = str(record["name"])
    if record.get("sweep") or record.get("group"):
        run["eid"] = str(record.get("sweep") or record.get("group"))
    report: dict[str, Any] = {"version": BR_VERSION, "run": run}
    scenario: dict[str, Any] = {}
    load = _load(bench, proctor_version, imported)
    if load is not None:
        scenario["load"] = load
    engine = _engine(server, bench)
    if engine is not None:
        scenario["stack"] = [engine]
    if scenario:
        report["scenario"] = scenario
    report["results"] = {"request_performance": {"aggregate": _aggregate(metrics, bench)}}
    return report


def _aggregate(metrics: dict[str, float], bench: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    completed, failed = metrics.get("completed"), metrics.get("failed")
    if completed is not None:
        requests: dict[str, Any] = {"total": int(completed + (failed or 0))}
        if failed is not None:
            requests["failures"] = int(failed)
        lengths = (bench.get("prompt_lengths") or {}).get("actual")
        inp = _length_stats(lengths) or _mean_of(metrics, "total_input_tokens", completed)
        out_len = (bench.get("output_lengths") or {}).get("actual")
        outp = _length_stats(out_len) or _mean_of(metrics, "total_output_tokens", completed)
        if inp:
            requests["input_length"] = inp
        if outp:
            requests["output_length"] = outp
        out["requests"] = requests
    latency = {
        field: stats
        for kind, (field, unit) in _KINDS.items()
        if (stats := _stats(metrics, kind, unit)) is not None
    }
    if latency:
        out["latency"] = latency
    throughput = {
        field: {"units": unit, "mean": metrics[name]}
        for name, (field, unit) in _RATES.items()
        if name in metrics
    }
    if throughput:
        out["throughput"] = throughput
    return out


def _mean_of(metrics: dict[str, float], total: str, completed: float) -> dict[str, Any] | None:
    value = metrics.get(total)
    if value is None or completed <= 0:
        return None
    return {"units": "count", "mean": value / completed}


def _cfg_id(obj: Any) -> str:
    blob = json.dumps(obj, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:32]


def _seq(value: Any, ratio: Any) -> dict[str, Any] | None:
    v = number(value)
    if v is None or v < 0:
        return None
    r = number(ratio) or 0.0
    if r <= 0:
        return {"distribution": "fixed", "value": int(v)}
    lo, hi = max(0, math.floor(v * (1 - r))), max(1, math.ceil(v * (1 + r)))
    return {"distribution": "uniform", "value": int(v), "min": lo, "max": hi}


def _load(
    bench: dict[str, Any], proctor_version: str, imported: dict[str, Any] | None
) -> dict[str, Any] | None:
    config = bench.get("config") if isinstance(bench.get("config"), dict) else None
    if config is None:
        return None
    dataset: dict[str, Any] = bench["dataset"] if isinstance(bench.get("dataset"), dict) else {}
    isl = _seq(config.get("isl"), config.get("range_ratio"))
    standardized: dict[str, Any] = {
        "tool": "proctor" if imported is None else str(imported.get("tool")),
        "tool_version": proctor_version,
        "parallelism": max(1, int(number(config.get("workers")) or 1)),
        "source": "random" if dataset.get("kind", "random") == "random" else "sampled",
        "input_seq_len": isl or {"distribution": "other", "value": 0},
    }
    osl = _seq(config.get("osl"), config.get("range_ratio"))
    if osl:
        standardized["output_seq_len"] = osl
    rate = number(config.get("request_rate"))
    if rate is not None and rate > 0:
        standardized["rate_qps"] = rate
    conc = number(config.get("concurrency"))
    if conc is not None and conc >= 1:
        standardized["concurrency"] = int(conc)
    safe = {k: v for k, v in config.items() if k not in ("base_url", "api_key")}
    return {
        "metadata": {
            "schema_version": "0.0.1",
            "cfg_id": _cfg_id(safe),
            "description": str(dataset.get("id") or "proctor bench"),
        },
        "standardized": standardized,
        "native": {"config": safe},
    }


def _engine(server: dict[str, Any] | None, bench: dict[str, Any]) -> dict[str, Any] | None:
    """The engine component, when the bench measured a proctor server run (its record says
    the engine, its argv and the GPUs); None against a bare --base-url."""
    if not server or not isinstance(server.get("server"), dict):
        return None
    spec = server["server"]
    gpus = [g for g in (server.get("gpu") or {}).get("gpus") or [] if isinstance(g, dict)]
    argv = [str(a) for a in server.get("argv") or []]
    tp = _flag_int(argv, "--tensor-parallel-size", "-tp", "--tp-size", "--tp") or 1
    args: dict[str, Any] = {}
    for i, arg in enumerate(argv[1:], start=1):
        if arg.startswith("--"):
            key, _, value = arg.partition("=")
            nxt = argv[i + 1] if i + 1 < len(argv) else None
            args[key] = value or (nxt if nxt is not None and not nxt.startswith("--") else None)
    model = str(spec.get("served_model_name") or spec.get("model") or bench.get("model") or "")
    return {
        "metadata": {
            "schema_version": "0.0.1",
            "label": str(server.get("run_id") or "server"),
            "cfg_id": _cfg_id(argv),
            "description": f"proctor server run {server.get('run_id')}",
        },
        "standardized": {
            "kind": "inference_engine",
            "tool": str(spec.get("engine") or "unknown"),
            "tool_version": str(spec.get("engine_version") or "unknown"),
            "role": "replica",
            "replicas": 1,
            "model": {"name": model or "unknown"},
            "accelerator": {
                "model": str(gpus[0].get("name")) if gpus else "none",
                "count": len(gpus),
                "parallelism": {"tp": tp},
            },
        },
        "native": {"args": args},
    }


def _flag_int(argv: list[str], *names: str) -> int | None:
    for i, arg in enumerate(argv):
        key, _, value = arg.partition("=")
        if key in names:
            raw = value or (argv[i + 1] if i + 1 < len(argv) else "")
            if raw.isdigit():
                return int(raw)
    return None


# -- reading -------------------------------------------------------------------------------
def _object(obj: Any, path: str) -> dict[str, Any]:
    if obj is None:
        return {}
    if not isinstance(obj, dict):
        raise UsageError(
            f"Benchmark Report: {path} is {type(obj).__name__}, not an object",
            hint="give a report that llm-d-benchmark's schema accepts",
        )
    return obj


def read_br(obj: dict[str, Any], source: str) -> list[ImportedResult]:
    """A Benchmark Report v0.2 (JSON or YAML, already loaded) as one imported result."""
    # No version: the schema's default (0.2.1) applies
    version = str(obj.get("version") or BR_VERSION)
    if not version.startswith("0.2"):
        raise UsageError(
            f"{source}: Benchmark Report version {version[:20]!r} is not v0.2",
            hint="proctor reads Benchmark Report v0.2 (0.2, 0.2.x)",
        )
    run = _object(obj.get("run"), "run")
    scenario = _object(obj.get("scenario"), "scenario")
    load = _object(scenario.get("load"), "scenario.load")
    std = _object(load.get("standardized"), "scenario.load.standardized")
    stack = scenario.get("stack")
    engines: list[dict[str, Any]] = (
        [
            c["standardized"]
            for c in stack
            if isinstance(c, dict) and isinstance(c.get("standardized"), dict)
        ]
        if isinstance(stack, list)
        else []
    )
    engine = next((e for e in engines if e.get("kind") == "inference_engine"), None)
    model = None
    if engine and isinstance(engine.get("model"), dict):
        model = text(engine["model"].get("name"))
    tool = text(std.get("tool"), 60) or "unknown"
    keywords: list[Any] = run["keywords"] if isinstance(run.get("keywords"), list) else []
    res = ImportedResult(
        tool=tool,
        format="br-0.2",
        tool_version=text(std.get("tool_version"), 60),
        name=f"br-{tool}-{text(run.get('uid'), 40) or 'report'}",
        model=model,
    )
    times = _object(run.get("time"), "run.time")
    res.started_at, res.ended_at = text(times.get("start"), 40), text(times.get("end"), 40)
    if isinstance(times.get("start"), str) is False and times.get("start") is not None:
        res.started_at = str(times.get("start"))[:40]  # YAML reads a bare timestamp as a date
    duration = _seconds_of(times.get("duration"))
    results = _object(obj.get("results"), "results")
    perf = _object(results.get("request_performance"), "results.request_performance")
    agg = _object(perf.get("aggregate"), "results.request_performance.aggregate")
    requests = _object(agg.get("requests"), "aggregate.requests")
    total = number(requests.get("total"))
    failures = number(requests.get("failures")) or 0.0
    incomplete = number(requests.get("incomplete")) or 0.0
    if total is not None:
        res.put("completed", max(total - failures - incomplete, 0.0))
        res.put("failed", failures + incomplete)
    if duration is not None:
        res.put("duration", duration)
    latency = _object(agg.get("latency"), "aggregate.latency")
    for kind, (field, _unit) in _KINDS.items():
        stats = _object(latency.get(field), f"aggregate.latency.{field}")
        scale = _TO_MS.get(str(stats.get("units")))
        if not stats:
            continue
        if scale is None:
            res.not_numbers[field] = f"unit {str(stats.get('units'))[:20]!r} is not a time"
            continue
        for key, stat in _FROM_STAT.items():
            value = number(stats.get(key))
            if value is not None:
                res.put(f"{stat}_{kind}_ms", value * scale)
        value = number(stats.get("p50"))
        if value is not None:
            res.put(f"median_{kind}_ms", value * scale)
    throughput = _object(agg.get("throughput"), "aggregate.throughput")
    for name, (field, _unit) in _RATES.items():
        stats = _object(throughput.get(field), f"aggregate.throughput.{field}")
        if stats and str(stats.get("units")) in _TO_PER_S:
            res.put(name, stats.get("mean"))
    res.settings = {k: std[k] for k in ("rate_qps", "concurrency", "stage", "source") if k in std}
    res.settings["keywords"] = [str(k)[:60] for k in keywords[:20]]
    verdict = next(
        (str(k).split(":", 1)[1] for k in keywords if str(k).startswith("validity:")), None
    )
    res.lacks = [
        f"a full validity verdict (the report says {verdict}; proctor did not watch the run)"
        if verdict
        else ALWAYS_LACKS[0],
        *ALWAYS_LACKS[1:],
        "per-request records",
    ]
    if not res.metrics:
        raise UsageError(
            f"{source}: the Benchmark Report holds no request-performance figures",
            hint="give a report with results.request_performance.aggregate",
        )
    return [res]


__all__ = ["BR_VERSION", "read_br", "to_br"]

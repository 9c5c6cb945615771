"""run_benchmark(config) -> BenchResult, and the files a run leaves behind.

Sequence: resolve the model (/v1/models), build prompts, warmups (excluded from metrics),
start profiling if asked, the measured requests, stop profiling, metrics computed once over
all records (merged across worker processes when --workers > 1).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from proctor import __version__, redact
from proctor.errors import TargetUnavailable, UsageError, WorkloadFailed
from proctor.workloads.loadgen.client import PlannedRequest, http_path, make_session, open_sender
from proctor.workloads.loadgen.config import BenchConfig
from proctor.workloads.loadgen.dataset import LocalTokenizer, build_requests
from proctor.workloads.loadgen.headroom import Probe, Sample, summarize
from proctor.workloads.loadgen.loop import loop_name, quiet_gc
from proctor.workloads.loadgen.loop import run as run_loop
from proctor.workloads.loadgen.metrics import BenchMetrics, compute_metrics
from proctor.workloads.loadgen.progress import PollingProgress
from proctor.workloads.loadgen.records import RequestRecord
from proctor.workloads.loadgen.scheduler import Counter, run_requests, schedule_report
from proctor.workloads.loadgen.verdict import Verdict, judge

SCHEMA = "proctor.bench.metrics"
SCHEMA_VERSION = 1


@dataclass
class ProfileStatus:
    requested: bool = False
    started: bool = False
    stopped: bool = False
    error: str | None = None


@dataclass
class BenchResult:
    config: BenchConfig
    model: str
    metrics: BenchMetrics
    records: list[RequestRecord]  # warmups included, flagged
    prompt_source: str
    started_at: str
    finished_at: str
    profile: ProfileStatus = field(default_factory=ProfileStatus)
    client: dict[str, Any] | None = None  # headroom.summarize(): CPU, loop lag, client_bound

    @property
    def measured(self) -> list[RequestRecord]:
        return [r for r in self.records if not r.warmup]

    @property
    def all_failed(self) -> bool:
        return bool(self.measured) and self.metrics.completed == 0

    def verdict(self) -> Verdict:
        return judge(self.measured, self.config.max_error_rate)



def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).astimezone().isoformat(timespec="seconds")


async def resolve_model(session: aiohttp.ClientSession, cfg: BenchConfig) -> str:
    """The model to ask for; also the reachability check (69 when nothing answers)."""
    url = cfg.base_url + "/v1/models"
    try:
        limit = aiohttp.ClientTimeout(total=cfg.connect_timeout_s)
        async with session.get(url, timeout=limit) as r:
            if r.status == 200:
                data = await r.json(content_type=None)
                listed = data.get("data") if isinstance(data, dict) else None
                ids = [m.get("id") for m in (listed if isinstance(listed, list) else [])
                       if isinstance(m, dict)]
                if cfg.model:
                    return cfg.model
                if ids and isinstance(ids[0], str):
                    return ids[0]
            if cfg.model:
                return cfg.model
            raise UsageError(f"{url} answered {r.status} and listed no model",
                             hint="pass --model NAME")
    except (aiohttp.ClientConnectorError, aiohttp.ServerDisconnectedError,
            asyncio.TimeoutError) as e:
        raise TargetUnavailable(f"cannot reach the server at {cfg.base_url}: {type(e).__name__}",
                                hint="check --base-url/--port and that the server is ready") from e
    except (aiohttp.ClientError, ValueError) as e:
        if cfg.model:
            return cfg.model
        raise TargetUnavailable(f"{url} did not answer usefully: {type(e).__name__}",
                                hint="pass --model NAME") from e


async def _profile(cfg: BenchConfig, which: str, status: ProfileStatus) -> None:
    try:
        async with make_session(cfg, limit=2) as session, \
                session.post(f"{cfg.base_url}/{which}_profile") as r:
            ok = r.status == 200
            if not ok:
                status.error = f"/{which}_profile answered {r.status}"
    except (aiohttp.ClientError, asyncio.TimeoutError) as e:
        ok, status.error = False, f"/{which}_profile failed: {type(e).__name__}"
    if which == "start":
        status.started = ok
    else:
        status.stopped = ok


async def prepare(cfg: BenchConfig) -> tuple[str, list[PlannedRequest], str]:
    async with make_session(cfg, limit=32) as session:
        model = await resolve_model(session, cfg)
        reqs, source = await build_requests(cfg, session, model)
    return model, reqs, source


def _count_fn(cfg: BenchConfig) -> Callable[[str], int] | None:
    if cfg.tokenizer and cfg.tokenizer_mode in ("auto", "local"):
        return LocalTokenizer(cfg.tokenizer).count
    return None


async def _run_single(cfg: BenchConfig, model: str, reqs: list[PlannedRequest],
                      bar: PollingProgress, profile: ProfileStatus
                      ) -> tuple[list[RequestRecord], float, Sample]:
    counter = Counter()
    count = _count_fn(cfg)
    warm = [r for r in reqs if r.warmup]
    meas = [r for r in reqs if not r.warmup]
    async with open_sender(cfg, limit=cfg.concurrency) as sender:
        records: list[RequestRecord] = []
        if warm:
            bar.phase("warmup", len(warm), lambda: counter.value, lambda: counter.failed)
            records += await run_requests(sender, cfg, model, warm, concurrency=cfg.concurrency,
                                          rate=float("inf"), seed=cfg.seed, counter=counter,
                                          count_tokens=count)
        if cfg.profile:
            await _profile(cfg, "start", profile)
        bar.phase("benchmark", len(meas), lambda: counter.value, lambda: counter.failed)
        with quiet_gc():
            probe = Probe().start()
            t0 = time.perf_counter()
            records += await run_requests(sender, cfg, model, meas, concurrency=cfg.concurrency,
                                          rate=cfg.request_rate, seed=cfg.seed + 1,
                                          counter=counter, count_tokens=count)
            duration = time.perf_counter() - t0
            sample = probe.stop()
        if cfg.profile:
            await _profile(cfg, "stop", profile)
    return records, duration, sample


def run_benchmark(cfg: BenchConfig) -> BenchResult:
    """Run one benchmark; raises TargetUnavailable when the server cannot be reached."""
    started = _now()
    profile = ProfileStatus(requested=cfg.profile)
    model, reqs, source = run_loop(prepare(cfg))
    with PollingProgress(cfg.progress, log_every_s=cfg.log_every_s) as bar:
        if cfg.workers > 1:
            from proctor.workloads.loadgen.workers import run_workers

            records, duration, samples = run_workers(cfg, model, reqs, bar, profile)
        else:
            records, duration, sample = run_loop(_run_single(cfg, model, reqs, bar, profile))
            samples = [sample]
    metrics = compute_metrics(records, duration, percentiles=cfg.percentiles,
                              goodput_slos_ms=cfg.goodput_slos_ms or None,
                              max_concurrency=cfg.concurrency, request_rate=cfg.rate_or_none)
    client = summarize(samples, path=http_path(cfg), loop=loop_name())
    return BenchResult(cfg, model, metrics, records, source, started, _now(), profile, client)


def _dist(values: list[int]) -> dict[str, Any]:
    if not values:
        return {"count": 0}
    return {"count": len(values), "min": min(values), "max": max(values),
            "mean": statistics.fmean(values)}


def result_document(res: BenchResult) -> dict[str, Any]:
    meas = res.measured
    verdict = res.verdict()
    failed = [r for r in meas if not r.success]
    actual_prompt = [r.prompt_tokens if r.prompt_tokens is not None else r.prompt_len
                     for r in meas]
    return {
        "schema": SCHEMA,
        "schema_version": SCHEMA_VERSION,
        "proctor_version": __version__,
        "started_at": res.started_at,
        "finished_at": res.finished_at,
        "model": res.model,
        "config": res.config.public_dict(),
        "metrics": {**res.metrics.flat(), "error_rate": verdict.error_rate,
                    "max_error_rate": verdict.max_error_rate,
                    "workload_failed": int(not verdict.ok)},
        "verdict": verdict.to_dict(),
        "stats_ms": {k: v.model_dump() for k, v in res.metrics.stats_ms.items()},
        "failures": {
            "count": len(failed),
            "by_reason": res.metrics.failures_by_reason,
            "examples": [{"index": r.index, "status": r.status, "reason": r.reason,
                          "error": r.error} for r in failed[:10]],
        },
        "warmup": {"count": sum(r.warmup for r in res.records),
                   "failed": sum(r.warmup and not r.success for r in res.records)},
        "prompt_lengths": {
            "source": res.prompt_source,
            "target": _dist([r.prompt_len for r in meas]),
            "actual": _dist(actual_prompt),
            "actual_by_request": actual_prompt,
        },
        "output_lengths": {
            "expected": _dist([r.expected_output_len for r in meas]),
            "actual": _dist([r.output_tokens for r in meas if r.success]),
            "sources": sorted({r.output_tokens_source for r in meas if r.success}),
        },
        "profile": vars(res.profile),
        "workers": res.config.workers,
        "client": res.client,
        "schedule": schedule_report(meas, res.config.rate_or_none),
    }


def _atomic_write(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    os.fchmod(fd, 0o644)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def write_outputs(res: BenchResult, out_dir: Path) -> list[Path]:
    """DIR/metrics.json always; DIR/requests.jsonl with save_detailed."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = [out_dir / "metrics.json"]
    _atomic_write(written[0], json.dumps(redact.data(result_document(res)), indent=2) + "\n")
    if res.config.save_detailed:
        path = out_dir / "requests.jsonl"
        lines = (json.dumps(redact.data(r.to_dict())) + "\n" for r in res.records)
        _atomic_write(path, "".join(lines))
        written.append(path)
    return written


def check_outcome(res: BenchResult) -> None:
    """Raise WorkloadFailed when more measured requests failed than --max-error-rate allows
    (by default any), or when none was measured."""
    verdict = res.verdict()
    if not verdict.ok:
        by = ", ".join(f"{k}={v}" for k, v in res.metrics.failures_by_reason.items())
        raise WorkloadFailed(f"benchmark failed: {verdict.message()}"
                             + (f" [{by}]" if by else ""),
                             hint="see failures in metrics.json; --max-error-rate R allows some")

"""run_benchmark(config) -> BenchResult, and the files a run leaves behind.

Sequence: resolve the model (/v1/models), build the dataset's requests (workload.py),
warmups (excluded from metrics), start profiling if asked, the measured requests, stop
profiling, metrics computed once over all records (merged across worker processes when
--workers > 1). With --repeat N the measured phase runs N times, each with its own requests
and metrics (repeats.py); the server's prefix-cache counters are read around each.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from proctor import redact
from proctor.errors import TargetUnavailable, UsageError, WorkloadFailed
from proctor.jobs.documents import BENCH_SCHEMA, BENCH_VERSION, BenchDocument, write_checked
from proctor.results.validity import judge_validity, sent_rates, ttft_trend
from proctor.version import __version__
from proctor.workloads.loadgen import cores, prefix_counters, repeats, request_ids
from proctor.workloads.loadgen.client import (
    PlannedRequest,
    http_path,
    make_session,
    open_sender,
    read_path,
)
from proctor.workloads.loadgen.config import BenchConfig
from proctor.workloads.loadgen.conformance import conformance_report, prompts_sha256
from proctor.workloads.loadgen.dataset import LocalTokenizer
from proctor.workloads.loadgen.headroom import Probe, Sample, summarize
from proctor.workloads.loadgen.loop import loop_name, quiet_gc
from proctor.workloads.loadgen.loop import run as run_loop
from proctor.workloads.loadgen.metrics import BenchMetrics, compute_metrics
from proctor.workloads.loadgen.progress import PollingProgress
from proctor.workloads.loadgen.records import RequestRecord
from proctor.workloads.loadgen.scheduler import Counter, run_requests, schedule_report
from proctor.workloads.loadgen.steady import steady_state
from proctor.workloads.loadgen.telemetry import BenchTelemetry
from proctor.workloads.loadgen.verdict import Verdict, judge
from proctor.workloads.loadgen.workload import Workload, build_workload

SCHEMA = BENCH_SCHEMA
SCHEMA_VERSION = BENCH_VERSION


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
    dataset: dict[str, Any] = field(default_factory=dict)  # what was sent (workload.py)
    prefix_cache: dict[str, Any] | None = None  # the server's hit rate over the measured phase
    per_repeat: list[BenchMetrics] = field(default_factory=list)  # --repeat N > 1
    telemetry: dict[str, Any] = field(default_factory=dict)  # "server", "energy" (telemetry.py)
    client: dict[str, Any] | None = None  # headroom.summarize(): CPU, loop lag, client_bound
    prompts_hash: str | None = None  # conformance.prompts_sha256 of the measured prompts
    # The schedule's rate when the dataset sets it (a trace's mean offered rate), else None.
    schedule_rate: float | None = None

    @property
    def target_rate(self) -> float | None:
        """The rate the measured requests were scheduled at: --request-rate or the trace's."""
        return self.schedule_rate if self.schedule_rate is not None else self.config.rate_or_none

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
                ids = [
                    m.get("id")
                    for m in (listed if isinstance(listed, list) else [])
                    if isinstance(m, dict)
                ]
                if cfg.model:
                    return cfg.model
                if ids and isinstance(ids[0], str):
                    return ids[0]
            if cfg.model:
                return cfg.model
            raise UsageError(
                f"{url} answered {r.status} and listed no model", hint="pass --model NAME"
            )
    except (
        aiohttp.ClientConnectorError,
        aiohttp.ServerDisconnectedError,
        asyncio.TimeoutError,
    ) as e:
        raise TargetUnavailable(
            f"cannot reach the server at {cfg.base_url}: {type(e).__name__}",
            hint="check --base-url/--port and that the server is ready",
        ) from e
    except (aiohttp.ClientError, ValueError) as e:
        if cfg.model:
            return cfg.model
        raise TargetUnavailable(
            f"{url} did not answer usefully: {type(e).__name__}", hint="pass --model NAME"
        ) from e


async def _profile(cfg: BenchConfig, which: str, status: ProfileStatus) -> None:
    try:
        async with (
            make_session(cfg, limit=2) as session,
            session.post(f"{cfg.base_url}/{which}_profile") as r,
        ):
            ok = r.status == 200
            if not ok:
                status.error = f"/{which}_profile answered {r.status}"
    except (aiohttp.ClientError, asyncio.TimeoutError) as e:
        ok, status.error = False, f"/{which}_profile failed: {type(e).__name__}"
    if which == "start":
        status.started = ok
    else:
        status.stopped = ok


async def prepare(cfg: BenchConfig) -> tuple[str, Workload]:
    async with make_session(cfg, limit=32) as session:
        model = await resolve_model(session, cfg)
        work = await build_workload(cfg, session, model)
    return model, work


class PrefixReader:
    """The server's prefix-cache counters, read around each measured phase. Once /metrics has
    not answered (here, or the telemetry scraper gave up on it), it is not read again: a
    hanging /metrics costs a bench one timeout, not two per repeat."""

    def __init__(self, cfg: BenchConfig, gave_up: Callable[[], bool] = lambda: False) -> None:
        self.cfg, self.gave_up, self.unanswered = cfg, gave_up, False

    async def read(self) -> prefix_counters.Reading | None:
        # --server-metrics 0: the server's /metrics is not read at all.
        if self.cfg.server_metrics_s == 0 or self.unanswered or self.gave_up():
            return None
        async with make_session(self.cfg, limit=1) as session:
            try:
                return await prefix_counters.read(session, self.cfg.base_url)
            except prefix_counters.Unanswered:
                self.unanswered = True
                return None


def _count_fn(cfg: BenchConfig) -> Callable[[str], int] | None:
    if cfg.tokenizer and cfg.tokenizer_mode in ("auto", "local"):
        return LocalTokenizer(cfg.tokenizer).count
    return None


async def _run_single(
    cfg: BenchConfig,
    model: str,
    reqs: list[PlannedRequest],
    bar: PollingProgress,
    profile: ProfileStatus,
    prefix: list[prefix_counters.Reading | None] | None = None,
    reader: PrefixReader | None = None,
    schedule: list[float] | None = None,
) -> tuple[list[RequestRecord], float, Sample]:
    counter = Counter()
    count = _count_fn(cfg)
    warm = [r for r in reqs if r.warmup]
    meas = [r for r in reqs if not r.warmup]
    async with open_sender(cfg, limit=cfg.concurrency) as sender:
        records: list[RequestRecord] = []
        if warm:
            bar.phase(
                "warmup",
                len(warm),
                lambda: counter.value,
                lambda: counter.failed,
                lambda: counter.timed_out,
            )
            records += await run_requests(
                sender,
                cfg,
                model,
                warm,
                concurrency=cfg.concurrency,
                rate=float("inf"),
                seed=cfg.seed,
                counter=counter,
                count_tokens=count,
            )
        if cfg.profile:
            await _profile(cfg, "start", profile)
        bar.phase(
            "benchmark",
            len(meas),
            lambda: counter.value,
            lambda: counter.failed,
            lambda: counter.timed_out,
        )
        reader = reader or PrefixReader(cfg)
        if prefix is not None:  # the server's prefix-cache counters around the measured phase
            prefix.append(await reader.read())
        with quiet_gc():
            probe = Probe().start()
            t0 = time.perf_counter()
            if cfg.dataset_kind == "multi-turn":
                from proctor.workloads.loadgen.multiturn import run_conversations

                async def send(req: PlannedRequest, rec: RequestRecord) -> RequestRecord:
                    return await sender.send(cfg, model, req, rec, count)

                records += await run_conversations(
                    send, meas, concurrency=cfg.concurrency, counter=counter
                )
            else:
                records += await run_requests(
                    sender,
                    cfg,
                    model,
                    meas,
                    concurrency=cfg.concurrency,
                    rate=cfg.request_rate,
                    seed=cfg.seed + 1,
                    counter=counter,
                    count_tokens=count,
                    schedule=schedule,
                )
            duration = time.perf_counter() - t0
            sample = probe.stop()
        if prefix is not None:
            prefix.append(await reader.read())
        if cfg.profile:
            await _profile(cfg, "stop", profile)
    return records, duration, sample


def run_benchmark(cfg: BenchConfig, out_dir: Path | None = None) -> BenchResult:
    """Run one benchmark; raises TargetUnavailable when the server cannot be reached.
    With `out_dir`, the server's /metrics and the GPUs are sampled into it meanwhile."""
    started = _now()
    cores.check(cfg.client_cores)  # every core named, before anything is sent
    profile = ProfileStatus(requested=cfg.profile)
    with BenchTelemetry(cfg, out_dir) as telemetry:
        reader = PrefixReader(cfg, telemetry.metrics_gave_up)
        model, work = run_loop(prepare(cfg))
        if work.info.get("kind") == "trace":  # before a replay that may be long: how long
            from proctor.workloads.loadgen.trace_workload import trace_note

            print(f"proctor: {trace_note(work.info)}", file=sys.stderr, flush=True)
        records: list[RequestRecord] = []
        id_base = request_ids.run_base()
        per_repeat: list[BenchMetrics] = []
        windows: list[dict[str, Any]] = []
        samples: list[Sample] = []
        with PollingProgress(
            cfg.progress, log_every_s=cfg.log_every_s, on_phase=telemetry.phase
        ) as bar:
            for r, measured in enumerate(work.repeats):
                # Warmups once, before the first repeat; profiling covers the first repeat only.
                reqs = (work.warmup if r == 0 else []) + measured
                request_ids.assign(reqs, id_base, r)
                phase_cfg = cfg if r == 0 else cfg.model_copy(update={"profile": False})
                readings: list[prefix_counters.Reading | None] = []
                if cfg.workers > 1:
                    from proctor.workloads.loadgen.workers import run_workers

                    # Workers run warmups and measured requests in one call: on repeat 0 with
                    # warmups, the counters' window includes the warmups (said in metrics.json).
                    readings.append(run_loop(reader.read()))
                    got, duration, got_samples = run_workers(phase_cfg, model, reqs, bar, profile)
                    readings.append(run_loop(reader.read()))
                else:
                    with cores.pinned(cfg.client_cores[:1]):
                        got, duration, sample = run_loop(
                            _run_single(
                                phase_cfg,
                                model,
                                reqs,
                                bar,
                                profile,
                                readings,
                                reader,
                                work.schedule,
                            )
                        )
                    got_samples = [sample]
                samples += got_samples
                for rec in got:
                    if not rec.warmup:
                        rec.repeat = r
                records += got
                windows.append(prefix_counters.achieved(readings[0], readings[-1]))
                if cfg.workers > 1 and r == 0 and work.warmup:
                    windows[-1]["includes_warmup"] = True
                per_repeat.append(
                    compute_metrics(
                        got,
                        duration,
                        percentiles=cfg.percentiles,
                        goodput_slos_ms=cfg.goodput_slos_ms or None,
                        max_concurrency=cfg.concurrency,
                        request_rate=work.target_rate or cfg.rate_or_none,
                    )
                )
        telemetry.end()
    metrics = per_repeat[0] if len(per_repeat) == 1 else repeats.combine(per_repeat)
    prefix = windows[0] if len(windows) == 1 else prefix_counters.merge(windows)
    itls = [g for r in records if r.success and not r.warmup for g in r.itl]
    client = summarize(
        samples, path=http_path(cfg), loop=loop_name(), itls=itls, reader=read_path(cfg)
    )
    res = BenchResult(
        cfg,
        model,
        metrics,
        records,
        work.source,
        started,
        _now(),
        profile,
        dataset=work.info,
        prefix_cache=prefix,
        per_repeat=per_repeat if len(per_repeat) > 1 else [],
        client=client,
        schedule_rate=work.target_rate,
    )
    res.telemetry = telemetry.sections(metrics, res.measured)
    res.prompts_hash = prompts_sha256(
        r.prompt if r.messages is None else json.dumps(r.messages, sort_keys=True)
        for measured in work.repeats
        for r in measured
    )
    return res


def _dist(values: list[int]) -> dict[str, Any]:
    if not values:
        return {"count": 0}
    return {
        "count": len(values),
        "min": min(values),
        "max": max(values),
        "mean": statistics.fmean(values),
    }


def result_document(res: BenchResult) -> dict[str, Any]:
    meas = res.measured
    verdict = res.verdict()
    failed = [r for r in meas if not r.success]
    actual_prompt = [r.prompt_tokens if r.prompt_tokens is not None else r.prompt_len for r in meas]
    doc: dict[str, Any] = {
        "schema": SCHEMA,
        "schema_version": SCHEMA_VERSION,
        "proctor_version": __version__,
        "started_at": res.started_at,
        "finished_at": res.finished_at,
        "model": res.model,
        "config": res.config.public_dict(),
        "metrics": {
            **res.metrics.flat(),
            "error_rate": verdict.error_rate,
            "max_error_rate": verdict.max_error_rate,
            "workload_failed": int(not verdict.ok),
        },
        "verdict": verdict.to_dict(),
        "stats_ms": {k: v.model_dump() for k, v in res.metrics.stats_ms.items()},
        "failures": {
            "count": len(failed),
            "by_reason": res.metrics.failures_by_reason,
            "examples": [
                {"index": r.index, "status": r.status, "reason": r.reason, "error": r.error}
                for r in failed[:10]
            ],
        },
        "warmup": {
            "count": sum(r.warmup for r in res.records),
            "failed": sum(r.warmup and not r.success for r in res.records),
        },
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
        "dataset": _dataset_section(res),
        **({"repeats": _repeats_section(res)} if res.per_repeat else {}),
        "client": res.client,
        "schedule": _schedule(res),
        "conformance": conformance_report(
            meas,
            ignore_eos=res.config.ignore_eos,
            chat=res.config.endpoint == "chat",
            prompt_source=res.prompt_source,
            prompts_hash=res.prompts_hash,
        ),
        "steady_state": steady_state(meas, res.config.percentiles, len(res.per_repeat) or 1),
    }
    doc.update(res.telemetry)
    return with_validity(doc, res)


def _schedule(res: BenchResult) -> dict[str, Any]:
    """The send schedule; with --repeat each repeat is its own schedule, so the achieved rate is
    the mean of the repeats' rates (one span over all would count the gaps between them)."""
    rate = res.target_rate
    out: dict[str, Any] = dict(schedule_report(res.measured, rate))
    if res.per_repeat:
        per = [
            schedule_report([r for r in res.measured if r.repeat == k], rate)["achieved_rate"]
            for k in range(len(res.per_repeat))
        ]
        known = [float(x) for x in per if x is not None]
        out["achieved_rate"] = sum(known) / len(known) if known else None
        out["per_repeat_achieved_rate"] = per
    return out


def with_validity(doc: dict[str, Any], res: BenchResult) -> dict[str, Any]:
    """Add "validity" (results.validity) and the store's metrics: valid, energy per token."""
    trend = ttft_trend([(r.start_time, r.ttft) for r in res.measured if r.success])
    validity = judge_validity(
        doc,
        trend,
        min_requests=res.config.min_requests,
        min_window_s=res.config.min_window_s,
        sent=sent_rates([(r.queued_at, r.start_time) for r in res.measured]),
    ).to_dict()
    if trend is not None:
        validity["ttft_trend"] = trend
    doc["validity"] = validity
    doc["metrics"]["valid"] = int(validity["verdict"] == "VALID")
    energy = doc.get("energy") or {}
    for key, name in (
        ("j_per_output_token", "energy_per_output_token_j"),
        ("mean_power_w", "gpu_power_mean_w"),
    ):
        if energy.get(key) is not None:
            doc["metrics"][name] = energy[key]
    return doc


def _dataset_section(res: BenchResult) -> dict[str, Any]:
    info = dict(res.dataset)
    if res.prefix_cache is not None:
        info["prefix_cache"] = res.prefix_cache
    if res.config.dataset_kind == "multi-turn":
        info["per_turn"] = _per_turn(res.measured)
    return info


def _per_turn(meas: list[RequestRecord]) -> list[dict[str, Any]]:
    """TTFT and prompt length by turn number: later turns carry longer histories."""
    out: list[dict[str, Any]] = []
    for turn in sorted({r.turn for r in meas if r.turn is not None}):
        ok = [r for r in meas if r.turn == turn and r.success]
        n_all = sum(r.turn == turn for r in meas)
        out.append(
            {
                "turn": turn,
                "requests": n_all,
                "completed": len(ok),
                "mean_prompt_len": statistics.fmean([r.prompt_len for r in ok]) if ok else None,
                "mean_ttft_ms": statistics.fmean([r.ttft for r in ok]) * 1000 if ok else None,
            }
        )
    return out


def _repeats_section(res: BenchResult) -> dict[str, Any]:
    per = [m.flat() for m in res.per_repeat]
    return {
        "n": len(per),
        "confidence": repeats.CONFIDENCE,
        "method": "mean over repeats; 95% CI = mean ± t(0.975, n-1) * stdev/sqrt(n)",
        "stats": repeats.summarize(per),
        "per_repeat": per,
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
    document = redact.data(result_document(res))
    write_checked(document, BenchDocument, lambda text: _atomic_write(written[0], text))
    if res.config.save_detailed:
        path = out_dir / "requests.jsonl"
        lines = (json.dumps(redact.data(r.to_dict()), allow_nan=False) + "\n" for r in res.records)
        _atomic_write(path, "".join(lines))
        written.append(path)
    return written


def check_outcome(res: BenchResult) -> None:
    """Raise WorkloadFailed when more measured requests failed than --max-error-rate allows
    (by default any), or when none was measured."""
    verdict = res.verdict()
    if not verdict.ok:
        by = ", ".join(f"{k}={v}" for k, v in res.metrics.failures_by_reason.items())
        raise WorkloadFailed(
            f"benchmark failed: {verdict.message()}" + (f" [{by}]" if by else ""),
            hint="see failures in metrics.json; --max-error-rate R allows some",
        )

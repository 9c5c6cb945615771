"""Is this benchmark a measurement at all? VALID or INVALID, with the reasons.

A benchmark can finish with every request answered and still measure nothing useful: the
client was the bottleneck, the rate asked for was never reached, the server's queue grew for
the whole run, or the window was too short to say anything. `judge_validity` reads a bench's
metrics.json document and says which checks failed. Thresholds (docs/bench.md):

- errors: failed measured requests within --max-error-rate (the bench's own verdict), and at
  least one measured request succeeded: no success is no measurement, whatever the limit.
- warmup: at least one warm-up request ran, and succeeded, and was left out of the metrics.
- requests: at least --min-requests measured requests (default 100: a p99 of fewer is the max).
- window: a measured window of at least --min-window seconds (default 10).
- rate: with a target request rate, the client sent each request when its schedule said:
  the p99 schedule delay (actual send time - intended send time, metrics.json "schedule") at
  most `delay_limit_ms(rate)`: 50 ms, or 10 mean gaps (10 / rate) when that is shorter, never
  under 2 ms. The achieved rate of a random schedule is not judged: the schedule is rescaled
  to the rate asked (vLLM's arrival process), and a late client shows in its delays. Documents
  without delays (older runs) fall back to the achieved rate against RATE_FLOOR (95 %) of the
  target: the load generator's own figure, else `sent_rates`.
- client: the load generator was not the bottleneck (metrics.json "client"; not measured
  when the document has none).
- server: the server's own count of generated tokens over the measured window (its /metrics,
  metrics.json "server".reconcile) agrees with the client's output tokens, within the
  reconcile tolerance (monitors/reconcile.py). Far more tokens on the server means another
  client loaded it during the bench, so the latencies are not those of the load asked for;
  a disagreement either way means one side miscounts. Not measured without /metrics.
- conformance: the server ran the workload asked for (metrics.json "conformance", written by
  workloads/loadgen/conformance.py): with ignore-eos every successful request produced exactly
  the output length asked for, and the prompt lengths the server counted match the planned
  ones within the tolerance, where each can be judged. Not measured in older documents.
- gpu: the GPUs the run used stayed healthy while it ran (monitors/gpu_health.py, added by the
  run wrapper after the load generator wrote its document): no uncorrected ECC error, retired
  page, remapped row or Xid appeared, and clocks were not throttled for heat or by a power
  brake. Time at the power limit is said in the detail, not judged (a compute-bound load at
  the board's limit is the GPU as configured). Not measured without a GPU.
- saturation: TTFT did not grow without bound: the least-squares slope of TTFT against request
  start time is at most SATURATION_SLOPE (0.05 s of TTFT per s of run), or the rise the fit
  predicts over the window is at most SATURATION_RISE (50 %) of the mean TTFT.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from proctor.stats import finite

if TYPE_CHECKING:  # imported where a document is judged: the run wrapper's `with_check` needs
    # no model (it loads no pydantic; tests/cli/test_command_imports.py)
    from proctor.jobs.documents import BenchDocument, ConformanceCheck, ValiditySection

RATE_FLOOR = 0.95
DELAY_LIMIT_MS = 50.0  # p99 schedule delay allowed: at most this,
DELAY_GAPS = 10.0  # or this many mean gaps between arrivals when that is shorter,
DELAY_FLOOR_MS = 2.0  # never below this (a timer's and a loaded machine's own jitter)
SATURATION_SLOPE = 0.05
SATURATION_RISE = 0.5
MIN_TREND_POINTS = 10

Verdict = Literal["VALID", "INVALID"]


@dataclass
class Validity:
    checks: dict[str, dict[str, Any]] = field(default_factory=dict)

    def add(self, name: str, ok: bool, detail: str) -> None:
        self.checks[name] = {"ok": ok, "detail": detail}

    @property
    def verdict(self) -> Verdict:
        return "VALID" if all(c["ok"] for c in self.checks.values()) else "INVALID"

    @property
    def reasons(self) -> list[str]:
        return [f"{name}: {c['detail']}" for name, c in self.checks.items() if not c["ok"]]

    def to_dict(self) -> dict[str, Any]:
        return {"verdict": self.verdict, "reasons": self.reasons, "checks": self.checks}


def with_check(validity: dict[str, Any], name: str, ok: bool, detail: str) -> dict[str, Any]:
    """A validity document (to_dict's form) with one check added or replaced, and its verdict
    and reasons recomputed by the same rule as `Validity`."""
    v = Validity(checks={k: dict(c) for k, c in (validity.get("checks") or {}).items()})
    v.add(name, ok, detail)
    return {**validity, **v.to_dict()}


def ttft_trend(points: Sequence[tuple[float, float]]) -> dict[str, float] | None:
    """Least-squares fit of TTFT (s) against request start time (s): slope, the rise it
    predicts over the window, and the mean. None with fewer than MIN_TREND_POINTS."""
    if len(points) < MIN_TREND_POINTS:
        return None
    xs = [p[0] for p in points]
    ys = [p[1] for p in points]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx <= 0:
        return None
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx
    span = max(xs) - min(xs)
    return {
        "slope_s_per_s": slope,
        "rise_ms": slope * span * 1000.0,
        "mean_ms": my * 1000.0,
        "points": float(len(points)),
        "span_s": span,
    }


def sent_rates(pairs: Sequence[tuple[float, float]]) -> tuple[float, float] | None:
    """(sent, scheduled) requests per second of (due time, send time) pairs: n - 1 over the
    span of the send times, and over the span of the due times."""
    if len(pairs) < 2:
        return None
    due = [p[0] for p in pairs]
    sent = [p[1] for p in pairs]
    due_span, sent_span = max(due) - min(due), max(sent) - min(sent)
    if due_span <= 0 or sent_span <= 0:
        return None
    return (len(pairs) - 1) / sent_span, (len(pairs) - 1) / due_span


def delay_limit_ms(rate: float) -> float:
    """The p99 schedule delay a client may have at `rate` req/s and still be judged on time."""
    return max(DELAY_FLOOR_MS, min(DELAY_LIMIT_MS, DELAY_GAPS * 1000.0 / rate))


def _rate(doc: BenchDocument, validity: Validity, sent: tuple[float, float] | None) -> None:
    schedule = doc.schedule
    target = finite(schedule.target_rate) if schedule else None
    asked = finite(doc.config.request_rate)  # "inf" is not a number
    if target is None and asked is None:
        validity.add(
            "rate", True, "no target rate (requests sent as fast as the concurrency allows)"
        )
        return
    p99 = finite(schedule.schedule_delay_p99_ms) if schedule else None
    rate = target if target is not None else asked
    if schedule and p99 is not None and rate is not None and rate > 0:
        limit = delay_limit_ms(rate)
        worst = finite(schedule.schedule_delay_max_ms)
        achieved = finite(schedule.achieved_rate)
        facts = (
            f"schedule delay p99 {p99:.2f} ms"
            + (f", max {worst:.2f} ms" if worst is not None else "")
            + f" (at most {limit:g} ms allowed at {rate:g} req/s)"
            + (f"; achieved {achieved:.2f} req/s" if achieved is not None else "")
        )
        ok = p99 <= limit
        validity.add("rate", ok, facts if ok else "the client sent requests late: " + facts)
        return
    achieved = finite(schedule.achieved_rate) if schedule else None
    goal = target if target is not None else asked
    how = ""
    if achieved is None and sent is not None:
        achieved, goal = sent
        how = f" (sent; its schedule asked {goal:.2f} for target {target or asked:g})"
    if achieved is None:
        validity.add("rate", True, f"target {target or asked:g} req/s; achieved rate not measured")
        return
    assert goal is not None
    ok = achieved >= RATE_FLOOR * goal
    validity.add(
        "rate",
        ok,
        f"achieved {achieved:.2f} req/s of the {goal:.2f} asked{how} "
        f"({achieved / goal:.0%}; at least {RATE_FLOOR:.0%} needed)",
    )


def _client(doc: BenchDocument, validity: Validity) -> None:
    client = doc.client
    if client is None:
        validity.add("client", True, "client headroom not measured")
        return
    bound = client.client_bound
    reasons = list(client.reasons)
    cpu, lag = finite(client.cpu_percent), finite(client.loop_lag_p99_ms)
    facts = ", ".join(
        x
        for x in (
            f"client CPU {cpu:.0f}%" if cpu is not None else "",
            f"loop lag p99 {lag:.1f} ms" if lag is not None else "",
        )
        if x
    )
    detail = "; ".join(reasons) if bound and reasons else facts or "client not saturated"
    if bound and client.fix:
        detail += f"; fix: {client.fix}"
    validity.add("client", not bound, ("client-bound: " + detail) if bound else detail)


def _saturation(trend: dict[str, float] | None, validity: Validity) -> None:
    if trend is None:
        validity.add(
            "saturation", True, f"not judged: fewer than {MIN_TREND_POINTS} successful requests"
        )
        return
    slope, rise, mean = trend["slope_s_per_s"], trend["rise_ms"], trend["mean_ms"]
    growing = slope > SATURATION_SLOPE and rise > SATURATION_RISE * mean
    text = (
        f"TTFT slope {slope * 1000:.1f} ms per s of run, a rise of {rise:.0f} ms over "
        f"{trend['span_s']:.1f} s against a mean of {mean:.0f} ms"
    )
    if growing:
        text = "TTFT grows without bound (the server's queue grows): " + text
    validity.add("saturation", not growing, text)


def judge_validity(
    doc: BenchDocument | dict[str, Any],
    trend: dict[str, float] | None,
    *,
    min_requests: int,
    min_window_s: float,
    sent: tuple[float, float] | None = None,
) -> Validity:
    """The verdict on a bench's metrics.json document (read-only; a dict is read as a
    BenchDocument, ConfigError when it does not fit)."""
    from proctor.jobs.documents import bench_document

    d = bench_document(doc)
    v = Validity()
    message = str((d.verdict.message if d.verdict else None) or "no error verdict")
    completed, failed = d.metrics.get("completed"), d.metrics.get("failed")
    if not (completed or 0) > 0:
        v.add(
            "errors", False, "no measured request succeeded: nothing was measured (" + message + ")"
        )
    else:
        v.add("errors", bool(d.verdict and d.verdict.ok), message)
    n_warm = int(finite(d.warmup.count) or 0) if d.warmup else 0
    warm_ok = n_warm - (int(finite(d.warmup.failed) or 0) if d.warmup else 0)
    if n_warm and warm_ok <= 0:
        v.add(
            "warmup",
            False,
            f"every one of the {n_warm} warm-up requests failed: nothing was warmed up",
        )
    else:
        v.add(
            "warmup",
            n_warm > 0,
            f"{n_warm} warm-up requests ({warm_ok} succeeded), left out of the metrics"
            if n_warm
            else "no warm-up request: cold caches and first compilations are "
            "measured (--num-warmups)",
        )
    measured = int((completed or 0) + (failed or 0))
    v.add(
        "requests",
        measured >= min_requests,
        f"{measured} measured requests (at least {min_requests} needed, --min-requests)",
    )
    _window(d, v, min_window_s)
    _rate(d, v, sent)
    _client(d, v)
    _server(d, v)
    _conformance(d, v)
    _saturation(trend, v)
    return v


def _conformance(doc: BenchDocument, v: Validity) -> None:
    section = doc.conformance
    if section is None:
        v.add("conformance", True, "not measured (an older document)")
        return
    said: list[str] = []
    bad: list[str] = []
    output = section.output
    if output.judged:
        short, long, n = (int(finite(x) or 0) for x in (output.short, output.long, output.checked))
        if short or long:
            bad.append(
                f"with ignore-eos, {short} of {n} requests produced fewer output tokens "
                f"than asked and {long} more: the server ran another workload"
            )
        else:
            said.append(f"all {n} output lengths as asked")
    else:
        said.append(f"output lengths not judged ({_reason(output)})")
    inp = section.input
    if inp.judged:
        off, n = int(finite(inp.off) or 0), int(finite(inp.checked) or 0)
        if off:
            bad.append(
                f"the server counted another prompt length than planned for {off} of "
                f"{n} requests (beyond the tolerance)"
            )
        else:
            said.append(f"all {n} prompt lengths as planned")
    else:
        said.append(f"prompt lengths not judged ({_reason(inp)})")
    v.add("conformance", not bad, "; ".join(bad or said))


def _reason(check: ConformanceCheck) -> str:
    return "no data" if "reason" not in check.model_fields_set else str(check.reason)


def _window(doc: BenchDocument, v: Validity, min_window_s: float) -> None:
    """Each repeat is its own measurement, so each must have the window: the shortest counts,
    never their sum."""
    per = doc.repeats.per_repeat if doc.repeats else []
    spans = [m.get("duration") or 0.0 for m in per]
    if spans:
        window = min(spans)
        what = f"shortest measured window of {len(spans)} repeats {window:.1f} s"
    else:
        window = doc.metrics.get("duration") or 0.0
        what = f"measured window {window:.1f} s"
    v.add(
        "window",
        window >= min_window_s,
        f"{what} (at least {min_window_s:g} s needed, --min-window)",
    )


def _server(doc: BenchDocument, v: Validity) -> None:
    reconciled = doc.server.reconcile if doc.server else None
    tokens = reconciled.tokens if reconciled else None
    if tokens is None:
        v.add("server", True, "server token count not measured (no /metrics)")
        return
    said = (
        f"the server generated {tokens.server:.0f} tokens in the measured window, the "
        f"client received {tokens.client:.0f} (allowed difference {tokens.allowed:.0f})"
    )
    if tokens.ok:
        v.add("server", True, said)
    elif tokens.server > tokens.client:
        v.add(
            "server",
            False,
            said + ": another client loaded the server during the bench, or the server over-counts",
        )
    else:
        v.add("server", False, said + ": the server or the client miscounts")


def format_validity(validity: ValiditySection | dict[str, Any]) -> list[str]:
    """Lines printed with the summary."""
    from proctor.jobs.documents import ValiditySection

    v = (
        validity
        if isinstance(validity, ValiditySection)
        else ValiditySection.model_validate(validity)
    )
    if v.verdict == "VALID":
        return ["Validity: VALID (" + ", ".join(v.checks) + " checked)"]
    return ["Validity: INVALID"] + [f"  - {r}" for r in v.reasons]

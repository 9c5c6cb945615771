"""Lines printed under the summary block for datasets and repeats (outside vLLM's block, so
tools that grep its labels are not disturbed)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from proctor.workloads.loadgen import repeats
from proctor.workloads.loadgen.steady import steady_state

if TYPE_CHECKING:
    from proctor.workloads.loadgen.runner import BenchResult


def _pct(x: object) -> str:
    return f"{x:.1%}" if isinstance(x, (int, float)) else "unknown"


def extra_lines(res: BenchResult) -> list[str]:
    out: list[str] = []
    info = res.dataset
    if info.get("kind") not in (None, "random"):
        where = f" {info['path']}" if info.get("path") else ""
        out.append(f"Dataset: {info['kind']}{where}")
    if info.get("kind") == "trace":
        from proctor.workloads.loadgen.trace_workload import trace_note

        out.append(trace_note(info))
    prefix = res.prefix_cache or {}
    if info.get("kind") == "shared-prefix" or info.get("expected_hit_rate") is not None:
        out.append(
            f"Prefix cache hit rate: expected {_pct(info.get('expected_hit_rate'))}, "
            f"achieved {_pct(prefix.get('hit_rate'))} (server /metrics)"
            + (f"; {prefix['reason']}" if prefix.get("reason") else "")
        )
    elif prefix.get("hit_rate") is not None:
        out.append(f"Prefix cache hit rate: {_pct(prefix['hit_rate'])} (server /metrics)")
    if res.per_repeat:
        stats = repeats.summarize([m.flat() for m in res.per_repeat])
        out.append(repeats.format_repeats(stats, len(res.per_repeat)))
    line = steady_line(steady_state(res.measured, res.config.percentiles, 1))
    if line and not res.per_repeat:
        out.append(line)
    return out


def steady_line(w: dict[str, object]) -> str | None:
    """One line for the plateau (metrics.json "steady_state"), or None when there is none."""
    if not w.get("found") or not isinstance(w.get("output_throughput"), float):
        return None
    line = (
        f"Steady state: {w['duration_s']:.1f} s ({_pct(w['fraction_of_run'])} of the run) "
        f"at >= {w['threshold_in_flight']} of {w['peak_in_flight']} in flight: "
        f"output {w['output_throughput']:.1f} tok/s"
    )
    if isinstance(w.get("median_ttft_ms"), float):
        line += f", TTFT p50 {w['median_ttft_ms']:.2f} ms"
    return line

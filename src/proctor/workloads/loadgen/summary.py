"""The printed `Serving Benchmark Result` block, with vLLM's labels and column layout.

Tools that grep vLLM/ATOM benchmark logs (and proctor's own parser) read this block; keep
labels identical to vLLM's. The client-queue-time section is proctor's addition.
"""

from __future__ import annotations

from proctor.workloads.loadgen.metrics import BenchMetrics

_SECTIONS = (
    ("ttft", "TTFT", "Time to First Token"),
    ("tpot", "TPOT", "Time per Output Token (excl. 1st token)"),
    ("itl", "ITL", "Inter-token Latency"),
    ("e2el", "E2EL", "End-to-end Latency"),
)


def _p_word(key: str) -> str:
    p = float(key)
    return str(int(p)) if int(p) == p else str(p)


def _line(label: str, value: float | int) -> str:
    if isinstance(value, int):
        return f"{label:<40} {value:<10}"
    return f"{label:<40} {value:<10.2f}"


def format_summary(m: BenchMetrics) -> str:
    out = ["{s:{c}^{n}}".format(s=" Serving Benchmark Result ", n=50, c="=")]
    out.append(_line("Successful requests:", m.completed))
    out.append(_line("Failed requests:", m.failed))
    if m.max_concurrency is not None:
        out.append(_line("Maximum request concurrency:", m.max_concurrency))
    if m.request_rate is not None:
        out.append(_line("Request rate configured (RPS):", float(m.request_rate)))
    out.append(_line("Benchmark duration (s):", m.duration_s))
    out.append(_line("Total input tokens:", m.total_input_tokens))
    out.append(_line("Total generated tokens:", m.total_output_tokens))
    out.append(_line("Request throughput (req/s):", m.request_throughput))
    if m.request_goodput is not None:
        out.append(_line("Request goodput (req/s):", m.request_goodput))
    out.append(_line("Output token throughput (tok/s):", m.output_throughput))
    out.append(_line("Peak output token throughput (tok/s):", m.max_output_tokens_per_s))
    # The exact peak, not vLLM's one-second bucket count (which counts every request touching
    # a second, 47 under a limit of 8): the label promises requests in flight at once.
    out.append(_line("Peak concurrent requests:", float(m.peak_concurrency)))
    out.append(_line("Total token throughput (tok/s):", m.total_token_throughput))
    for kind, short, header in _SECTIONS:
        stat = m.stats_ms.get(kind)
        if stat is None:
            continue
        out.append("{s:{c}^{n}}".format(s=header, n=50, c="-"))
        out.append(_line(f"Mean {short} (ms):", stat.mean))
        out.append(_line(f"Median {short} (ms):", stat.median))
        for key, value in stat.percentiles.items():
            out.append(_line(f"P{_p_word(key)} {short} (ms):", value))
    queue = m.stats_ms.get("queue")
    if queue is not None:
        out.append("{s:{c}^{n}}".format(s="Client Queue Time", n=50, c="-"))
        out.append(_line("Mean queue time (ms):", queue.mean))
        out.append(_line("Median queue time (ms):", queue.median))
        for key, value in queue.percentiles.items():
            out.append(_line(f"P{_p_word(key)} queue time (ms):", value))
    out.append("=" * 50)
    return "\n".join(out)

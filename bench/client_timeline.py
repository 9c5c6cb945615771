"""The client's own timeline, as the benches print it: per client process and per bin of
metrics.json "client".timeline (0.5 s), its CPU %, longest event-loop lag and involuntary
context switches (the kernel gave its core to something else), optionally beside the
schedule delays of the requests that process was due to send in that bin. Where a worker's
tail comes from: a bin at ~100 % CPU (out of core), a long lag with few switches (its own
work in a lump), or switches with a lag (something else took its core)."""

from __future__ import annotations

from bisect import bisect_left

from proctor.workloads.loadgen.metrics import percentile


def spare_core(used: list[int], cores: list[int]) -> int | None:
    """A core of `cores` that is not in `used` (for the parent of pinned workers)."""
    return next((c for c in reversed(cores) if c not in used), None)


def timeline_lines(doc: dict, recs: list[dict] | None = None, late_ms: float = 1.0) -> list[str]:
    """One line per client process: each bin as cpu%/lag ms/switches, and with `recs` (the
    measured records), the schedule delay p99 / count > late_ms of that process's sends due
    in the bin."""
    tl = (doc.get("client") or {}).get("timeline") or {}
    per = tl.get("per_process") or []
    if not per:
        return ["  (no client timeline in metrics.json)"]
    bin_s, origin = tl["bin_s"], tl["origin_perf_counter_s"]
    cores = (doc.get("client") or {}).get("cores") or [[] for _ in per]
    out = [
        f"  per {bin_s:g} s bin: cpu% / loop lag max ms / involuntary switches"
        + (f" | send delay p99 ms / sends > {late_ms:g} ms" if recs is not None else "")
    ]
    for w, rows in enumerate(per):
        mine = sorted(
            (x["queued_at"] - origin, max(0.0, x["start_time"] - x["queued_at"]) * 1e3)
            for x in recs or []
            if x["worker"] == w and x["start_time"] > 0
        )
        due = [t for t, _ in mine]
        cells = []
        for k, (t, cpu, lag, sw) in enumerate(rows):
            cell = f"{cpu:.0f}/{lag:.1f}/{sw}"
            if recs is not None:  # the sends due from this row's start to the next row's
                end = rows[k + 1][0] if k + 1 < len(rows) else float("inf")
                d = [x for _, x in mine[bisect_left(due, t) : bisect_left(due, end)]]
                cell += f"|{percentile(d, 99):.1f}/{sum(x > late_ms for x in d)}" if d else "|-"
            cells.append(cell)
        where = ",".join(map(str, cores[w])) if w < len(cores) and cores[w] else "?"
        out.append(f"  process {w} (cores {where}): " + " ".join(cells))
    return out

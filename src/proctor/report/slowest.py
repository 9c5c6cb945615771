"""A bench report's slowest requests, each with the server-log lines that name its request id.

Every request carries an x-request-id that proctor chose and recorded (requests.jsonl
`request_id`; workloads/loadgen/request_ids.py). When the bench measured a server run of
proctor's (`--server RUN`), that run's log is searched for the ids of the slowest requests:
vLLM logs them with `--enable-log-requests` ("Received request cmpl-ID-0: ..."). One pass
over the log, at most MAX_LOG_BYTES of it, at most LINES_PER_ID lines kept per id.
"""

from __future__ import annotations

import heapq
import html
import json
import re
from pathlib import Path
from typing import Any

from proctor.record.rundir import RunDir

SLOWEST = 5
LINES_PER_ID = 2
MAX_LOG_BYTES = 512 << 20
LINE_CHARS = 240


def slowest_requests(path: Path, n: int = SLOWEST) -> list[dict[str, Any]]:
    """The n measured requests that were in flight longest (end minus start), slowest first."""
    recs: list[dict[str, Any]] = []
    try:
        with path.open(encoding="utf-8", errors="replace") as f:
            for line in f:
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue
                if isinstance(rec, dict) and not rec.get("warmup") and rec.get("request_id"):
                    recs.append(rec)
    except OSError:
        return []

    def flight(r: dict[str, Any]) -> float:
        try:
            return float(r.get("end_time", 0)) - float(r.get("start_time", 0))
        except (TypeError, ValueError):
            return 0.0

    return heapq.nlargest(n, recs, key=flight)


def log_lines(log: Path, ids: list[str]) -> dict[str, list[tuple[int, str]]]:
    """(line number, text) of the lines naming each id; an id followed by a digit is another
    id (…-1 is not …-10)."""
    found: dict[str, list[tuple[int, str]]] = {i: [] for i in ids}
    if not ids:
        return found
    pattern = re.compile(r"(?<![A-Za-z0-9._])(" + "|".join(map(re.escape, ids)) + r")(?![0-9])")
    read = 0
    try:
        with log.open(encoding="utf-8", errors="replace") as f:
            for number, line in enumerate(f, 1):
                read += len(line)
                if read > MAX_LOG_BYTES:
                    break
                for m in pattern.finditer(line):
                    kept = found[m.group(1)]
                    if len(kept) < LINES_PER_ID and (not kept or kept[-1][0] != number):
                        kept.append((number, line.rstrip()[:LINE_CHARS]))
    except OSError:
        pass
    return found


def server_log(run_path: Path, record: dict[str, Any]) -> Path | None:
    """The log of the server run this bench measured, when it is beside the bench's run."""
    sid = record.get("server_run")
    if not isinstance(sid, str) or not sid or "/" in sid:
        return None
    server = run_path.parent / sid
    if not server.is_dir():
        return None
    log = RunDir(server).log_path()
    return log if log.is_file() else None


def slowest_block(run_path: Path, record: dict[str, Any]) -> str:
    """The report's "Slowest requests" section; "" when requests.jsonl has no request ids."""
    slow = slowest_requests(run_path / "requests.jsonl")
    if not slow:
        return ""
    log = server_log(run_path, record)
    ids = [str(r["request_id"]) for r in slow]
    lines = log_lines(log, ids) if log else {}
    rows = []
    for r in slow:
        rid = str(r["request_id"])
        e2e = (float(r.get("end_time", 0)) - float(r.get("start_time", 0))) * 1000
        ttft = float(r.get("ttft") or 0) * 1000
        outcome = "ok" if r.get("success") else str(r.get("reason") or "failed")
        named = (
            "<br>".join(f"{n}: <code>{html.escape(t)}</code>" for n, t in lines.get(rid, []))
            or "&mdash;"
        )
        rows.append(
            f"<tr><td><code>{html.escape(rid)}</code></td><td>{e2e:,.1f}</td>"
            f"<td>{ttft:,.1f}</td><td>{html.escape(outcome)}</td><td>{named}</td></tr>"
        )
    if log is None:
        note = (
            "no server run of proctor's recorded for this bench: search the server's log for "
            "these ids (the x-request-id header)"
        )
    elif not any(lines.values()):
        note = (
            f"the server's log ({html.escape(log.name)}) names none of these ids: vLLM logs "
            "them with --enable-log-requests"
        )
    else:
        note = f"lines of the server's log ({html.escape(log.name)}) that name each id"
    return (
        "<h2>Slowest requests</h2>"
        f'<p class="note">The {len(slow)} measured requests longest in flight, by the '
        f"x-request-id each carried; {note}.</p>"
        "<table><thead><tr><th>request id</th><th>in flight ms</th><th>TTFT ms</th>"
        "<th>outcome</th><th>server log</th></tr></thead><tbody>"
        + "".join(rows)
        + "</tbody></table>"
    )

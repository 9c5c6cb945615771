"""Detection latency: event -> proctor's decision, next to ATOM's poll-bound scripts.

Events (each measured REPEAT times against a real child process):
  fault      a fault line is written to the server log while drain runs (poll 10 s)
  death      the server process exits without a pattern while drain runs (poll 10 s)
  ready      the server starts answering /v1/models while the ready gate runs (poll 30 s)

Anchors: ATOM's wait_infer_drain.sh decides once per POLL (10 s: mean 5 s, worst 10 s) and
never decides "died" (a silent death looks drained); wait_server_ready.sh polls every 30 s
(mean 15 s, worst 30 s). Event times are drawn at random so they do not phase-lock with
proctor's 0.1 s tick.
Run: .venv/bin/python bench/detect_latency.py [--repeat N]
"""

from __future__ import annotations

import argparse
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from proctor.monitors.drain import DrainConfig, drain
from proctor.monitors.ready import wait_ready
from proctor.monitors.watch import PopenWatch

# Child: after DELAY seconds do ACTION and print the wall time it did it at (last line).
CHILD = textwrap.dedent(
    """
    import http.server, os, sys, time
    action, delay, port = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
    print("starting", flush=True)
    time.sleep(delay)
    if action == "fault":
        print(f"EVENT {time.time()!r} Memory access fault by GPU node-1", flush=True)
        time.sleep(60)
    elif action == "death":
        with open(sys.argv[4], "w") as fh:
            fh.write(repr(time.time()))
        os._exit(1)
    else:
        class H(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                self.send_response(200); self.end_headers(); self.wfile.write(b"{}")
            def log_message(self, *a): pass
        srv = http.server.HTTPServer(("127.0.0.1", port), H)
        with open(sys.argv[4], "w") as fh:
            fh.write(repr(time.time()))
        srv.serve_forever()
    """
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def one(action: str, tmp: Path) -> float:
    log = tmp / f"{action}.log"
    stamp = tmp / f"{action}.t"
    stamp.unlink(missing_ok=True)
    port = free_port()
    with log.open("wb") as fh:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-c",
                CHILD,
                action,
                f"{random.uniform(1.0, 1.5):.3f}",
                str(port),
                str(stamp),
            ],
            stdout=fh,
            stderr=subprocess.STDOUT,
        )
    try:
        if action == "ready":
            wait_ready(
                f"http://127.0.0.1:{port}",
                process=PopenWatch(proc),
                logs=[log],
                timeout_s=30,
                poll_s=30,
            )
        else:
            drain(
                DrainConfig(max_s=30, poll_s=10, stuck_polls=6, startup_max_s=30),
                server=PopenWatch(proc),
                server_log=log,
                fault_patterns=["Memory access fault by GPU"],
            )
        decided = time.time()
    finally:
        proc.kill()
        proc.wait()
    if action == "fault":
        line = next(x for x in log.read_text().splitlines() if x.startswith("EVENT"))
        event = float(line.split()[1])
    else:
        event = float(stamp.read_text())
    return decided - event


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    anchors = {"fault": (5.0, 10.0), "death": (None, None), "ready": (15.0, 30.0)}
    print(
        f"{'event':<7} {'proctor mean':>13} {'max':>7}   {'ATOM mean':>10} {'worst':>7}"
        "   ratio (ATOM mean / proctor mean)"
    )
    with tempfile.TemporaryDirectory() as d:
        for action in ("fault", "death", "ready"):
            xs = [one(action, Path(d)) for _ in range(args.repeat)]
            mean, worst = anchors[action]
            m = statistics.mean(xs)
            if mean is None:
                atom = "   never (looks drained: exit 0)"
            else:
                atom = f"{mean:>9.1f}s {worst:>6.1f}s   {mean / m:8.0f}x"
            print(f"{action:<7} {m * 1000:>11.0f}ms {max(xs) * 1000:>5.0f}ms   {atom}")


if __name__ == "__main__":
    main()

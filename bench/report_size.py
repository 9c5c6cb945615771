"""Report of a 5,000-request benchmark: generation time, file size, Chromium render time.

    .venv/bin/python bench/report_size.py [--requests 5000]

Makes a real run (`proctor run` of the load generator against the fake OpenAI server, with
--save-detailed and a stand-in nvidia-smi for gpu.csv), then times `build_report` + write,
and opens the file in headless Chromium. Anchors, printed as ratios: the size of plotly.min.js
(the floor of a self-contained file) and Chromium's time for a page that is plotly.js alone.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.report import runs

from proctor.report import build_report, check_page, write_report
from proctor.report.page import plotly_js, render_page


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=5000)
    ap.add_argument("--concurrency", type=int, default=64)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        env = runs.make_env(Path(tmp))
        with runs.fake_server("--ttft", "0.005", "--itl", "0.001") as url:
            t0 = time.perf_counter()
            rid = runs.bench_run(env, url, "bench-big", a.concurrency, a.requests)
            print(f"bench run of {a.requests} requests: {time.perf_counter() - t0:.1f} s")
        t0 = time.perf_counter()
        report = build_report(env.runs_dir, [rid])
        built = time.perf_counter() - t0
        out = write_report(report, Path(tmp) / "big.html")
        total = time.perf_counter() - t0
        size = out.stat().st_size
        floor = len(plotly_js().encode())
        points = sum(f.points for f in report.figures)
        empty = write_report(
            type(report)("run", "x", render_page("x", [], []), [], [], "x"),
            Path(tmp) / "empty.html",
        )
        anchor = check_page(empty)
        check = check_page(out)
        assert check.ok, (check.console_errors, check.network_requests)
        print(
            f"report: built {built:.2f} s, built+written {total:.2f} s, "
            f"{len(report.figures)} figures, {points} points"
        )
        print(
            f"size: {size / 1e6:.2f} MB = {size / floor:.3f} x plotly.min.js "
            f"({floor / 1e6:.2f} MB); data and page {(size - floor) / 1e3:.0f} kB"
        )
        print(
            f"chromium: load {check.load_s:.2f} s, all plots drawn {check.render_s:.2f} s; "
            f"plotly.js-only page {anchor.render_s:.2f} s "
            f"(ratio {check.render_s / anchor.render_s:.2f})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Report of a 5,000-request benchmark: generation time, file size, Chromium render time.

    .venv/bin/python bench/report_size.py [--requests 5000]

Makes a real run (`proctor run` of the load generator against the fake OpenAI server, with
--save-detailed and a stand-in nvidia-smi for gpu.csv), then times `build_report` + write,
writes the page both ways (the default, plotly.js in assets/ beside it; and
--self-contained, plotly.js inline, which is what every report was before) and opens each in
headless Chromium. Anchors, printed as ratios: the size of plotly.min.js (the floor of a
self-contained file) and Chromium's time for a page that is plotly.js alone.

Measured 2026-12-06 (2-core machine loaded by other work; 5,000 requests, 6 figures, 6,263
points; docs/report.md has the table):
  self-contained (before; --self-contained now)  4.94 MB = 1.027 x plotly.min.js (4.82 MB)
  linked (now, the default)                       0.129 MB = 0.026 x, plus plotly.min.js once
                                                  in assets/ for every report of a directory
  Chromium to all plots drawn: linked 5.48 s, self-contained 7.04 s, plotly.js alone 5.36 s
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
        one = write_report(report, Path(tmp) / "one" / "big.html", self_contained=True)
        size, whole = out.stat().st_size, one.stat().st_size
        floor = len(plotly_js().encode())
        points = sum(f.points for f in report.figures)
        empty = write_report(
            type(report)("run", "x", render_page("x", [], []), [], [], "x"),
            Path(tmp) / "empty" / "empty.html",
            self_contained=True,
        )
        anchor = check_page(empty)
        check = check_page(out)
        check_one = check_page(one)
        for c in (check, check_one):
            assert c.ok, (c.console_errors, c.network_requests)
            assert all(p.svg > 0 for p in c.plots), c.plots
        print(
            f"report: built {built:.2f} s, built+written {total:.2f} s, "
            f"{len(report.figures)} figures, {points} points"
        )
        print(
            f"self-contained (--self-contained; every report before): {whole / 1e6:.2f} MB = "
            f"{whole / floor:.3f} x plotly.min.js ({floor / 1e6:.2f} MB)"
        )
        print(
            f"linked (the default): {size / 1e6:.3f} MB = {size / whole:.4f} x self-contained,"
            f" plus plotly.min.js once in assets/ for every report of the directory"
        )
        print(
            f"chromium: linked: load {check.load_s:.2f} s, all plots drawn {check.render_s:.2f} s;"
            f" self-contained: {check_one.render_s:.2f} s; plotly.js-only page"
            f" {anchor.render_s:.2f} s (ratio {check.render_s / anchor.render_s:.2f})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Reports of real runs opened in real headless Chromium: every plot drew its data, the page
asked the network for nothing, logged no console error; a screenshot is kept."""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from proctor.report import BrowserCheck, check_page
from proctor.report.page import plotly_asset_name, plotly_min_js
from tests.report import runs
from tests.report.conftest import keep

pytestmark = [pytest.mark.browser, pytest.mark.timeout(600)]


def report(env: runs.Env, out: Path, *args: str) -> dict[str, Any]:
    r = runs.proctor(env, "report", *args, "-o", str(out), "--json")
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    info: dict[str, Any] = json.loads(r.stdout)
    assert Path(info["path"]) == out.resolve() and out.stat().st_size == info["bytes"]
    return info


def assert_clean(check: BrowserCheck, info: dict[str, Any], figures: set[str]) -> None:
    assert check.rendered == str(len(info["figures"])), check
    assert check.network_requests == [], check.network_requests
    assert check.console_errors == [], check.console_errors
    assert check.layout_problems == [], check.layout_problems
    drawn = {p.id: p for p in check.plots}
    assert figures <= set(drawn), (figures, set(drawn))
    for fig in info["figures"]:
        plot = drawn[fig["id"]]
        # Every point the report put in the figure is in the drawn plot, and the SVG has marks.
        assert plot.points == fig["points"] == plot.expected_points > 0, plot
        assert plot.drew_data and plot.svg > 0, plot
    assert check.screenshot is not None and check.screenshot.stat().st_size > 20_000
    assert check.screenshot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bench_run_report(
    report_env: runs.Env, served: dict[str, str], chromium: str, tmp_path: Path, artifacts: Path
) -> None:
    out = tmp_path / "bench.html"
    info = report(report_env, out, served["bench"])
    assert info["kind"] == "run" and info["runs"] == [served["bench"]]
    check = check_page(out, screenshot=tmp_path / "bench.png", chromium=chromium)
    keep(tmp_path / "bench.png", artifacts)
    assert_clean(
        check, info, {"gpu-memory", "latency-ttft", "latency-tpot", "latency-itl", "latency-e2el"}
    )
    html = out.read_text()
    # plotly.js is the file beside the page, loaded from there and from nowhere else.
    asset = f"assets/{plotly_asset_name()}"
    assert html.count("<script src") == 1 and f'<script src="{asset}">' in html
    assert (out.parent / asset).read_text() == plotly_min_js()
    assert check.requests == [out.resolve().as_uri(), (out.parent / asset).resolve().as_uri()]
    assert "://" not in html.split("<body")[0] and len(html) < 500_000
    for check_name in ("result known", "logs verified", "machine state verified"):
        assert re.search(rf'class="mark ok">.</span><b>{check_name}</b>', html), check_name
    # The phases are marked on the GPU timeline.
    fig = _figure(html, "gpu-memory")
    labels = {a["text"] for a in fig["layout"]["annotations"]}
    assert {"start", "workload", "workload end", "end"} <= labels
    # The stand-in GPU went to 9000 MiB during the benchmark and back to 512 MiB.
    ys = fig["data"][0]["y"]
    assert max(ys) == runs.BUSY_MIB and ys[-1] == runs.BASE_MIB


def test_sweep_report(
    report_env: runs.Env, served: dict[str, str], chromium: str, tmp_path: Path, artifacts: Path
) -> None:
    out = tmp_path / "sweep.html"
    info = report(report_env, out, "sweep-a")
    assert info["kind"] == "sweep"
    assert info["runs"] == [served["sweep0"], served["sweep1"], served["sweep2"]]
    check = check_page(out, screenshot=tmp_path / "sweep.png", chromium=chromium)
    keep(tmp_path / "sweep.png", artifacts)
    assert_clean(check, info, {"sweep-throughput", "sweep-latency", "gpu-memory-0"})
    tput = _figure(out.read_text(), "sweep-throughput")
    assert tput["data"][0]["x"] == [1, 2, 4]


def test_gsm8k_eval_report(
    report_env: runs.Env, gsm8k_id: str, chromium: str, tmp_path: Path, artifacts: Path
) -> None:
    baseline = tmp_path / "models_accuracy.json"
    baseline.write_text(
        json.dumps([{"model_name": "m1", "accuracy_threshold": 0.7, "accuracy_baseline": 0.75}])
    )
    out = tmp_path / "gsm8k.html"
    info = report(report_env, out, gsm8k_id, "--baseline", str(baseline))
    check = check_page(out, screenshot=tmp_path / "gsm8k.png", chromium=chromium)
    keep(tmp_path / "gsm8k.png", artifacts)
    assert_clean(check, info, {"gpu-memory", "eval-scores"})
    fig = _figure(out.read_text(), "eval-scores")
    flexible, strict = fig["data"]
    # Answer key pattern over the first 5 test questions: 4 right for flexible, 2 for strict.
    assert flexible["y"] == [pytest.approx(0.8)] and strict["y"] == [pytest.approx(0.4)]
    assert flexible["error_y"]["array"][0] > 0
    assert [s["y0"] for s in fig["layout"]["shapes"]] == [0.7, 0.75]


def test_comparison_report_marks_regressions(
    report_env: runs.Env, served: dict[str, str], chromium: str, tmp_path: Path, artifacts: Path
) -> None:
    out = tmp_path / "compare.html"
    info = report(report_env, out, "--compare", served["bench"], served["slow"])
    assert info["kind"] == "compare"
    check = check_page(out, screenshot=tmp_path / "compare.png", chromium=chromium)
    keep(tmp_path / "compare.png", artifacts)
    assert_clean(check, info, {"compare-change-0", "compare-latency-ttft", "gpu-memory-1"})
    html = out.read_text()
    # The slow server's TTFT is 6x: a regression far outside its noise band.
    row = re.search(r"<tr><td>mean_ttft_ms</td>(.*?)</tr>", html)
    assert row and 'class="badge regression">regression<' in row.group(1)
    assert re.search(r"<tr><td>completed</td>.*?>same<", html)
    bars = _figure(html, "compare-change-0")["data"][0]
    assert "mean_ttft_ms" in bars["y"] and "#D55E00" in bars["marker"]["color"]


def test_self_contained_and_moved_pages(
    report_env: runs.Env, served: dict[str, str], chromium: str, tmp_path: Path
) -> None:
    """--self-contained: one file that draws with nothing beside it. A linked page moved
    without its assets folder says where plotly.js should be, instead of blank boxes."""
    one = tmp_path / "one" / "bench.html"
    info = report(report_env, one, served["bench"], "--self-contained")
    assert info["self_contained"] is True and list(one.parent.iterdir()) == [one]
    html = one.read_text()
    assert "<script src" not in html and plotly_min_js()[:2000] in html
    check = check_page(one, chromium=chromium)
    assert check.ok and check.requests == [one.resolve().as_uri()], check
    assert all(p.svg > 0 and p.drew_data for p in check.plots) and check.plots

    linked = tmp_path / "linked" / "bench.html"
    small = report(report_env, linked, served["bench"])
    assert small["self_contained"] is False
    # The linked page is the self-contained one less plotly.js.
    assert info["bytes"] - small["bytes"] > len(plotly_min_js()) * 0.99
    moved = tmp_path / "moved" / "bench.html"
    moved.parent.mkdir()
    moved.write_text(linked.read_text())
    check = check_page(moved, chromium=chromium)
    assert check.rendered == "error" and not check.ok
    assert f"plotly.js did not load from assets/{plotly_asset_name()}" in check.text
    assert "--self-contained" in check.text


def test_the_asset_is_written_once_and_repaired(
    report_env: runs.Env, served: dict[str, str], tmp_path: Path
) -> None:
    """Reports of one directory share one copy; a damaged copy is written again."""
    asset = tmp_path / "assets" / plotly_asset_name()
    report(report_env, tmp_path / "a.html", served["bench"])
    first = asset.stat().st_mtime_ns
    report(report_env, tmp_path / "b.html", served["slow"])
    assert asset.stat().st_mtime_ns == first
    assert sorted(p.name for p in (tmp_path / "assets").iterdir()) == [asset.name]
    asset.write_text("truncated")
    report(report_env, tmp_path / "a.html", served["bench"])
    assert asset.read_text() == plotly_min_js()


def _figure(html: str, fig_id: str) -> dict[str, Any]:
    raw = html.split('<script type="application/json" id="proctor-figures">')[1]
    figures = json.loads(raw.split("</script>")[0])
    return next(f for f in figures if f["id"] == fig_id)


# -- the checker itself can fail ---------------------------------------------------------------
class _Hits:
    def __init__(self) -> None:
        self.paths: list[str] = []


def test_checker_sees_requests_console_errors_and_empty_plots(
    chromium: str, tmp_path: Path
) -> None:
    hits = _Hits()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            hits.paths.append(self.path)
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    page = tmp_path / "bad.html"
    page.write_text(
        "<!DOCTYPE html><html><head><link rel='icon' href='data:,'></head><body>"
        "<div class='plot' id='p' data-points='3'></div>"
        f"<img src='http://127.0.0.1:{port}/pixel.png'>"
        "<script>console.error('boom'); document.body.setAttribute('data-rendered', '1');"
        "</script></body></html>"
    )
    try:
        check = check_page(page, chromium=chromium, timeout_s=60)
    finally:
        server.shutdown()
        server.server_close()
    assert f"http://127.0.0.1:{port}/pixel.png" in check.network_requests
    assert hits.paths == ["/pixel.png"]
    assert any("boom" in e for e in check.console_errors)
    assert [p.drew_data for p in check.plots] == [False]
    assert not check.ok


def test_no_chromium_is_unavailable(tmp_path: Path) -> None:
    code = (
        "import sys; from pathlib import Path; from proctor.report import check_page\n"
        "from proctor.errors import TargetUnavailable\n"
        "try:\n    check_page(Path('x.html'))\nexcept TargetUnavailable as e:\n"
        "    print(e.exit_code, e.one_line()); sys.exit(0)\nsys.exit(1)"
    )
    r = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={"PATH": str(tmp_path)},
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("69 no chromium found on PATH")


def test_check_page_leaves_no_chromium_process_and_no_profile(
    chromium: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Chromium's helpers are stopped with its leader, before its profile folder is removed."""
    import tempfile

    import psutil

    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    page = tmp_path / "p.html"
    page.write_text('<html><body data-rendered="0"><p>hello</p></body></html>')
    for _ in range(3):
        assert check_page(page, chromium=chromium, screenshot=tmp_path / "p.png").rendered == "0"
        assert list(scratch.iterdir()) == []
        left = []
        for proc in psutil.process_iter(["cmdline"]):
            if any(str(scratch) in part for part in proc.info["cmdline"] or ()):
                with contextlib.suppress(psutil.NoSuchProcess):
                    if proc.status() != psutil.STATUS_ZOMBIE:
                        left.append(proc.pid)
        assert left == []


def test_bench_with_repeats_report_opens_clean(chromium: str, tmp_path: Path) -> None:
    """The metrics table with its repeats column renders in Chromium as the other pages do."""
    env = runs.make_env(tmp_path)
    run_id = runs.bench_with_repeats(env, 2)
    out = tmp_path / "repeats.html"
    info = report(env, out, run_id)
    assert "mean ± 95% CI (2 repeats)" in out.read_text(encoding="utf-8")
    check = check_page(out, screenshot=tmp_path / "repeats.png", chromium=chromium)
    assert check.ok, check
    assert check.rendered == str(len(info["figures"]))

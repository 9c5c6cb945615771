"""Every kind of report page, opened in real headless Chromium at 1280 and 1920 px: no block
(heading, table, badge, note, plot, card) drawn over another, no plot text outside its plot,
no empty panel, nothing scrolling sideways. A screenshot of each is kept under pytest's tmp
dir (its path is printed; `-s` shows it)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from proctor.report import check_page
from tests.report import pages
from tests.report.conftest import keep

pytestmark = [pytest.mark.browser, pytest.mark.timeout(900)]

WIDTHS = (1280, 1920)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> pages.Store:
    return pages.make_runs(pages.make_store(tmp_path_factory.mktemp("report-pages")))


@pytest.fixture(scope="module")
def written(store: pages.Store, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("report-html")
    paths = {}
    for kind in pages.KINDS:
        paths[kind] = out / f"{kind}.html"
        pages.write_page(store, kind, paths[kind])
    return paths


@pytest.mark.parametrize("kind", pages.KINDS)
def test_page_reads_without_overlap_or_sideways_scroll(
    kind: str, written: dict[str, Path], chromium: str, tmp_path: Path, artifacts: Path
) -> None:
    for width in WIDTHS:
        shot = tmp_path / f"{kind}-{width}.png"
        check = check_page(written[kind], screenshot=shot, chromium=chromium, width=width)
        keep(shot, artifacts)
        assert check.ok, check
        assert check.inner_width == width, check
        assert check.layout_problems == [], (width, check.layout_problems)


def _row(text: str, first: str) -> list[str]:
    """The cells of the table row (innerText, tab-separated) whose first cell is `first`."""
    for line in text.splitlines():
        cells = line.split("\t")
        if cells[0] == first and len(cells) > 1:
            return cells
    raise AssertionError(f"no row {first!r}")


def test_the_verdict_reads_as_it_is(written: dict[str, Path], chromium: str) -> None:
    """An INVALID bench's header says INVALID and why, in red, not a green "ok"; counts read
    24, a boolean no; a comparison of INVALID runs says so and judges no spread (std_*)."""
    bench = check_page(written["bench"], chromium=chromium)
    outcome = _row(bench.text, "outcome")[1]
    assert outcome.startswith("INVALID exit status 0: requests: 24 measured requests"), outcome
    html = written["bench"].read_text()
    assert '<th>outcome</th><td><span class="badge fail">INVALID</span>' in html
    assert _row(bench.text, "completed")[1:3] == ["24", "requests"]
    assert _row(bench.text, "total_output_tokens")[1].isdigit()
    assert _row(bench.text, "valid")[1:3] == ["no", ""]

    compare = check_page(written["compare"], chromium=chromium)
    for side in ("A", "B"):
        assert f"{side} (" in compare.text and "is INVALID: requests: 24 measured" in compare.text
    assert "regression(s) between runs that are not both valid" in compare.text
    assert _row(compare.text, "completed")[1:3] == ["24", "24"]
    for metric in ("std_ttft_ms", "std_tpot_ms", "std_itl_ms", "std_e2el_ms"):
        assert _row(compare.text, metric)[-1] in (
            "same",
            "better",
            "within_noise",
            "changed",
            "worse (a spread, not judged)",
        ), metric
    # The slower server's TTFT is still a regression, as the table says.
    assert _row(compare.text, "mean_ttft_ms")[-1] == "regression"

    flow = check_page(written["flow"], chromium=chromium)
    workload = _row(flow.text, "1")
    assert workload[1:5] == ["bench-small", "bench", workload[3], "INVALID"], workload


def test_a_headline_card_comes_first(
    written: dict[str, Path], chromium: str, store: pages.Store
) -> None:
    """Under the title, before any table or plot: the verdict and why, output tok/s, TTFT and
    TPOT p50/p99, errors, energy per token, as metrics.json has them."""
    doc = json.loads((store.runs_dir / store.ids["bench"] / "metrics.json").read_text())
    m = doc["metrics"]
    bench = check_page(written["bench"], chromium=chromium)
    lines = bench.text.splitlines()
    assert lines[1].startswith("INVALID") and "24 measured requests" in lines[1], lines[:3]
    card = "\n".join(lines[:20])
    assert card.index("output tok/s") < bench.text.index("outcome\t")
    for value, label in (
        (f"{m['output_throughput']:,.1f}", "output tok/s"),
        (f"{m['median_ttft_ms']:,.2f}", "TTFT p50 (ms)"),
        (f"{m['p99_ttft_ms']:,.2f}", "TTFT p99 (ms)"),
        (f"{m['median_tpot_ms']:,.2f}", "TPOT p50 (ms)"),
        (f"{m['p99_tpot_ms']:,.2f}", "TPOT p99 (ms)"),
        ("0 of 24", "errors (failed requests)"),
        (f"{m['energy_per_output_token_j']:.4f}", "energy (J / output token)"),
    ):
        assert f"{value}\n{label}" in card, (value, label, card)
    # A command run: its outcome, exit status and duration; a flow: one card per workload.
    command = check_page(written["command"], chromium=chromium).text.splitlines()
    assert command[1:3] == ["ok", "0"] and command[3] == "exit status", command[:6]
    flow = check_page(written["flow"], chromium=chromium).text
    assert "the flow\nok" in flow and "1. bench-small (bench)\nINVALID" in flow
    assert flow.index("1. bench-small (bench)") < flow.index("outcome\t")


def test_history_draws_every_bench_with_its_verdict(
    written: dict[str, Path], store: pages.Store, chromium: str
) -> None:
    """A point per bench run, at the value its metrics.json holds, in one trace per verdict
    (VALID and INVALID apart, INVALID a hollow cross), hover naming run id and commit; the
    oracle reads every run directory, not the store."""
    expected: dict[str, tuple[float, str]] = {}
    for run_dir in store.runs_dir.iterdir():
        try:
            doc = json.loads((run_dir / "metrics.json").read_text())
            record = json.loads((run_dir / "record.json").read_text())
        except OSError:
            continue
        if record.get("kind") == "bench" and "output_throughput" in doc.get("metrics", {}):
            verdict = doc["validity"]["verdict"] if record["outcome"] == "ok" else "failed"
            expected[run_dir.name] = (doc["metrics"]["output_throughput"], verdict)
    # Quick benches are INVALID (too few requests); the one held to a bar it meets is VALID
    # on a quiet machine, but a loaded one may fail its client check: either is drawn as is.
    assert "INVALID" in {v for _, v in expected.values()} and len(expected) >= 6, expected
    html = written["history"].read_text()
    figure = json.loads(html.split('id="proctor-figures">')[1].split("</script>")[0])[0]
    drawn: dict[str, tuple[float, str]] = {}
    for trace in figure["data"][1:]:
        for y, custom in zip(trace["y"], trace["customdata"], strict=True):
            drawn[custom[0]] = (y, trace["name"])
            assert custom[3] == trace["name"] and "%{customdata[0]}" in trace["hovertemplate"]
    assert drawn.keys() == expected.keys()
    for run_id, (value, verdict) in expected.items():
        assert drawn[run_id][0] == pytest.approx(value) and drawn[run_id][1] == verdict
    symbols = {t["name"]: t["marker"]["symbol"] for t in figure["data"][1:]}
    # One trace per verdict drawn; a loaded machine may have no VALID bench (see above).
    shapes = {"VALID": "circle", "INVALID": "x-open", "failed": symbols.get("failed")}
    assert set(symbols) == {v for _, v in expected.values()}
    assert all(symbols[name] == shapes[name] for name in symbols), symbols
    check = check_page(written["history"], chromium=chromium)
    assert check.ok and [p.id for p in check.plots] == ["history"], check
    assert check.plots[0].points == 2 * len(expected) and check.plots[0].svg > 0
    assert f"{len(expected)}\nruns" in check.text


def test_history_by_commit_and_bad_input(store: pages.Store, tmp_path: Path) -> None:
    """--x commit puts the runs at their commit; an unknown metric names those there are (64);
    history with a run, or --metric without history, is refused (64) with the form to use."""
    from tests.helpers import proctor

    out = tmp_path / "h.html"
    info = pages.write_page(store, "history", out, "--x", "commit")
    assert info["kind"] == "history" and len(info["runs"]) >= 6  # type: ignore[arg-type]
    html = out.read_text()
    figures = json.loads(html.split('id="proctor-figures">')[1].split("</script>")[0])
    layout = figures[0]["layout"]
    assert layout["xaxis"]["type"] == "category"
    for args, says in (
        (["history", "--metric", "nope"], "no run has metric 'nope'"),
        (["history"], "history needs --metric NAME"),
        (["history", "last", "--metric", "x"], "history takes no run"),
        ([store.ids["bench"], "--metric", "x"], "--metric is an option of the history page"),
        (["history", "--metric", "x", "--x", "sideways"], "invalid --x 'sideways'"),
    ):
        r = proctor("report", *args, env=store.env, cwd=store.work, timeout=60)
        assert r.returncode == 64 and says in r.stderr, (args, r.stderr)
    r = proctor("report", "history", "--metric", "output_thruput", env=store.env, cwd=store.work)
    assert r.returncode == 64 and "did you mean output_throughput" in r.stderr, r.stderr

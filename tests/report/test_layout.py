"""Every kind of report page, opened in real headless Chromium at 1280 and 1920 px: no block
(heading, table, badge, note, plot, card) drawn over another, no plot text outside its plot,
no empty panel, nothing scrolling sideways. A screenshot of each is kept under pytest's tmp
dir (its path is printed; `-s` shows it)."""

from __future__ import annotations

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
def test_page_reads_without_overlap_or_sideways_scroll(kind: str, written: dict[str, Path],
                                                      chromium: str, tmp_path: Path,
                                                      artifacts: Path) -> None:  # fmt: skip
    for width in WIDTHS:
        shot = tmp_path / f"{kind}-{width}.png"
        check = check_page(written[kind], screenshot=shot, chromium=chromium, width=width)
        keep(shot, artifacts)
        assert check.ok, check
        assert check.inner_width == width, check
        assert check.layout_problems == [], (width, check.layout_problems)

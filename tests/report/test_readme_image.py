"""The README's picture of a report (docs/img/report.png), made by this test: a real bench run
against the fake OpenAI server, with the stand-in GPU of the report tests, rendered by
`proctor report` and opened in real headless Chromium at 1280 px; the top of the page is kept.

Pixels differ from one machine to the next (fonts, run ids, times), so the committed picture is
compared by what must not change: a valid PNG of the same size as the one made here, and the
README shows it. `PROCTOR_REFRESH_DOCS_IMG=1` writes the new picture over it."""

from __future__ import annotations

import os
import struct
import zlib
from pathlib import Path

import pytest

from proctor.report import check_page
from tests.helpers import REPO
from tests.report import runs

pytestmark = [pytest.mark.browser, pytest.mark.timeout(600)]

IMAGE = REPO / "docs" / "img" / "report.png"
WIDTH = 1280  # px: the width the layout tests check
TOP = 1140  # px of the page kept: the title, the headline card, the run, the GPU timeline
SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _chunks(png: bytes) -> list[tuple[bytes, bytes]]:
    assert png[:8] == SIGNATURE, "not a PNG"
    chunks, at = [], 8
    while at < len(png):
        (length,) = struct.unpack(">I", png[at : at + 4])
        kind, data = png[at + 4 : at + 8], png[at + 8 : at + 8 + length]
        (crc,) = struct.unpack(">I", png[at + 8 + length : at + 12 + length])
        assert zlib.crc32(kind + data) == crc, f"bad CRC in {kind!r}"
        chunks.append((kind, data))
        at += 12 + length
    assert chunks[0][0] == b"IHDR" and chunks[-1][0] == b"IEND"
    return chunks


def png_size(png: bytes) -> tuple[int, int]:
    width, height = struct.unpack(">II", _chunks(png)[0][1][:8])
    return int(width), int(height)


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def crop_top(png: bytes, rows: int) -> bytes:
    """The first `rows` rows of a non-interlaced 8-bit RGB/RGBA PNG. A row's filter refers only
    to the row above it, so the first rows stand alone: no pixel is decoded."""
    chunks = _chunks(png)
    ihdr = chunks[0][1]
    width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", ihdr)
    assert depth == 8 and colour in (2, 6) and interlace == 0, (depth, colour, interlace)
    stride = 1 + width * (4 if colour == 6 else 3)
    raw = zlib.decompress(b"".join(data for kind, data in chunks if kind == b"IDAT"))
    assert len(raw) == stride * height
    rows = min(rows, height)
    header = struct.pack(">II", width, rows) + ihdr[8:]
    return (
        SIGNATURE
        + _chunk(b"IHDR", header)
        + _chunk(b"IDAT", zlib.compress(raw[: stride * rows], 9))
        + _chunk(b"IEND", b"")
    )


def test_crop_keeps_the_first_rows_exactly(tmp_path: Path) -> None:
    """The oracle for crop_top: a PNG whose rows are known, cut, read back row by row."""
    width, height = 3, 5
    rows = [bytes([0]) + bytes([r * 10 + c for c in range(width * 3)]) for r in range(height)]
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    png = (
        SIGNATURE
        + _chunk(b"IHDR", ihdr)
        + _chunk(b"IDAT", zlib.compress(b"".join(rows)))
        + _chunk(b"IEND", b"")
    )
    cut = crop_top(png, 2)
    assert png_size(cut) == (3, 2)
    idat = b"".join(data for kind, data in _chunks(cut) if kind == b"IDAT")
    assert zlib.decompress(idat) == rows[0] + rows[1]
    assert png_size(crop_top(png, 99)) == (3, 5)


def test_the_readme_picture_is_a_report_made_here(chromium: str, tmp_path: Path) -> None:
    env = runs.make_env(tmp_path / "env")
    with runs.fake_server("--ttft", "0.01", "--itl", "0.004") as url:
        argv = [*runs.bench_argv(url, 4, 60, osl=16), "--min-requests", "50", "--min-window", "1"]
        # The workload as a script on PATH, so the report's command row reads `bench-c4`.
        script = env.env["PATH"].split(os.pathsep)[0] + "/bench-c4"
        Path(script).write_text("#!/bin/sh\n" + runs.workload(env, argv)[2] + "\n")
        Path(script).chmod(0o755)
        r = runs.proctor(env, "run", "--name", "bench-c4", "--gpu-sample", "0.2", "--", "bench-c4")
        assert r.returncode == 0, r.stderr[-2000:]
        bench = runs.run_id_of(r)
    page = tmp_path / "report.html"
    made = runs.proctor(env, "report", bench, "-o", str(page))
    assert made.returncode == 0, made.stderr[-2000:]
    full = tmp_path / "full.png"
    check = check_page(page, screenshot=full, chromium=chromium, width=WIDTH)
    assert check.ok and check.layout_problems == [], check
    top = crop_top(full.read_bytes(), TOP)
    width, height = png_size(full.read_bytes())
    assert png_size(top) == (WIDTH, min(TOP, height)) and width == WIDTH
    (tmp_path / "report.png").write_bytes(top)
    print(f"report artifact: {tmp_path / 'report.png'}")
    if os.environ.get("PROCTOR_REFRESH_DOCS_IMG") == "1":
        IMAGE.parent.mkdir(parents=True, exist_ok=True)
        IMAGE.write_bytes(top)
    committed = IMAGE.read_bytes()
    assert png_size(committed) == png_size(top), (
        "docs/img/report.png is not the size of the picture made here: "
        "PROCTOR_REFRESH_DOCS_IMG=1 pytest tests/report/test_readme_image.py"
    )
    assert 20_000 < len(committed) < 1_500_000, len(committed)
    assert "](docs/img/report.png)" in (REPO / "README.md").read_text(encoding="utf-8")

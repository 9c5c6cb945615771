"""The HTML page: escaped text, figures as JSON in a non-executing script element, drawn by a
few lines of script, and plotly.js either beside the page or inline.

plotly.min.js is 99 % of a self-contained page (4.6 MB of a 4.8 MB report), so by default a
page names it by a relative path, `assets/plotly-VERSION.min.js`, which `write_report` puts
once beside the reports (a directory of reports shares one copy; a report is 100-300 kB).
`self_contained` inlines it instead: one file to mail, open anywhere. Neither needs a
network (the reports are opened on air-gapped clusters): there is no CDN URL anywhere.

The Content-Security-Policy forbids every fetch but the page's own directory (the script
beside it), so a page that tried one would fail loudly in the browser test rather than
quietly need a network.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

from proctor.record.rundir import write_atomic
from proctor.report.figures import Figure

CSP = (
    "default-src 'none'; script-src 'self' 'unsafe-inline'; style-src 'unsafe-inline'; "
    "img-src data: blob:; font-src data:; connect-src 'none'"
)

STYLE = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;margin:0;
color:#1b1b1b;background:#fafafa}
*,*::before,*::after{box-sizing:border-box}
main{max-width:1200px;margin:0 auto;padding:16px 24px 48px}
h1{font-size:1.5rem;margin:.2rem 0}h2{font-size:1.2rem;margin:2rem 0 .5rem;border-bottom:1px
solid #ddd;padding-bottom:.2rem}h3{font-size:1rem;margin:1rem 0 .3rem}
.badge{display:inline-block;padding:.15rem .6rem;border-radius:.3rem;font-weight:700;color:#fff;
margin-right:.5rem}
.ok{background:#1a7f37}.failed,.fail,.regression,.worse{background:#c62828}
.timeout,.stopped,.within_noise,.missing,.changed{background:#b26a00}
.unknown,.running,.starting,.pending,.same,.only_a,.only_b{background:#5f6368}
.better,.pass{background:#1a7f37}
table{border-collapse:collapse;margin:.3rem 0 1rem;font-size:.9rem;background:#fff}
td,th{border:1px solid #ddd;padding:.25rem .5rem;text-align:left;vertical-align:top}
th{background:#f0f0f0}td.num{text-align:right;font-variant-numeric:tabular-nums}
table.kv th{width:11rem}
code{font-family:"DejaVu Sans Mono",monospace;font-size:.85rem;word-break:break-all}
.check{margin:.15rem 0}.mark{display:inline-block;width:1.4rem;text-align:center;
border-radius:.2rem;color:#fff;margin-right:.4rem;font-weight:700}
.plot{width:100%;background:#fff;box-shadow:0 0 0 1px #e3e3e3;margin:.5rem 0}
.wide{max-width:100%;overflow-x:auto;margin:.3rem 0 1rem}.wide>table{margin:0}
td,th,p,h1,h2,h3,summary{overflow-wrap:break-word}
.note{color:#555;font-size:.85rem;margin:.2rem 0 .8rem}
.card{background:#fff;box-shadow:0 0 0 1px #ddd;border-radius:.4rem;padding:.7rem 1rem;
margin:.6rem 0 1rem}.card h3{margin:0 0 .4rem}.card .verdict{margin-bottom:.6rem}
.card .verdict .badge{font-size:1.15rem}.card .why{color:#444;font-size:.9rem}
.tiles{display:grid;grid-template-columns:repeat(auto-fill,minmax(10rem,1fr));gap:.5rem}
.tile{background:#f3f5f7;border-radius:.3rem;padding:.35rem .6rem}.tile b{display:block;
font-size:1.35rem;font-variant-numeric:tabular-nums}.tile span{color:#555;font-size:.8rem}
.warn{background:#fdecea;border-left:4px solid #c62828;padding:.4rem .6rem;margin:.4rem 0}
details{margin:.4rem 0}summary{cursor:pointer;font-weight:600}
footer{color:#777;font-size:.8rem;margin-top:3rem}
"""

# Draws every figure; marks the page done (data-rendered) so a headless check knows when.
RENDER_JS = """
(function () {
  var figs = JSON.parse(document.getElementById('proctor-figures').textContent);
  if (figs.length && typeof Plotly === 'undefined') {
    // The page was moved without the assets folder written beside it: say so where the
    // plots would be, rather than leave blank boxes.
    figs.forEach(function (f) {
      var el = document.getElementById(f.id);
      el.style.height = 'auto';
      el.innerHTML = '<p class="warn">plotly.js did not load from ' +
        document.body.getAttribute('data-plotly') + ': keep the assets folder beside ' +
        'this page, or write it with proctor report --self-contained.</p>';
    });
    document.body.setAttribute('data-rendered', 'error');
    return;
  }
  var config = {displaylogo: false, responsive: true, showLink: false};
  var jobs = figs.map(function (f) {
    var el = document.getElementById(f.id);
    return Plotly.newPlot(el, f.data, f.layout, config);
  });
  Promise.all(jobs).then(function () {
    document.body.setAttribute('data-rendered', String(figs.length));
  }, function (err) {
    console.error('proctor report: a plot failed: ' + err);
    document.body.setAttribute('data-rendered', 'error');
  });
})();
"""

MARKS = {"ok": "\u2713", "fail": "\u2717", "unknown": "?", "pending": "\u2026"}


def esc(value: object) -> str:
    return html.escape("" if value is None else str(value), quote=True)


#: Where render_page puts plotly.js: write_report replaces it with the inline script or a
#: <script src> naming the asset beside the page.
PLOTLY_SLOT = "<!--proctor:plotly.js-->"
#: The asset's directory, relative to the page.
ASSETS = "assets"


@lru_cache(maxsize=1)
def plotly_min_js() -> str:
    """plotly.min.js as the installed plotly ships it."""
    from plotly.offline import get_plotlyjs

    return str(get_plotlyjs())


def plotly_js() -> str:
    """plotly.min.js safe inside an inline <script> element."""
    # Inline script ends at the first "</script"; plotly.min.js has none, but never trust it.
    return plotly_min_js().replace("</script", "<\\/script")


@lru_cache(maxsize=1)
def plotly_asset_name() -> str:
    """The file name of plotly.js beside the reports, with its version: a page written by a
    proctor with another plotly keeps the copy it was drawn with."""
    from importlib.metadata import version

    return f"plotly-{version('plotly')}.min.js"


def write_plotly_asset(directory: Path) -> Path:
    """plotly.js at DIRECTORY/assets/NAME, written (atomically) only when it is not there
    already with the same bytes; its path."""
    path = directory / ASSETS / plotly_asset_name()
    text = plotly_min_js()
    try:
        if path.read_text(encoding="utf-8") == text:
            return path
    except (OSError, UnicodeDecodeError):
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, text, mask=False)
    return path


def plotly_script(self_contained: bool) -> str:
    """The element that loads plotly.js: inline, or from the asset beside the page."""
    if self_contained:
        return f"<script>{plotly_js()}</script>"
    return f'<script src="{ASSETS}/{plotly_asset_name()}"></script>'


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def script_json(data: Any) -> str:
    """JSON that is safe inside a <script> element: no '<', '>' or '&' left to end it."""
    try:
        text = json.dumps(data, separators=(",", ":"), allow_nan=False)
    except ValueError:
        text = json.dumps(_clean(data), separators=(",", ":"), allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def badge(text: str, css: str | None = None) -> str:
    return f'<span class="badge {esc(css or text)}">{esc(text)}</span>'


def mark(status: str) -> str:
    return f'<span class="mark {esc(status)}">{MARKS.get(status, "?")}</span>'


Cell = str | tuple[str, str]  # text, or (text, css class); text is escaped here


def table(
    columns: Sequence[str],
    rows: Sequence[Sequence[Any]],
    css: str = "",
    raw_columns: Sequence[int] = (),
) -> str:
    """An escaped table of Cells; columns in raw_columns hold HTML already built here."""
    head = "".join(f"<th>{esc(c)}</th>" for c in columns)
    body: list[str] = []
    for row in rows:
        cells: list[str] = []
        for i, cell in enumerate(row):
            text, klass = cell if isinstance(cell, tuple) else (cell, "")
            content = text if i in raw_columns else esc(text)
            attr = f' class="{esc(klass)}"' if klass else ""
            cells.append(f"<td{attr}>{content}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    attr = f' class="{esc(css)}"' if css else ""
    # A table wider than the page scrolls inside its own box: the page never scrolls sideways.
    return (
        f'<div class="wide"><table{attr}><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table></div>"
    )


def kv_table(pairs: Sequence[tuple[str, str]], raw: bool = False) -> str:
    rows = "".join(f"<tr><th>{esc(k)}</th><td>{v if raw else esc(v)}</td></tr>" for k, v in pairs)
    return f'<table class="kv"><tbody>{rows}</tbody></table>'


def figure_block(fig: Figure) -> str:
    note = f'<p class="note">{esc(fig.note)}</p>' if fig.note else ""
    # The div is as tall as the figure: plotly draws into it, never over what follows.
    return (
        f'<div class="plot" id="{esc(fig.id)}" data-title="{esc(fig.title)}" '
        f'data-points="{fig.points}" style="height:{fig.height}px"></div>{note}'
    )


def _page_layout(fig: Figure) -> dict[str, Any]:
    """The layout plotly gets: the div's height, and every axis growing the margin its tick
    labels and title need (a right-hand axis's ticks are never cut off)."""
    layout = {**fig.layout, "height": fig.height, "autosize": True}
    for key, axis in fig.layout.items():
        if key.startswith(("xaxis", "yaxis")) and isinstance(axis, dict):
            layout[key] = {"automargin": True, **axis}
    return layout


def render_page(
    title: str, blocks: Sequence[str], figures: Sequence[Figure], footer: str = ""
) -> str:
    figs = [{"id": f.id, "data": f.data, "layout": _page_layout(f)} for f in figures]
    return "".join(
        [
            '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">',
            f'<meta http-equiv="Content-Security-Policy" content="{esc(CSP)}">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            '<link rel="icon" href="data:,">',
            f"<title>{esc(title)}</title><style>{STYLE}</style>",
            f"{PLOTLY_SLOT}</head>\n",
            f'<body data-plotly="{esc(ASSETS + "/" + plotly_asset_name())}"><main>',
            *blocks,
            f"<footer>{esc(footer)}</footer></main>\n",
            f'<script type="application/json" id="proctor-figures">{script_json(figs)}</script>\n',
            f"<script>{RENDER_JS}</script>\n</body></html>\n",
        ]
    )

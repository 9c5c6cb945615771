"""Open a report in headless Chromium and say what it drew, over the DevTools protocol.

    check_page(Path("report.html"), screenshot=Path("report.png")) -> BrowserCheck

Chromium runs `--headless --no-sandbox --disable-gpu --disable-background-networking` with a
throw-away profile and `--remote-debugging-port=0` (it writes the port it chose into the
profile's DevToolsActivePort). Every request the page makes (Network.requestWillBeSent),
every console error, uncaught exception and browser log error is collected; each plot div is
inspected after plotly.js says it finished (body[data-rendered]).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from proctor.errors import TargetUnavailable
from proctor.supervise.kill import kill_ladder

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "chrome")
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-extensions",
    "--disable-component-update",
    "--disable-sync",
    "--metrics-recording-only",
    "--mute-audio",
    "--hide-scrollbars",
)

# Per plot div: traces plotly holds, points in them, and SVG marks actually drawn with data
# (non-empty path geometry in the scatter/bar layers).
INSPECT_JS = """
JSON.stringify(Array.from(document.querySelectorAll('div.plot')).map(function (el) {
  var data = el.data || [];
  var points = data.reduce(function (n, t) { return n + ((t.x || t.y || []).length); }, 0);
  var marks = Array.from(el.querySelectorAll(
      '.scatterlayer path.js-line, .scatterlayer path.point, .barlayer path'))
    .filter(function (p) { var d = p.getAttribute('d') || ''; return d.length > 4; }).length;
  return {id: el.id, title: el.getAttribute('data-title') || '',
          expected: Number(el.getAttribute('data-points') || 0), traces: data.length,
          points: points, marks: marks,
          svg: el.querySelectorAll('svg.main-svg').length};
}))
"""

# The page's layout as a reader meets it: every block the report writes (headings, tables,
# badges, notes, plots, cards) whose box intersects another's, neither holding the other (a
# plot's box is its div joined with the SVG plotly drew, which may spill out of the div); each
# plot's text (tick labels, titles, legend) that lies outside its plot; and how wide the
# document is against the window (wider: a sideways scrollbar).
LAYOUT_JS = """
(function () {
  var SEL = 'h1, h2, h3, table, .badge, div.plot, p, .card, summary, footer, .check';
  function box(el) {
    var r = el.getBoundingClientRect();
    var b = {l: r.left, t: r.top, r: r.right, b: r.bottom};
    if (el.matches('div.plot')) {
      el.querySelectorAll('svg.main-svg').forEach(function (s) {
        var q = s.getBoundingClientRect();
        b = {l: Math.min(b.l, q.left), t: Math.min(b.t, q.top), r: Math.max(b.r, q.right),
             b: Math.max(b.b, q.bottom)};
      });
    }
    return b;
  }
  function name(el) {
    var text = (el.id ? '#' + el.id : '') || (el.getAttribute('data-title') || '') ||
               (el.textContent || '').trim().slice(0, 40);
    return el.tagName.toLowerCase() + (el.className && typeof el.className === 'string'
      ? '.' + el.className.split(' ')[0] : '') + ' "' + text + '"';
  }
  var els = Array.from(document.querySelectorAll(SEL)).filter(function (el) {
    if (el.parentElement && el.parentElement.closest('div.plot')) return false;
    // What a closed <details> holds is not drawn (only its summary is).
    var shut = el.closest('details:not([open])');
    if (shut && !(el.matches('summary') && el.parentElement === shut)) return false;
    var r = el.getBoundingClientRect();
    return r.width > 0 && r.height > 0;
  });
  var boxes = els.map(box), overlaps = [];
  for (var i = 0; i < els.length; i++) {
    for (var j = i + 1; j < els.length; j++) {
      if (els[i].contains(els[j]) || els[j].contains(els[i])) continue;
      var a = boxes[i], b = boxes[j];
      var w = Math.min(a.r, b.r) - Math.max(a.l, b.l), h = Math.min(a.b, b.b) - Math.max(a.t, b.t);
      if (w > 1 && h > 1) overlaps.push(name(els[i]) + ' overlaps ' + name(els[j]) +
                                        ' by ' + Math.round(w) + 'x' + Math.round(h) + ' px');
    }
  }
  var clipped = [];
  document.querySelectorAll('div.plot').forEach(function (plot) {
    var p = plot.getBoundingClientRect();
    plot.querySelectorAll('svg.main-svg text').forEach(function (t) {
      if (t.closest('.hoverlayer') || !(t.textContent || '').trim()) return;
      var r = t.getBoundingClientRect();
      if (r.width === 0 && r.height === 0) return;
      if (r.left < p.left - 1 || r.right > p.right + 1 || r.top < p.top - 1 ||
          r.bottom > p.bottom + 1) {
        clipped.push('#' + plot.id + ' "' + t.textContent.trim().slice(0, 30) + '"');
      }
    });
  });
  var empty = [];
  document.querySelectorAll('div.plot').forEach(function (plot) {
    var layout = plot.layout || {}, used = {};
    (plot.data || []).forEach(function (t) { used[t.yaxis || 'y'] = true; });
    Object.keys(layout).forEach(function (k) {
      var m = /^yaxis(\\d*)$/.exec(k);
      if (m && !used['y' + m[1]]) empty.push('#' + plot.id + ' ' + k);
    });
  });
  return JSON.stringify({overlaps: overlaps, clipped: clipped, empty_axes: empty,
    scroll_width: document.documentElement.scrollWidth, inner_width: window.innerWidth,
    text: document.body.innerText});
})()
"""


@dataclass(frozen=True)
class PlotCheck:
    id: str
    title: str
    expected_points: int
    traces: int
    points: int
    marks: int
    svg: int = 0  # plotly's <svg class="main-svg"> elements in the div

    @property
    def drew_data(self) -> bool:
        return self.svg > 0 and self.traces > 0 and self.points > 0 and self.marks > 0


@dataclass
class BrowserCheck:
    url: str
    rendered: str | None  # body[data-rendered]: number of figures, "error", or None (timed out)
    plots: list[PlotCheck] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)  # every URL the page asked for
    console_errors: list[str] = field(default_factory=list)
    load_s: float = 0.0  # navigation to the load event
    render_s: float = 0.0  # navigation to every plot drawn
    screenshot: Path | None = None
    browser: str = ""
    # Layout (LAYOUT_JS): blocks drawn over each other, plot text outside its plot, y axes
    # with no trace, and the document's width against the window's (wider scrolls sideways).
    overlaps: list[str] = field(default_factory=list)
    clipped_text: list[str] = field(default_factory=list)
    empty_axes: list[str] = field(default_factory=list)
    scroll_width: int = 0
    inner_width: int = 0
    # The page's text as drawn (innerText: a table row's cells tab-separated).
    text: str = field(default="", repr=False)

    @property
    def layout_problems(self) -> list[str]:
        """Everything wrong with the page's layout, one line each; [] when it reads well."""
        wide = (
            [f"document {self.scroll_width} px wide in a {self.inner_width} px window"]
            if self.scroll_width > self.inner_width
            else []
        )
        return [
            *self.overlaps,
            *(f"clipped: {c}" for c in self.clipped_text),
            *(f"empty axis: {a}" for a in self.empty_axes),
            *wide,
        ]

    @property
    def network_requests(self) -> list[str]:
        """Requests other than the report itself, inline data and files beside the report
        (its assets folder: plotly.js)."""
        beside = self.url.rsplit("/", 1)[0] + "/" if self.url.startswith("file:") else None
        return [
            u
            for u in self.requests
            if u != self.url
            and not u.startswith(("data:", "blob:", "about:"))
            and not (beside is not None and u.startswith(beside) and "/../" not in u)
        ]

    @property
    def ok(self) -> bool:
        return (
            self.rendered not in (None, "error")
            and not self.network_requests
            and not self.console_errors
            and all(p.drew_data for p in self.plots)
        )


def find_chromium(explicit: str | None = None) -> str | None:
    if explicit:
        return shutil.which(explicit)
    for name in CHROMIUM_NAMES:
        found = shutil.which(name)
        if found:
            return found
    return None


class _Cdp:
    """The smallest DevTools client: numbered commands, events to a callback."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self.next_id = 0
        self.waiting: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.events: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.reader = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        async for msg in self.ws:
            if msg.type != aiohttp.WSMsgType.TEXT:
                continue
            data = json.loads(msg.data)
            future = self.waiting.pop(data["id"], None) if "id" in data else None
            if future is not None and not future.done():
                future.set_result(data)
            elif "method" in data:
                self.events.put_nowait(data)

    async def send(self, method: str, **params: Any) -> dict[str, Any]:
        self.next_id += 1
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.waiting[self.next_id] = future
        await self.ws.send_str(json.dumps({"id": self.next_id, "method": method, "params": params}))
        reply = await asyncio.wait_for(future, 60)
        if "error" in reply:
            raise RuntimeError(f"{method}: {reply['error'].get('message')}")
        result: dict[str, Any] = reply.get("result") or {}
        return result


def _event_text(event: dict[str, Any]) -> str | None:
    """A console error, uncaught exception or browser log error as one line, else None."""
    method, params = event.get("method"), event.get("params") or {}
    if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
        args = params.get("args") or []
        return "console: " + " ".join(str(a.get("value", a.get("description", ""))) for a in args)
    if method == "Runtime.exceptionThrown":
        details = params.get("exceptionDetails") or {}
        exc = details.get("exception") or {}
        return f"exception: {exc.get('description') or details.get('text')}"
    if method == "Log.entryAdded":
        entry = params.get("entry") or {}
        if entry.get("level") == "error":
            return f"log: {entry.get('text')} {entry.get('url') or ''}".strip()
    return None


async def _wait_port(profile: Path, proc: subprocess.Popen[bytes], deadline: float) -> int:
    marker = profile / "DevToolsActivePort"
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise TargetUnavailable(
                f"chromium exited with status {proc.returncode} at start",
                hint="run .ci/install-browser.sh",
            )
        with contextlib.suppress(OSError, ValueError, IndexError):
            return int(marker.read_text().splitlines()[0])
        await asyncio.sleep(0.05)
    raise TargetUnavailable("chromium did not open its DevTools port in time")


async def _check(
    browser: str, path: Path, screenshot: Path | None, timeout_s: float, width: int, height: int
) -> BrowserCheck:
    url = path.resolve().as_uri()
    result = BrowserCheck(url=url, rendered=None)
    deadline = time.monotonic() + timeout_s
    with tempfile.TemporaryDirectory(prefix="proctor-chromium-") as tmp:
        profile = Path(tmp)
        proc = subprocess.Popen(
            [
                browser,
                *FLAGS,
                f"--user-data-dir={profile}",
                "--remote-debugging-port=0",
                "--remote-debugging-address=127.0.0.1",
                f"--window-size={width},{height}",
                "about:blank",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            port = await _wait_port(profile, proc, deadline)
            async with aiohttp.ClientSession() as http:
                async with http.get(f"http://127.0.0.1:{port}/json/version") as reply:
                    result.browser = str((await reply.json()).get("Browser", ""))
                async with http.get(f"http://127.0.0.1:{port}/json/list") as reply:
                    pages = [t for t in await reply.json() if t.get("type") == "page"]
                if not pages:
                    raise TargetUnavailable("chromium opened no page")
                async with http.ws_connect(pages[0]["webSocketDebuggerUrl"], max_msg_size=0) as ws:
                    await _drive(_Cdp(ws), url, result, screenshot, deadline, width, height)
        finally:
            # Chromium's helpers (zygote, renderers, GPU process) write into the profile until
            # they exit: stop the whole group and wait for it before the profile is removed.
            def reap() -> None:
                proc.poll()

            kill_ladder(proc.pid, [proc.pid], grace=5.0, kill_wait=10.0, reap=reap)
            proc.wait(10)
    return result


async def _drive(
    cdp: _Cdp,
    url: str,
    result: BrowserCheck,
    screenshot: Path | None,
    deadline: float,
    width: int,
    height: int,
) -> None:
    for domain in ("Network", "Runtime", "Log", "Page"):
        await cdp.send(f"{domain}.enable")
    await cdp.send(
        "Emulation.setDeviceMetricsOverride",
        width=width,
        height=height,
        deviceScaleFactor=1,
        mobile=False,
    )
    started = time.monotonic()
    await cdp.send("Page.navigate", url=url)
    loaded = False

    def take(event: dict[str, Any]) -> None:
        nonlocal loaded
        if event.get("method") == "Network.requestWillBeSent":
            result.requests.append(str(event["params"]["request"]["url"]))
        elif event.get("method") == "Page.loadEventFired" and not loaded:
            loaded = True
            result.load_s = time.monotonic() - started
        text = _event_text(event)
        if text:
            result.console_errors.append(text)

    while time.monotonic() < deadline:
        while not cdp.events.empty():
            take(cdp.events.get_nowait())
        if loaded:
            reply = await cdp.send(
                "Runtime.evaluate",
                expression="document.body.getAttribute('data-rendered')",
                returnByValue=True,
            )
            value = (reply.get("result") or {}).get("value")
            if value is not None:
                result.rendered = str(value)
                result.render_s = time.monotonic() - started
                break
        with contextlib.suppress(asyncio.TimeoutError):
            take(await asyncio.wait_for(cdp.events.get(), 0.05))
    reply = await cdp.send("Runtime.evaluate", expression=INSPECT_JS, returnByValue=True)
    for p in json.loads((reply.get("result") or {}).get("value") or "[]"):
        result.plots.append(
            PlotCheck(
                p["id"], p["title"], p["expected"], p["traces"], p["points"], p["marks"], p["svg"]
            )
        )
    reply = await cdp.send("Runtime.evaluate", expression=LAYOUT_JS, returnByValue=True)
    layout = json.loads((reply.get("result") or {}).get("value") or "{}")
    result.overlaps = list(layout.get("overlaps") or [])
    result.clipped_text = list(layout.get("clipped") or [])
    result.empty_axes = list(layout.get("empty_axes") or [])
    result.scroll_width = int(layout.get("scroll_width") or 0)
    result.inner_width = int(layout.get("inner_width") or 0)
    result.text = str(layout.get("text") or "")
    if screenshot is not None:
        metrics = await cdp.send("Page.getLayoutMetrics")
        size = metrics.get("cssContentSize") or metrics.get("contentSize") or {}
        clip = {
            "x": 0,
            "y": 0,
            "width": width,
            "height": min(float(size.get("height", height)), 16000.0),
            "scale": 1,
        }
        shot = await cdp.send(
            "Page.captureScreenshot", format="png", clip=clip, captureBeyondViewport=True
        )
        screenshot.parent.mkdir(parents=True, exist_ok=True)
        screenshot.write_bytes(base64.b64decode(shot["data"]))
        result.screenshot = screenshot
    await asyncio.sleep(0.2)  # late console errors from the last frame
    while not cdp.events.empty():
        take(cdp.events.get_nowait())
    cdp.reader.cancel()


def check_page(
    path: Path,
    *,
    screenshot: Path | None = None,
    timeout_s: float = 90.0,
    chromium: str | None = None,
    width: int = 1280,
    height: int = 900,
) -> BrowserCheck:
    """Load `path` in headless Chromium; raises TargetUnavailable when there is no browser."""
    browser = find_chromium(chromium)
    if browser is None:
        raise TargetUnavailable("no chromium found on PATH", hint="run .ci/install-browser.sh")
    return asyncio.run(_check(browser, path, screenshot, timeout_s, width, height))

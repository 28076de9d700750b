"""Measures how wide each page of the built docs site lays out, in headless Chromium.

    python3 -m mkdocs build --strict --site-dir /tmp/site
    python3 tools/page_widths.py /tmp/site                  # every page on a 420-px screen
    python3 tools/page_widths.py /tmp/site --width=1400     # a wide screen
    python3 tools/page_widths.py /tmp/site --blocks         # also the code blocks that scroll

Each page is loaded into a frame `--width` pixels wide, scrollbars hidden as on a phone, and its
document's `scrollWidth` is read once it has loaded: a page wider than the screen scrolls sideways.
Such a page is listed with the elements that reach past the screen's edge (outside a block that
scrolls on its own), so the cause can be found. `--blocks` lists each code block whose lines are
wider than the block, which a reader scrolls inside it. The exit status is 1 when a page is wider
than the screen. Needs a Chromium on the PATH (`apt-get install chromium`).
"""

from __future__ import annotations

import argparse
import functools
import html
import http.server
import json
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Sequence
from typing import NamedTuple

__all__ = ["PageWidth", "chromium", "main", "measure"]

# The page the browser opens: it loads each page into a frame of the screen's width, in turn.
_HARNESS = "/__page_widths__.html"
# Where one page's measurement starts: after its load event and this long (ms) for its scripts and layout.
_SETTLE_MS = 250
_SCRIPT = """
const pages = %(pages)s, results = [], frame = document.getElementById("page");
let next = 0;
function clipped(element, view) {
  // Inside an element that scrolls or clips on its own (a code block, a table's wrapper).
  for (let p = element.parentElement; p && p !== element.ownerDocument.body; p = p.parentElement) {
    if (view.getComputedStyle(p).overflowX !== "visible") return true;
  }
  return false;
}
function measure() {
  const doc = frame.contentDocument, view = frame.contentWindow, width = view.innerWidth;
  const past = [], blocks = [];
  for (const element of doc.body.querySelectorAll("*")) {
    const box = element.getBoundingClientRect();
    if (box.width > 0 && box.right > width + 0.5 && !clipped(element, view)) {
      past.push(element.tagName.toLowerCase() + " " + Math.round(box.right) + " px: "
                + (element.textContent || "").replace(/\\s+/g, " ").trim().slice(0, 80));
    }
  }
  for (const code of doc.querySelectorAll("pre > code")) {
    if (code.scrollWidth > code.clientWidth + 1) {
      blocks.push(code.scrollWidth + " px in " + code.clientWidth + ": "
                  + (code.textContent || "").trim().split("\\n")[0].slice(0, 80));
    }
  }
  results.push({page: pages[next], width: doc.documentElement.scrollWidth, past: past.slice(-5), blocks: blocks});
}
frame.onload = () => setTimeout(() => {
  try { measure(); } catch (error) { results.push({page: pages[next], error: String(error)}); }
  next += 1;
  load();
}, %(settle)d);
function load() {
  if (next < pages.length) { frame.src = "/" + pages[next]; return; }
  document.getElementById("results").textContent = JSON.stringify(results);
}
load();
"""


class PageWidth(NamedTuple):
    """One page's layout on a screen of a given width.

    Attributes:
        page: The page's path in the site, e.g. `guides/tensorboard/index.html`.
        width: The document's `scrollWidth` in pixels: wider than the screen, it scrolls sideways.
        past: The last few elements that reach past the screen's right edge, with their edge and text.
        blocks: The code blocks that scroll inside themselves: their lines' width, the block's, the first line.
    """

    page: str
    width: int
    past: tuple[str, ...] = ()
    blocks: tuple[str, ...] = ()


def chromium() -> str | None:
    """The Chromium (or Chrome) on the PATH, or None."""
    names = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
    return next((path for path in map(shutil.which, names) if path), None)


def _harness(pages: Sequence[str], width: int) -> bytes:
    script = _SCRIPT % {"pages": json.dumps(list(pages)), "settle": _SETTLE_MS}
    return (
        '<!doctype html><html><body style="margin:0">'
        f'<iframe id="page" style="width:{width}px;height:900px;border:0"></iframe>'
        f'<pre id="results"></pre><script>{script}</script></body></html>'
    ).encode()


def _server(site: pathlib.Path, harness: bytes) -> http.server.ThreadingHTTPServer:
    """Serves `site`, and `harness` at `_HARNESS`, on a free local port."""

    class Handler(http.server.SimpleHTTPRequestHandler):
        def do_GET(self):
            if self.path.split("?")[0] != _HARNESS:
                return super().do_GET()
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(harness)))
            self.end_headers()
            self.wfile.write(harness)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Handler, directory=str(site)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def measure(site: str | pathlib.Path, width: int = 420, pages: Sequence[str] | None = None) -> list[PageWidth]:
    """Lays out each page of a built site on a screen `width` pixels wide, in headless Chromium.

    Args:
        site: The built site's folder (`mkdocs build --site-dir`).
        width: The screen's width in pixels (420, a phone; 1400, a laptop).
        pages: The pages' paths in the site; None measures every `.html` file.

    Returns:
        One `PageWidth` per page, in the order given (sorted by path for None).

    Raises:
        RuntimeError: without a Chromium on the PATH, or when the browser measured no page.
        ValueError: for a folder that holds no page, or a width below 100 px.
    """
    site = pathlib.Path(site).resolve()
    if width < 100:
        raise ValueError(f"A screen is at least 100 px wide. Received: width={width!r}")
    if pages is None:
        pages = sorted(path.relative_to(site).as_posix() for path in site.rglob("*.html"))
    if not pages:
        raise ValueError(f"No page to measure in {site}. Received: pages={pages!r}")
    browser = chromium()
    if browser is None:
        raise RuntimeError("No Chromium on the PATH: install it (e.g. apt-get install chromium).")
    server = _server(site, _harness(pages, width))
    profile = tempfile.mkdtemp(prefix="tfmp_page_widths_")
    try:
        dom = subprocess.run(
            [
                browser,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--hide-scrollbars",
                f"--user-data-dir={profile}",
                f"--window-size={width + 100},1000",
                # Page time, not wall time: enough for every page's load and settling, never waited out.
                f"--virtual-time-budget={(len(pages) + 10) * 20_000}",
                "--dump-dom",
                f"http://127.0.0.1:{server.server_address[1]}{_HARNESS}",
            ],
            capture_output=True,
            text=True,
            timeout=60 + 10 * len(pages),
            check=True,
        ).stdout
    finally:
        server.shutdown()
        shutil.rmtree(profile, ignore_errors=True)
    found = re.search(r'<pre id="results">(.+?)</pre>', dom, re.DOTALL)
    if found is None:
        raise RuntimeError(f"Chromium measured no page of {site} (its page's end: {dom[-300:]!r}).")
    results = json.loads(html.unescape(found.group(1)))
    errors = [r for r in results if "error" in r]
    if errors:
        raise RuntimeError(f"Chromium could not measure some pages: {errors}")
    return [PageWidth(r["page"], r["width"], tuple(r["past"]), tuple(r["blocks"])) for r in results]


def main(argv: Sequence[str] | None = None) -> int:
    """Measures the pages, prints each one's width (and what is too wide); 1 when a page is wider than the screen."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("site", help="The built site's folder (mkdocs build --site-dir).")
    parser.add_argument("--width", type=int, default=420, help="The screen's width in pixels (default 420).")
    parser.add_argument("--blocks", action="store_true", help="Also list the code blocks that scroll inside.")
    parser.add_argument("pages", nargs="*", help="Pages' paths in the site (default: every .html file).")
    args = parser.parse_intermixed_args(argv)
    results = measure(args.site, args.width, args.pages or None)
    wide = [r for r in results if r.width > args.width]
    for result in results:
        mark = "WIDE" if result.width > args.width else "ok"
        print(f"{mark:4} {result.width:5} px  {result.page}")
        for line in result.past if result.width > args.width else ():
            print(f"       past the edge: {line}")
        for line in result.blocks if args.blocks else ():
            print(f"       scrolls inside: {line}")
    widest = max(result.width for result in results)
    print(f"{len(results)} pages at {args.width} px; {len(wide)} wider than the screen, widest {widest} px")
    return 1 if wide else 0


if __name__ == "__main__":
    sys.exit(main())

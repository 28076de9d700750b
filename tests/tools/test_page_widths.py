"""tools/page_widths.py: pages laid out in headless Chromium; skipped where no Chromium is installed."""

import importlib.util
import os
import pathlib
import subprocess
import sys

import pytest

_REPO = pathlib.Path(__file__).resolve().parents[2]
_SPEC = importlib.util.spec_from_file_location("page_widths", _REPO / "tools" / "page_widths.py")
page_widths = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(page_widths)

_NEEDS_CHROMIUM = pytest.mark.skipif(page_widths.chromium() is None, reason="no Chromium on the PATH")
_PAGE = '<!doctype html><html><head><meta name="viewport" content="width=device-width"></head><body>{}</body></html>'


def test_measure_refuses_a_site_without_pages_and_a_screen_too_narrow(tmp_path):
    with pytest.raises(ValueError, match="No page to measure"):
        page_widths.measure(tmp_path)
    with pytest.raises(ValueError, match="Received: width=10"):
        page_widths.measure(tmp_path, width=10)


@_NEEDS_CHROMIUM
def test_a_page_wider_than_the_screen_is_found_with_what_reaches_past_its_edge(tmp_path):
    # A word kept on one line (white-space: nowrap) 600 px wide scrolls a 420-px page; a code block that scrolls
    # inside itself does not.
    word = '<span style="white-space:nowrap">' + "x" * 100 + "</span>"
    (tmp_path / "wide.html").write_text(_PAGE.format(f"<p>a {word}</p>"))
    block = '<pre><code style="display:block;overflow:auto">' + "y" * 200 + "</code></pre>"
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "fits.html").write_text(_PAGE.format("<p>a few words</p>" + block))
    fits, wide = page_widths.measure(tmp_path, width=420)  # in the order of their paths
    assert (fits.page, wide.page) == ("sub/fits.html", "wide.html")
    assert wide.width > 420 and wide.past and wide.past[-1].startswith("span ")
    assert fits.width == 420 and fits.past == () and len(fits.blocks) == 1


@pytest.mark.slow
@pytest.mark.timeout(900)
@_NEEDS_CHROMIUM
def test_no_page_of_the_docs_site_is_wider_than_a_420_px_screen(tmp_path):
    pytest.importorskip("mkdocs", reason='the site is built with the docs extra: python3 -m pip install -e ".[docs]"')
    site = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=_REPO,
        check=True,
        capture_output=True,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
    )
    results = page_widths.measure(site, width=420)
    assert len(results) > 40
    assert {r.page: (r.width, r.past) for r in results if r.width > 420} == {}

"""mkdocs.yml: every hook of docs/_ext is listed, under one `hooks:` key."""

import collections
import pathlib
import re

_ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_top_level_keys_are_unique():
    # YAML keeps only the last of two equal keys: a second `hooks:` would drop the first's hooks unseen.
    keys = re.findall(r"^(\w+):", (_ROOT / "mkdocs.yml").read_text(), re.M)
    assert [k for k, n in collections.Counter(keys).items() if n > 1] == []


def test_every_hook_module_is_listed():
    text = (_ROOT / "mkdocs.yml").read_text()
    listed = re.search(r"^hooks:\n((?:  - .*\n)+)", text, re.M).group(1)
    hooks = sorted(
        f"docs/_ext/{p.name}"
        for p in (_ROOT / "docs" / "_ext").glob("*.py")
        if re.search(r"^def on_\w+\(", p.read_text(), re.M)
    )
    assert hooks and all(f"  - {hook}\n" in listed for hook in hooks)


def test_no_site_url_ties_the_site_to_an_address():
    # An invented address made the 404 page link to /tfmp/...; without one the pages link relatively.
    assert not re.search(r"^site_url:", (_ROOT / "mkdocs.yml").read_text(), re.M)


def test_the_docs_extra_pins_the_theme_below_its_end_of_life_notice():
    setup = (_ROOT / "setup.cfg").read_text()
    assert "    mkdocs-material>=9.5,<9.7\n" in setup


def test_the_404_page_links_relatively_and_finds_the_site_s_folder_when_it_loads():
    import importlib.util

    spec = importlib.util.spec_from_file_location("not_found_page", _ROOT / "docs" / "_ext" / "not_found_page.py")
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    built = (
        '<html><head><link href="/assets/main.css"><link href="https://fonts.gstatic.com"></head>'
        '<body><a href="/.">Home</a><a href="/guides/x/">X</a>'
        '<script id="__config" type="application/json">{"base": "/", "search": "/assets/w.js"}</script>'
        '<script src="/assets/bundle.js"></script></body></html>'
    )
    page = hook.on_post_template(built, "404.html", config=None)
    assert 'href="/' not in page.replace('href="https://', "") and 'src="/' not in page
    assert 'href="assets/main.css"' in page and 'href="."' in page and 'href="guides/x/"' in page
    assert page.index("__tfmpRoot") < page.index('href="assets/main.css"')  # the <base> comes first
    assert '"base": "."' in page and "j.base=window.__tfmpRoot" in page
    assert hook.on_post_template(built, "sitemap.xml", config=None) == built

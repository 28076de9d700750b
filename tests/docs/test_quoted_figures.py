"""Every figure README.md and the docs quote equals its record (docs/records/), and the docs build checks it too."""

import importlib.util
import pathlib
import types

import pytest

_ROOT = pathlib.Path(__file__).resolve().parents[2]
# The build hook imports mkdocs, which the docs extra installs and the test extra does not; .ci/run runs these
# tests again in the docs build's environment, so they are skipped only where no docs build can run.
_NEEDS_DOCS = 'the docs build hook needs the docs extra: python3 -m pip install -e ".[docs]"'
_SPEC = importlib.util.spec_from_file_location("figures", _ROOT / "tools" / "figures.py")
figures = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(figures)


def test_the_covered_files_include_the_readme_reports_and_guides():
    names = {str(pathlib.Path(p).relative_to(_ROOT)) for p in figures.covered_files()}
    assert {"README.md", "docs/getting-started.md", "docs/PERFORMANCE.md", "docs/NUMERICS.md"} <= names
    assert {str(p.relative_to(_ROOT)) for p in (_ROOT / "docs" / "guides").glob("*.md")} <= names


def test_every_quoted_figure_equals_its_record():
    assert [str(p) for p in figures.check_files(figures.covered_files())] == []


def test_the_reports_quote_figures_from_records():
    for page in ("README.md", "docs/PERFORMANCE.md", "docs/NUMERICS.md", "docs/getting-started.md"):
        text = (_ROOT / page).read_text()
        assert figures.FIGURE.search(text) or "\n<!-- figures:\n" in text, page


def test_the_docs_build_runs_the_check():
    hooks = (_ROOT / "mkdocs.yml").read_text()
    assert "  - docs/_ext/quoted_figures.py\n" in hooks


def _build_hook():
    """docs/_ext/quoted_figures.py, the docs build's hook; skips the test where the docs extra is not installed."""
    pytest.importorskip("mkdocs", reason=_NEEDS_DOCS)
    spec = importlib.util.spec_from_file_location("quoted_figures", _ROOT / "docs" / "_ext" / "quoted_figures.py")
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    return hook


def test_the_build_hook_fails_a_page_whose_figure_differs_from_its_record():
    hook = _build_hook()
    from mkdocs.exceptions import PluginError

    page = types.SimpleNamespace(file=types.SimpleNamespace(src_path="page.md"))
    good = "0.93x<!-- figure: history data.avx2-gan-fp16-batch256.ratio_to_float32 -->"
    assert hook.on_page_markdown(good, page=page) == good
    with pytest.raises(PluginError, match="docs/page.md:1: 0.73 quoted, the record history data.avx2-gan-fp16"):
        hook.on_page_markdown(good.replace("0.93", "0.73"), page=page)


def test_the_build_hook_fails_a_guide_with_an_unmarked_ratio():
    hook = _build_hook()
    from mkdocs.exceptions import PluginError

    page = types.SimpleNamespace(file=types.SimpleNamespace(src_path="guides/page.md"))
    with pytest.raises(PluginError, match="docs/guides/page.md:1: '1.7x' quoted with no figure comment"):
        hook.on_page_markdown("bfloat16 ran at 1.7x float32's speed\n", page=page)


def test_the_build_hook_fails_a_guide_with_unmarked_points():
    hook = _build_hook()
    from mkdocs.exceptions import PluginError

    page = types.SimpleNamespace(file=types.SimpleNamespace(src_path="guides/page.md"))
    with pytest.raises(PluginError, match="'-0.64 points' quoted with no figure comment"):
        hook.on_page_markdown("The fused layer averaged -0.64 points.\n", page=page)


def test_at_most_a_third_of_the_quoted_figures_come_from_transcribed_or_history_records():
    assert figures.figure_share_problems(figures.covered_files()) == [], figures.figure_kinds(figures.covered_files())

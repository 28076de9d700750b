"""Pages on a phone and a wide screen: the docs build's hook that keeps flags and module names whole on narrow
screens without letting a long one widen the page, and console output that wraps."""

import html
import importlib.util
import pathlib
import re

_REPO = pathlib.Path(__file__).resolve().parents[2]
_PATH = _REPO / "docs" / "_ext" / "narrow_screens.py"
_SPEC = importlib.util.spec_from_file_location("narrow_screens", _PATH)
narrow_screens = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(narrow_screens)


def test_inline_code_words_do_not_break():
    html = "<p>Pass <code>--cluster=slurm --resume</code>.</p>"
    assert narrow_screens.wrap_points(html) == (
        '<p>Pass <code><span class="nobr">--cluster=slurm</span> <span class="nobr">--resume</span></code>.</p>'
    )


def test_block_code_is_left_alone():
    html = "<pre><code>python3 -m pytest</code></pre>"
    assert narrow_screens.wrap_points(html) == html


def test_api_names_wrap_after_a_dot():
    html = '<span class="doc doc-object-name doc-class-name">tfmp.loss_scale.LossScaleOptimizer</span>'
    assert narrow_screens.wrap_points(html) == (
        '<span class="doc doc-object-name doc-class-name">tfmp.<wbr>loss_scale.<wbr>LossScaleOptimizer</span>'
    )


def test_a_word_split_by_a_line_break_in_the_source_is_two_words():
    html = "<p><code>--models=resnet50\n--steps=2</code></p>"
    assert narrow_screens.wrap_points(html) == (
        '<p><code><span class="nobr">--models=resnet50</span>\n<span class="nobr">--steps=2</span></code></p>'
    )


def test_long_words_wrap_after_their_separators_only():
    # A dotted name after its dots (not a decimal point), a path after its slashes, a list after its commas.
    html = (
        "<code>tfmp.cpu_kernels.float32_gradients(0.35) docs/guides/benchmark-methodology.md "
        "--precisions=float32,mixed_bfloat16,mixed_float16 tfmp.run.benchmark::launches_op_events</code>"
    )
    assert narrow_screens.wrap_points(html) == (
        '<code><span class="nobr">tfmp.<wbr>cpu_kernels.<wbr>float32_gradients(<wbr>0.35)</span> '
        '<span class="nobr">docs/<wbr>guides/<wbr>benchmark-methodology.md</span> '
        '<span class="nobr">--precisions=<wbr>float32,<wbr>mixed_bfloat16,<wbr>mixed_float16</span> '
        '<span class="nobr">tfmp.<wbr>run.<wbr>benchmark::<wbr>launches_op_events</span></code>'
    )


def test_a_word_that_fits_a_narrow_screen_never_breaks():
    # Flags, short paths, file names, a leading dot: each fits a 420-px line, so no break point at any width.
    words = ["--strategy=multi_worker", ".ci/run", "tfmp/datasets/digits.npz", "tensorboard-plugin-profile"]
    words += ["TF_CPU_ALLOCATOR_USE_BFC=true", "make_strategy(&quot;multi_worker&quot;)", "a/b/c", "x::y"]
    for word in words:
        assert narrow_screens.wrap_points(f"<code>{word}</code>") == f'<code><span class="nobr">{word}</span></code>'


def test_a_long_part_also_wraps_after_its_underscores_and_hyphens_but_not_the_last_or_a_flags_name():
    html = "<code>20261126-185627_text_classifier_mixed_float16/train</code>"
    assert narrow_screens.wrap_points(html) == (
        '<code><span class="nobr">20261126-<wbr>185627_<wbr>text_<wbr>classifier_<wbr>mixed_<wbr>float16/<wbr>'
        "train</span></code>"
    )
    # A path's last part (a file's name) and a flag's name stay whole while a narrow line holds them.
    assert narrow_screens.wrap_points("<code>logs/a_long_run_name_of_the_float16_gan</code>") == (
        '<code><span class="nobr">logs/<wbr>a_long_run_name_of_the_float16_gan</span></code>'
    )
    assert narrow_screens.wrap_points("<code>--tensorboard_profile_batches_to_keep=10,20</code>") == (
        '<code><span class="nobr">--tensorboard_profile_batches_to_keep=<wbr>10,<wbr>20</span></code>'
    )


def test_a_last_part_or_a_flags_name_longer_than_a_narrow_line_wraps_after_its_underscores_and_hyphens():
    # Kept whole, these scrolled a 420-px page sideways: a run's name, a test's name, a flag's name.
    assert narrow_screens.wrap_points("<code>20261126-185627_text_classifier_mixed_float16_ls-dynamic</code>") == (
        '<code><span class="nobr">20261126-<wbr>185627_<wbr>text_<wbr>classifier_<wbr>mixed_<wbr>float16_<wbr>'
        "ls-<wbr>dynamic</span></code>"
    )
    html = "<code>tests/run/test_runs.py::test_mixed_precision_keeps_float32_accuracy</code>"
    assert narrow_screens.wrap_points(html) == (
        '<code><span class="nobr">tests/<wbr>run/<wbr>test_runs.py::<wbr>test_<wbr>mixed_<wbr>precision_<wbr>'
        "keeps_<wbr>float32_<wbr>accuracy</span></code>"
    )
    # Never between a flag's leading hyphens and its name.
    assert narrow_screens.wrap_points("<code>--a_flag_name_longer_than_any_narrow_line=1</code>") == (
        '<code><span class="nobr">--a_<wbr>flag_<wbr>name_<wbr>longer_<wbr>than_<wbr>any_<wbr>narrow_<wbr>line=<wbr>'
        "1</span></code>"
    )


def test_a_run_without_separators_wraps_every_narrow_line_of_characters():
    digest = "0123456789abcdef" * 6
    line = narrow_screens.NARROW_LINE
    assert narrow_screens.wrap_points(f"<code>{digest}</code>") == (
        f'<code><span class="nobr">{digest[:line]}<wbr>{digest[line : 2 * line]}<wbr>{digest[2 * line :]}</span></code>'
    )


def test_entities_stay_whole():
    html = "<code>make_strategy(&quot;multi_worker&quot;,cluster_resolver=resolver)</code>"
    assert narrow_screens.wrap_points(html) == (
        '<code><span class="nobr">make_strategy(<wbr>&quot;multi_worker&quot;,<wbr>cluster_resolver=<wbr>'
        "resolver)</span></code>"
    )


# The site's inline code comes from the pages and from the docstrings of the code the API pages show
# (tfmp/, and models/ as tfmp.models): a span in backticks, outside fenced blocks.
_FENCE = re.compile(r"^[ \t]*(```|~~~).*?^[ \t]*\1", re.DOTALL | re.MULTILINE)
_SPAN = re.compile(r"(?<!`)`([^`]+)`(?!`)")


def _site_inline_code():
    sources = sorted((_REPO / "docs").rglob("*.md")) + sorted((_REPO / "tfmp").rglob("*.py"))
    sources += sorted((_REPO / "models").rglob("*.py"))
    for source in sources:
        for span in _SPAN.finditer(_FENCE.sub("", source.read_text(encoding="utf-8"))):
            yield source.relative_to(_REPO), span.group(1)


def _pieces(code_html):
    """Each piece of inline code's HTML that cannot wrap (between spaces and <wbr>), entities as one character."""
    for word in re.findall(r'<span class="nobr">(.*?)</span>', code_html):
        yield from (re.sub(r"&[#\w]+;", "&", piece) for piece in word.split("<wbr>"))


def test_no_inline_code_on_any_page_has_a_piece_wider_than_a_narrow_screen():
    # A piece that cannot wrap and is longer than a 420-px line holds scrolls the whole page sideways.
    spans = list(_site_inline_code())
    assert len(spans) > 1000
    too_wide = {
        f"{source}: {piece}"
        for source, span in spans
        for piece in _pieces(narrow_screens.wrap_points(f"<code>{html.escape(span)}</code>"))
        if len(piece) > narrow_screens.NARROW_LINE
    }
    assert too_wide == set()


# The characters of a code block's line that a 1400-px screen's page column shows (868 px of 8.2-px characters).
_WIDE_COLUMN = 100
_BLOCK = re.compile(r"^[ \t]*```[ \t]*(?P<info>[^\n]*)\n(?P<body>.*?)^[ \t]*```", re.DOTALL | re.MULTILINE)


def test_console_output_wider_than_a_wide_screen_wraps():
    # A console block (text, or no language) with a line longer than the column scrolls, and its end (often
    # the result) is out of sight: written ``` { .text .wrap }, docs/stylesheets/extra.css wraps it. Code keeps
    # its lines.
    scrolling = []
    for page in sorted((_REPO / "docs").rglob("*.md")):
        for block in _BLOCK.finditer(page.read_text(encoding="utf-8")):
            info = block.group("info").strip()
            console = info in ("", "text") or (info.startswith("{") and ".text" in info)
            longest = max(map(len, block.group("body").splitlines()), default=0)
            if console and longest > _WIDE_COLUMN and ".wrap" not in info:
                line = page.read_text(encoding="utf-8")[: block.start()].count("\n") + 1
                scrolling.append(f"{page.relative_to(_REPO)}:{line}")
    assert scrolling == []
    css = (_REPO / "docs" / "stylesheets" / "extra.css").read_text(encoding="utf-8")
    assert re.search(r"\.wrap pre > code \{\s*white-space: pre-wrap;", css)


_TABLE = (
    "<table>\n<thead>\n<tr>\n<th>Name</th>\n<th>Type</th>\n</tr>\n</thead>\n<tbody>\n"
    '<tr class="doc-section-item">\n<td><code>logs</code></td>\n<td class="x">dict</td>\n</tr>\n</tbody>\n</table>'
)


def test_api_tables_label_each_cell_with_its_header():
    # On a narrow screen the CSS stacks a row's cells, each under its label (data-label).
    assert narrow_screens.label_cells(_TABLE) == (
        '<table data-narrow="stack">\n<thead>\n<tr>\n<th>Name</th>\n<th>Type</th>\n</tr>\n</thead>\n<tbody>\n'
        '<tr class="doc-section-item">\n<td data-label="Name"><code>logs</code></td>\n'
        '<td data-label="Type" class="x">dict</td>\n</tr>\n</tbody>\n</table>'
    )
    assert narrow_screens.label_cells("<table><tr><td>1</td></tr></table>") == "<table><tr><td>1</td></tr></table>"


def test_the_api_pages_tables_and_other_wide_ones_are_labelled():
    class Page:
        def __init__(self, url):
            self.url = url

    assert 'data-label="Name"' in narrow_screens.on_page_content(_TABLE, page=Page("api/run/training/"))
    assert "data-label" not in narrow_screens.on_page_content(_TABLE, page=Page("guides/benchmark/"))
    header = "".join(f"<th>c{i}</th>" for i in range(narrow_screens.WIDE_TABLE))
    wide = f"<table><thead><tr>{header}</tr></thead><tbody><tr><td>1</td></tr></tbody></table>"
    assert 'data-label="c0"' in narrow_screens.on_page_content(wide, page=Page("guides/benchmark/"))

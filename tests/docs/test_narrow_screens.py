"""The docs build's hook that keeps flags and module names whole on narrow screens."""

import importlib.util
import pathlib

_PATH = pathlib.Path(__file__).resolve().parents[2] / "docs" / "_ext" / "narrow_screens.py"
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

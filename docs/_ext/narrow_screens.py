"""An MkDocs hook: on a narrow screen, inline code and API headings wrap only where a reader expects.

Browsers break inline code after a hyphen or anywhere (Material's `word-break`), which splits
flags (`--cluster=slurm` as `-` / `-cluster=slurm`) and module names mid-word at 420 px. This
hook keeps each space-separated word of inline code on one line (code with spaces still wraps at
its spaces) and lets the dotted names of the API headings wrap after a dot. Only the HTML's
layout changes: the text, and what a reader copies, stay the same.
"""

from __future__ import annotations

import re

# Inline code: <code> with text only (highlighted and block code holds tags, and <pre> is skipped).
_INLINE_CODE = re.compile(r"<code>([^<]*)</code>")
_PRE = re.compile(r"(<pre\b.*?</pre>)", re.DOTALL)
_OBJECT_NAME = re.compile(r'(<span class="doc doc-object-name[^"]*">)([^<]*)(</span>)')


def _unbreakable_words(match: re.Match[str]) -> str:
    words = re.split(r"( +)", match.group(1))
    return "<code>" + "".join(w if not w.strip() else f'<span class="nobr">{w}</span>' for w in words) + "</code>"


def wrap_points(html: str) -> str:
    """Returns `html` with inline code's words unbreakable and API names breakable after their dots."""
    parts = _PRE.split(html)
    for i in range(0, len(parts), 2):  # the even parts are outside <pre>
        parts[i] = _INLINE_CODE.sub(_unbreakable_words, parts[i])
    html = "".join(parts)
    return _OBJECT_NAME.sub(lambda m: m.group(1) + m.group(2).replace(".", ".<wbr>") + m.group(3), html)


def on_page_content(html: str, **kwargs: object) -> str:
    """MkDocs's hook on each page's HTML body."""
    return wrap_points(html)

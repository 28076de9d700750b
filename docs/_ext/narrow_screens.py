"""An MkDocs hook: on a narrow screen, inline code and API headings wrap only where a reader expects.

Browsers break inline code after a hyphen or anywhere (Material's `word-break`), which splits
flags (`--cluster=slurm` as `-` / `-cluster=slurm`) and module names mid-word at 420 px. This
hook keeps each whitespace-separated word of inline code on one line (code with spaces still wraps
at its spaces) and lets the dotted names of the API headings wrap after a dot. The API pages'
tables (parameters, attributes, settings), and other pages' tables of `WIDE_TABLE` columns or
more, get each cell labelled with its column's header (`data-label`), so that
docs/stylesheets/extra.css can stack a row's cells on a narrow screen instead of scrolling
columns out of sight. Only a word too long for a narrow screen's line (more than `NARROW_WORD`
characters) gets break points, so on a wide screen and for every shorter word nothing breaks: after
a slash in a path; after a dot before a name in a dotted name (not a leading dot, and not in a path,
whose file's extension stays on); after a comma, an `=`, an opening parenthesis or `::`; and inside
a part between those that is longer than `LONG_PART` characters, after its underscores and
hyphens. The word's last part (a file's or a function's name) and a flag's name (`--flag`) stay
whole while a narrow screen's line holds them (`NARROW_LINE` characters); a longer one breaks after
its underscores and hyphens too, and a run without any (a hash) every `NARROW_LINE` characters, so
that no piece of inline code is wider than a 420-px screen. Only the HTML's layout changes: the
text, and what a reader copies, stay the same.
"""

from __future__ import annotations

import re

# Inline code: <code> with text only (highlighted and block code holds tags, and <pre> is skipped).
_INLINE_CODE = re.compile(r"<code>([^<]*)</code>")
_PRE = re.compile(r"(<pre\b.*?</pre>)", re.DOTALL)
_OBJECT_NAME = re.compile(r'(<span class="doc doc-object-name[^"]*">)([^<]*)(</span>)')
# A word of inline code longer than this may wrap on a narrow screen (a 420-px screen holds about 40
# characters of code after the text before it); shorter words never do.
NARROW_WORD = 32
# The characters of code a 420-px screen's line holds, in a list or a note too (about 8.4 px each): a
# word's last part or a flag's name up to this long stays whole, and no piece of inline code between
# its break points is longer.
NARROW_LINE = 40
# Where a long word may wrap: after a dot that follows a name and starts one (not a decimal point or a
# leading dot), a slash, a comma, an `=`, an opening parenthesis with arguments after it, `::`.
_SEPARATOR = re.compile(r"(?<=[\w)]\.)(?=[A-Za-z_])|(?<=[/,=])(?=.)|(?<=\()(?=[^)])|(?<=::)(?=.)")
# In a path, only after its slashes, commas and a test's `::` (`tests/test_x.py::test_y`): `digits.npz`
# keeps its extension.
_PATH_SEPARATOR = re.compile(r"(?<=[/,])(?=.)|(?<=::)(?=.)")
# A part (between separators) longer than this may also wrap after its underscores and hyphens.
LONG_PART = 24
_INNER = re.compile(r"(?<=[_-])(?=[^_-])")
# Outside the API pages, a table of this many columns or more is stacked on a narrow screen.
WIDE_TABLE = 4
# A table with a header row, and the cells of its rows.
_TABLE = re.compile(r"<table>(.*?)</table>", re.DOTALL)
_HEADER_CELL = re.compile(r"<th[^>]*>(.*?)</th>", re.DOTALL)
_ROW = re.compile(r"(<tr[^>]*>)(.*?)(</tr>)", re.DOTALL)
_CELL = re.compile(r"<td(?=[ >])")
_TAG = re.compile(r"<[^>]+>")
# The characters of an HTML entity (`&quot;`) stay together.
_ENTITY = re.compile(r"&[#\w]+;")


def _pieces(run: str) -> str:
    """`run` with a `<wbr>` every `NARROW_LINE` characters: a run with no separator (a hash) still fits."""
    return "<wbr>".join(run[i : i + NARROW_LINE] for i in range(0, len(run), NARROW_LINE))


def _break_points(word: str) -> str:
    """`word` with `<wbr>` where a narrow screen may wrap it (see the module docstring); entities kept whole."""
    entities = _ENTITY.findall(word)
    # Each entity stands in as one private-use character while the break points are placed.
    for i, entity in enumerate(entities):
        word = word.replace(entity, chr(0xE000 + i), 1)
    if len(word) > NARROW_WORD:
        path = "/" in word and not word.startswith("--")
        parts = (_PATH_SEPARATOR if path else _SEPARATOR).split(word)
        flag = word.startswith("--")

        def inner(index: int, part: str) -> str:
            # The last part and a flag's name stay whole while a narrow line holds them.
            whole = index == len(parts) - 1 or (flag and index == 0)
            if len(part) <= (NARROW_LINE if whole else LONG_PART):
                return part
            body = part.lstrip("-")  # never between a flag's leading hyphens and its name
            pieces = _INNER.split(body)
            pieces[0] = part[: len(part) - len(body)] + pieces[0]
            return "<wbr>".join(_pieces(piece) for piece in pieces)

        word = "<wbr>".join(inner(i, p) for i, p in enumerate(parts))
    for i, entity in enumerate(entities):
        word = word.replace(chr(0xE000 + i), entity, 1)
    return word


def _unbreakable_words(match: re.Match[str]) -> str:
    words = re.split(r"(\s+)", match.group(1))
    return (
        "<code>"
        + "".join(w if not w.strip() else f'<span class="nobr">{_break_points(w)}</span>' for w in words)
        + "</code>"
    )


def wrap_points(html: str) -> str:
    """Returns `html` with inline code's words unbreakable but at their separators, API names after their dots."""
    parts = _PRE.split(html)
    for i in range(0, len(parts), 2):  # the even parts are outside <pre>
        parts[i] = _INLINE_CODE.sub(_unbreakable_words, parts[i])
    html = "".join(parts)
    return _OBJECT_NAME.sub(lambda m: m.group(1) + m.group(2).replace(".", ".<wbr>") + m.group(3), html)


def _label_row(row: re.Match[str], labels: list[str]) -> str:
    cells = iter(labels)
    return row.group(1) + _CELL.sub(lambda m: f'<td data-label="{next(cells, "")}"', row.group(2)) + row.group(3)


def _label_table(table: re.Match[str], min_columns: int) -> str:
    body = table.group(1)
    labels = [_TAG.sub("", cell).strip().replace('"', "&quot;") for cell in _HEADER_CELL.findall(body)]
    if not labels or len(labels) < min_columns:
        return table.group(0)
    return '<table data-narrow="stack">' + _ROW.sub(lambda row: _label_row(row, labels), body) + "</table>"


def label_cells(html: str, min_columns: int = 1) -> str:
    """Returns `html` with each table of a header row of `min_columns` or more marked `data-narrow="stack"`,
    each of its cells labelled with its header."""
    return _TABLE.sub(lambda table: _label_table(table, min_columns), html)


def on_page_content(html: str, page: object = None, **kwargs: object) -> str:
    """MkDocs's hook on each page's HTML body: the API pages' tables and other wide ones get their cell labels."""
    url = getattr(page, "url", "") or ""
    return label_cells(wrap_points(html), 1 if url.startswith("api/") else WIDE_TABLE)

"""A mkdocs hook for the docs build: a page whose quoted figure differs from its record fails the build.

So does a measured figure with no comment on a page `figures.GUARDED` names.

Each figure a page quotes from a measurement carries `<!-- figure: RECORD KEY -->` right after it,
and each sample output `<!-- sample: RECORD KEY -->` on the line before it; `tools/figures.py`
holds the check and its convention, and docs/records/ the records.
"""

from __future__ import annotations

import importlib.util
import os
from typing import Any

from mkdocs.exceptions import PluginError

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_TOOL = os.path.join(_REPO, "tools", "figures.py")
_SPEC = importlib.util.spec_from_file_location("tfmp_docs_figures_check", _TOOL)
figures = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(figures)


def on_page_markdown(markdown: str, page: Any, **kwargs: Any) -> str:
    """Raises PluginError listing every figure and sample of the page that differs from its record or is unmarked."""
    path = f"docs/{page.file.src_path}"
    problems = figures.check_text(markdown, path, guard=figures.guarded(os.path.join(_REPO, path)))
    if problems:
        raise PluginError("Quoted figures differ from their records:\n" + "\n".join(map(str, problems)))
    return markdown

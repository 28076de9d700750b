"""Counts lines of code: lines holding a token other than a comment, less module, class and function docstrings.

    python3 tools/code_lines.py                 # the loss-scaling modules, each and together
    python3 tools/code_lines.py tfmp/trainers   # any files or folders

With no argument it counts the loss-scaling core: the top-level `tfmp/`
modules other than the precision, kernel, layer and helper ones
(`LOSS_SCALING_EXCLUDED`). Docstrings, comments and blank lines do not count;
a statement over several lines counts each of them. Each file's physical
line count is printed beside its code lines.
"""

from __future__ import annotations

import ast
import io
import os
import pathlib
import sys
import tokenize

# Top-level tfmp/ modules outside the loss-scaling core.
LOSS_SCALING_EXCLUDED = frozenset(
    {
        "__init__",
        "_cache",
        "_compat",
        "cpu_info",
        "cpu_kernels",
        "fit_logs",
        "float32_layers",
        "layers",
        "mixed_precision",
        "precision",
    }
)
_NOT_CODE = {
    tokenize.COMMENT,
    tokenize.NL,
    tokenize.NEWLINE,
    tokenize.INDENT,
    tokenize.DEDENT,
    tokenize.ENDMARKER,
}


def code_lines(source: str) -> int:
    """The lines of `source` that hold code: a token other than a comment, and not in a docstring."""
    docstrings: set[int] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                docstrings.update(range(first.lineno, first.end_lineno + 1))
    lines: set[int] = set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type not in _NOT_CODE:
            lines.update(range(token.start[0], token.end[0] + 1))
    return len(lines - docstrings)


def loss_scaling_modules(package: pathlib.Path) -> list[pathlib.Path]:
    """The loss-scaling core: `package`'s top-level modules outside `LOSS_SCALING_EXCLUDED`."""
    return sorted(path for path in package.glob("*.py") if path.stem not in LOSS_SCALING_EXCLUDED)


def main(arguments: list[str]) -> None:
    root = pathlib.Path(__file__).resolve().parent.parent
    paths = [pathlib.Path(a) for a in arguments] or loss_scaling_modules(root / "tfmp")
    files = [f for p in paths for f in (sorted(p.rglob("*.py")) if p.is_dir() else [p])]
    code = physical = 0
    for path in files:
        source = path.read_text()
        count, lines = code_lines(source), len(source.splitlines())
        code, physical = code + count, physical + lines
        print(f"{os.path.relpath(path)}: {count} lines of code, {lines} lines")
    print(f"total: {code} lines of code, {physical} lines, in {len(files)} files")


if __name__ == "__main__":
    main(sys.argv[1:])

"""Tests for tools/code_lines.py: what counts as a line of code, on sources whose count is known."""

import importlib.util
import pathlib

_PATH = pathlib.Path(__file__).resolve().parents[2] / "tools" / "code_lines.py"
_SPEC = importlib.util.spec_from_file_location("code_lines", _PATH)
code_lines = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(code_lines)

_SOURCE = '''"""A module docstring
over two lines."""

import os  # a comment after code counts its line


# a comment alone does not count
class Thing:
    """A class docstring."""

    def method(self):
        """A function docstring,

        over three lines."""
        text = """a string that is not a docstring
        counts each of its lines"""
        return os.path.join(
            text,
            "x",
        )
'''


def test_docstrings_comments_and_blank_lines_do_not_count_and_a_statement_counts_each_of_its_lines():
    # import, class, def, the two-line string, the four-line return.
    assert code_lines.code_lines(_SOURCE) == 1 + 1 + 1 + 2 + 4


def test_an_empty_module_and_one_of_only_a_docstring_have_no_code():
    assert code_lines.code_lines("") == 0
    assert code_lines.code_lines('"""Only this."""\n') == 0


def test_the_loss_scaling_core_is_the_top_level_modules_outside_the_excluded_ones(tmp_path):
    for name in ("loss_scale", "scaling", "precision", "__init__", "_compat"):
        (tmp_path / f"{name}.py").write_text("x = 1\n")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "tasks.py").write_text("x = 1\n")
    assert [p.name for p in code_lines.loss_scaling_modules(tmp_path)] == ["loss_scale.py", "scaling.py"]


def test_the_command_prints_each_file_and_the_total(tmp_path, capsys, monkeypatch):
    (tmp_path / "one.py").write_text(_SOURCE)
    monkeypatch.chdir(tmp_path)
    code_lines.main(["."])
    lines = capsys.readouterr().out.splitlines()
    assert lines == ["one.py: 9 lines of code, 20 lines", "total: 9 lines of code, 20 lines, in 1 files"]

"""README.md reads cleanly raw, installs before it quotes figures, and every page installs one way: from
the clone, in a virtual environment; no hint installs tfmp from an index, where tfmp is not."""

import pathlib
import re

_ROOT = pathlib.Path(__file__).resolve().parents[2]
_README = (_ROOT / "README.md").read_text()


def _prose_lines(text):
    """(line number, line) of the prose: outside fenced blocks, tables, headings and figure blocks."""
    fence = block = False
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if stripped.startswith("```"):
            fence = not fence
            continue
        if stripped.startswith("<!-- figures:"):
            block = True
        if fence or block or stripped.startswith(("|", "#")):
            block = block and stripped != "-->"
            continue
        yield number, line


def test_readme_has_no_figure_marker_inside_its_prose():
    inside = [n for n, line in _prose_lines(_README) if "<!-- figure:" in line]
    assert inside == []


def test_readme_prose_lines_are_at_most_120_characters():
    assert [(n, len(line)) for n, line in _prose_lines(_README) if len(line) > 120] == []


def test_readme_installs_before_it_quotes_figures():
    assert _README.index("## Installing") < _README.index("## What to expect")
    assert _README.index("## Installing") < _README.index("<!-- figures:")


def test_readme_keeps_the_install_and_test_commands_in_code_blocks():
    blocks = "\n".join(re.findall(r"```bash\n(.*?)```", _README, re.S))
    for command in (
        "python3 -m venv .venv && . .venv/bin/activate",
        'python3 -m pip install -e ".[test]" && python3 -m pytest -n 2',
        "python3 -m pytest -n 2 --dist worksteal -m slow",
    ):
        assert command in blocks


def _shipped_text():
    paths = [_ROOT / "README.md", *(_ROOT / "docs").rglob("*.md"), *(_ROOT / "tfmp").rglob("*.py")]
    paths += [*(_ROOT / "scripts").glob("*.py"), *(_ROOT / "examples").glob("*.py")]
    return {p: p.read_text() for p in paths}


def test_no_hint_installs_tfmp_from_an_index():
    # tfmp is not on PyPI: `pip install tfmp` fails today, and would install a stranger's package if
    # anyone registered the name. Extras come from the clone: pip install -e ".[plot]".
    index = re.compile(r"pip install\s+(?:-U\s+)?[\"']?tfmp(?:\[|[\"'\s]|$)", re.M)
    found = [
        f"{p.relative_to(_ROOT)}: {m.group()!r}" for p, text in _shipped_text().items() for m in index.finditer(text)
    ]
    assert found == []


def test_every_page_that_installs_makes_a_virtual_environment_first():
    for page in (_ROOT / "README.md", _ROOT / "docs" / "index.md", _ROOT / "docs" / "getting-started.md"):
        text = page.read_text()
        venv, install = text.find("python3 -m venv .venv"), text.find("pip install -e")
        assert 0 <= venv < install, page.name


def test_the_home_page_s_first_screen_says_what_tfmp_is_and_gives_the_two_commands():
    first = "\n".join((_ROOT / "docs" / "index.md").read_text().splitlines()[:25])
    assert "For people who" in first
    assert "python3 scripts/train_gan.py" in first and "python3 -m pytest -n 2" in first


def test_the_glossary_defines_the_words_the_reports_use():
    glossary = (_ROOT / "docs" / "glossary.md").read_text()
    defined = set(re.findall(r"^\*\*([^*]+?)[.*]", glossary, re.M))
    for word in ("Main job", "Arm", "Unit", "Floor", "Ceiling (kernel ceiling)", "Re-routing", "Units of the figures"):
        assert word in defined, (word, defined)


def test_no_user_guide_keeps_lab_notes():
    # Tried-and-dropped ideas and history live on the contributors' page (docs/measured-before.md).
    for page in sorted((_ROOT / "docs" / "guides").glob("*.md")):
        text = page.read_text()
        for lab in ("What did not help", "before re-routing", "at tfmp 4039883", "transcribed from", ", transcribed"):
            assert lab not in text, (page.name, lab)


def test_readme_and_the_performance_report_stay_short():
    # Detail belongs on the page it is about (the guides, the report's sections, Measured before).
    assert len(_README.splitlines()) <= 250
    assert len((_ROOT / "docs" / "PERFORMANCE.md").read_text().splitlines()) <= 300


def test_readme_counts_the_examples_it_lists():
    examples = sorted(p.name for p in (_ROOT / "examples").glob("*.py"))
    words = {4: "Four", 5: "Five", 6: "Six", 7: "Seven", 8: "Eight"}
    assert f"{words[len(examples)]} runnable scripts" in _README
    assert all(f"`{name}`" in _README for name in examples)

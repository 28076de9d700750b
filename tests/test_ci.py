"""CI runs the README's own install line and test commands, as written, in the environment the README makes.

A user follows README.md: a virtual environment, the install line, the test command. `.ci/run` must do exactly
that before it installs anything else, or a test that needs more than the README installs passes in CI and
fails for the user.
"""

import pathlib
import re

_ROOT = pathlib.Path(__file__).resolve().parents[1]


def _readme_commands(text: str) -> list[str]:
    """The command lines of README.md's bash blocks, in order."""
    blocks = re.findall(r"^```bash\n(.*?)^```", text, re.S | re.M)
    return [line for block in blocks for line in block.splitlines() if line.strip() and not line.startswith("#")]


def _one(commands: list[str], predicate, what: str) -> str:
    found = [line for line in commands if predicate(line)]
    assert len(found) == 1, f"README.md should give one {what}; found {found}"
    return found[0]


def readme_lines(text: str) -> dict[str, str]:
    """README.md's virtual environment, test install + test command, and slow command lines."""
    commands = _readme_commands(text)
    return {
        "venv": _one(commands, lambda line: " -m venv .venv" in line, "line that makes the virtual environment"),
        "test": _one(commands, lambda line: '".[test]"' in line and "pytest" in line, "install line and test command"),
        "slow": _one(commands, lambda line: "pytest" in line and "-m slow" in line, "slow command"),
    }


def ci_commands(text: str) -> list[str]:
    """.ci/run's command lines (comments and blank lines dropped), with a trailing `|| exit` taken off.

    `a && b || exit` is how a script under `set -e` runs the README's `a && b` and still stops when `a` fails.
    """
    lines = [line.strip() for line in text.splitlines()]
    return [re.sub(r" \|\| exit$", "", line) for line in lines if line and not line.startswith("#")]


def check(readme: str, ci: str) -> list[str]:
    """What keeps `ci` (a .ci/run) from running `readme`'s (a README.md's) lines as written, in its environment."""
    wanted = readme_lines(readme)
    commands = ci_commands(ci)
    problems = [
        f".ci/run does not run the README's {name} line as written: {line!r}"
        for name, line in wanted.items()
        if line not in commands
    ]
    if problems:
        return problems
    venv, test, slow = (commands.index(wanted[name]) for name in ("venv", "test", "slow"))
    if not venv < test < slow:
        problems.append(".ci/run should make the README's environment, then run its test line, then its slow line")
    before = [line for line in commands[:test] if "pip install" in line or "activate" in line]
    if before != [wanted["venv"]]:
        problems.append(f".ci/run installs or activates more than the README before its test command: {before}")
    for line in commands[test + 1 : slow]:
        if re.search(r"(^|\s)(\.|source) \S*activate|^python3 -m pip install", line):
            problems.append(f".ci/run changes the README's environment before its slow command: {line!r}")
    return problems


def test_ci_runs_the_readmes_install_line_and_test_commands_as_written():
    assert check((_ROOT / "README.md").read_text(), (_ROOT / ".ci" / "run").read_text()) == []


_README = """
```bash
python3 -m venv .venv && . .venv/bin/activate
```
```bash
python3 -m pip install -e ".[test]" && python3 -m pytest -n 2
```
```bash
python3 -m pytest -n 2 --dist worksteal -m slow
```
"""

_CI = """set -euo pipefail
python3 -m venv .venv && . .venv/bin/activate || exit
python3 -m pip install -e ".[test]" && python3 -m pytest -n 2 || exit
"$TOOLS/venv/bin/python" -m pip install -e ".[docs]"
python3 -m pytest -n 2 --dist worksteal -m slow
"""


def test_the_check_accepts_a_ci_that_runs_the_readme_as_written():
    assert check(_README, _CI) == []


def test_the_check_fails_a_ci_whose_install_line_differs_from_the_readmes():
    wider = _CI.replace('-e ".[test]" &&', '-e ".[test,docs,lint]" &&')
    assert check(_README, wider) == [
        ".ci/run does not run the README's test line as written: "
        "'python3 -m pip install -e \".[test]\" && python3 -m pytest -n 2'"
    ]


def test_the_check_fails_a_ci_that_installs_more_before_the_tests():
    more = _CI.replace("python3 -m pip install -e", "python3 -m pip install mkdocs\npython3 -m pip install -e", 1)
    assert check(_README, more) == [
        ".ci/run installs or activates more than the README before its test command: "
        "['python3 -m venv .venv && . .venv/bin/activate', 'python3 -m pip install mkdocs']"
    ]


def test_the_check_fails_a_ci_that_widens_the_readmes_environment_before_the_slow_tests():
    widened = _CI.replace('"$TOOLS/venv/bin/python" -m pip install', "python3 -m pip install")
    assert check(_README, widened) == [
        ".ci/run changes the README's environment before its slow command: 'python3 -m pip install -e \".[docs]\"'"
    ]


def test_the_check_fails_a_ci_without_the_readmes_virtual_environment():
    assert check(_README, _CI.replace("python3 -m venv .venv && . .venv/bin/activate || exit\n", "")) == [
        ".ci/run does not run the README's venv line as written: 'python3 -m venv .venv && . .venv/bin/activate'"
    ]

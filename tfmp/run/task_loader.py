"""Finding the object `--task=MODULE:NAME` names: importing the module, and naming what was found.

`tfmp.run.tasks.load` checks that the object is a Task; this module does the
rest, so that each mistake a user makes with the spec is one line about the
setting `task`: a missing module or file, a module that does not import (a
SyntaxError, an ImportError, with the file and line), and an object of the
wrong kind, named as what it is (`kind`).
"""

from __future__ import annotations

import importlib
import inspect
import os
import sys
import types
from typing import Any

import keras

from tfmp.run.config import ConfigError

__all__ = ["import_module", "kind", "task_error"]


def task_error(problem: str, spec: str) -> ConfigError:
    """A `ConfigError` about the `task` setting: `task: problem Received: task='spec'`."""
    return ConfigError(f": {problem}", "task", spec)


def _shown(path: str) -> str:
    """`path` relative to the current directory when it is under it (as a user types it), else absolute."""
    relative = os.path.relpath(path)
    return path if relative.startswith(os.pardir) else relative


def _failed_line(error: BaseException, module_file: str | None) -> tuple[str, int] | None:
    """(file, line) in the user's module where importing it raised `error`: its innermost frame there.

    Without the module's file (a dotted name), the outermost frame outside
    importlib and this module: the module being imported.
    """
    machinery = (os.path.dirname(os.path.abspath(importlib.__file__)) + os.sep, os.path.abspath(__file__))
    frames = [(frame.f_code.co_filename, line) for frame, line in _walk(error.__traceback__)]
    ours = [
        (name, line)
        for name, line in frames
        if not name.startswith("<frozen") and not os.path.abspath(name).startswith(machinery)
    ]
    if module_file is None and ours:
        module_file = ours[0][0]
    inside = [(name, line) for name, line in ours if os.path.abspath(name) == os.path.abspath(module_file or "")]
    return inside[-1] if inside else None


def _walk(tb: types.TracebackType | None):
    """(frame, line) of each traceback entry, outermost first."""
    while tb is not None:
        yield tb.tb_frame, tb.tb_lineno
        tb = tb.tb_next


def _one_line(text: str) -> str:
    """`text` with its whitespace (newlines included) collapsed, for a one-line message."""
    return " ".join(str(text).split())


def import_module(module_name: str, spec: str) -> types.ModuleType:
    """The module `module_name` (a dotted name on the path, or a .py file) of the task spec `spec`.

    A .py file is imported by its name from its folder (put first on
    `sys.path`), so that a fresh process (the benchmark's rows) imports it
    again.

    Raises:
        ConfigError: about the setting `task`, naming `spec`: for a missing
            file or module; for a module that does not import, with the file
            and line, a SyntaxError's message, or the module an ImportError
            could not import.
    """
    module_file = None
    if module_name.endswith(".py"):
        module_file = os.path.abspath(module_name)
        if not os.path.isfile(module_file):
            raise task_error(f"no such file {module_name!r}.", spec)
        directory, module_name = os.path.split(module_file[: -len(".py")])
        if directory not in sys.path:
            sys.path.insert(0, directory)
    try:
        return importlib.import_module(module_name)
    except SyntaxError as e:  # in the module, or in a module it imports: the file and line are the error's
        where = f"{_shown(e.filename)} line {e.lineno}" if e.filename else module_name
        raise task_error(f"{where}: {type(e).__name__}: {_one_line(e.msg)}.", spec) from None
    except ImportError as e:
        if isinstance(e, ModuleNotFoundError) and e.name and (module_name + ".").startswith(e.name + "."):
            raise task_error(
                f"no module {module_name!r} on the Python path (PYTHONPATH, or the current directory with "
                "python3 -m); give a module name or a path to a .py file.",
                spec,
            ) from None
        found = _failed_line(e, module_file)
        where = f"{_shown(found[0])} line {found[1]}" if found else module_name
        missing = f"; install {e.name!r} or fix the import" if isinstance(e, ModuleNotFoundError) else "; fix it"
        raise task_error(f"{where}: {type(e).__name__}: {_one_line(e.msg)}{missing}.", spec) from None


def _article(noun: str) -> str:
    return ("an " if noun[:1].lower() in "aeiou" else "a ") + noun


def kind(value: Any) -> str:
    """What `value` is, for a message: `"an int (42)"`, `"a Functional model (a keras.Model)"`, `"a class (Foo)"`."""
    if value is None:
        return "None"
    if isinstance(value, keras.Model):
        return f"{_article(type(value).__name__)} model (a keras.Model)"
    if inspect.isclass(value):
        return f"a class ({value.__name__})"
    if inspect.ismodule(value):
        return f"a module ({value.__name__})"
    if inspect.isroutine(value):
        return "a function"
    shown = repr(value)
    if isinstance(value, (bool, int, float, str)) and len(shown) <= 40:
        return f"{_article(type(value).__name__)} ({shown})"
    return _article(type(value).__name__)

"""Loading the task `--task=MODULE:NAME` names: `load`.

Each mistake a user makes with the spec is one line about the setting
`task`: a missing module or file, a module that does not import (a
SyntaxError, an ImportError, with the file and line), and an object of the
wrong kind, named as what it is (`kind`). A .py file is imported by path,
leaving `sys.path` as it was (`import_file`).
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.util
import inspect
import os
import sys
import types
from collections.abc import Iterator
from typing import Any

import keras

from tfmp.run.config import ConfigError
from tfmp.run.tasks import Task

__all__ = ["import_file", "import_files", "import_module", "imported_files", "kind", "load", "task_error"]

# The task files imported by path in this process: module name -> absolute path.
_FILES: dict[str, str] = {}


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


@contextlib.contextmanager
def _folder_on_path(directory: str) -> Iterator[None]:
    """`directory` first on `sys.path` while the block runs (so a task file imports its neighbours), then not."""
    sys.path.insert(0, directory)
    try:
        yield
    finally:
        sys.path.remove(directory)


def import_file(module_name: str, path: str) -> types.ModuleType:
    """The module `module_name` executed from the .py file `path`, kept in `sys.modules` under that name.

    Imported once: the same name from the same file is the module already
    imported. Its folder is on `sys.path` only while it imports. A fresh
    process (the benchmark's rows) gets the files the parent imported this
    way from `imported_files()`, and imports them again with this function.
    """
    loaded = sys.modules.get(module_name)
    if loaded is not None and os.path.abspath(getattr(loaded, "__file__", None) or "") == path:
        return loaded
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        with _folder_on_path(os.path.dirname(path)):
            spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[module_name]
        raise
    _FILES[module_name] = path
    return module


def imported_files() -> dict[str, str]:
    """`{module name: path}` of each task file `import_module` imported from a path in this process."""
    return dict(_FILES)


def import_files(files: dict[str, str]) -> None:
    """Imports each task file of `imported_files()` (another process's) under its module name."""
    for module_name, path in files.items():
        import_file(module_name, path)


def import_module(module_name: str, spec: str) -> types.ModuleType:
    """The module `module_name` (a dotted name on the path, or a .py file) of the task spec `spec`.

    A .py file is imported under its file's name (`import_file`), leaving
    `sys.path` as it was.

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
        module_name = os.path.basename(module_file)[: -len(".py")]
    try:
        if module_file is not None:
            return import_file(module_name, module_file)
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


_NAME_MUST_BE = (
    "NAME must be a tfmp.run.tasks.Task, a Task subclass (made with its default config), or a function "
    "taking no arguments that returns a Task"
)


def load(spec: str) -> Task:
    """The task `spec` names: `"MODULE:NAME"` (a module on the Python path, or a path to a .py file).

    This is what `tfmp-train --task=...` (and the benchmark, diagnose and
    parity commands) call. `NAME` may be a `Task`, a `Task` subclass (made
    with its default config), or a function taking no arguments that
    returns a `Task`.

    Args:
        spec: e.g. `"my_tasks:TEXT_MODEL"` or `"path/to/my_tasks.py:TEXT_MODEL"`.

    Returns:
        The task.

    Raises:
        ConfigError: for a spec without `:`, a missing module or file, a
            module that does not import (a SyntaxError or an ImportError:
            the file, the line and the error), a missing attribute, or an
            attribute of the wrong kind (named as what it is), about the
            setting `task`, naming `spec` and what NAME must be.
    """
    if not isinstance(spec, str) or spec.count(":") < 1 or not all(spec.rpartition(":")[::2]):
        raise task_error(
            "must be MODULE:NAME (a module on the Python path or a .py file, and the name of its task); "
            f"{_NAME_MUST_BE}.",
            spec,
        )
    module_name, _, name = spec.rpartition(":")
    module = import_module(module_name, spec)
    if not hasattr(module, name):
        found = sorted(k for k, v in vars(module).items() if isinstance(v, Task) and not k.startswith("_"))
        listed = f" It defines these tasks: {', '.join(found)}." if found else " It defines no Task."
        raise task_error(f"module {module.__name__!r} has no attribute {name!r}.{listed}", spec)
    value = getattr(module, name)
    if inspect.isclass(value):
        if not issubclass(value, Task):
            raise task_error(f"{name} is {kind(value)} that is not a Task subclass; {_NAME_MUST_BE}.", spec)
        if inspect.isabstract(value):
            missing = ", ".join(sorted(value.__abstractmethods__))
            raise task_error(f"{name} is an abstract Task subclass (it lacks {missing}); {_NAME_MUST_BE}.", spec)
        return value()
    if inspect.isroutine(value) or isinstance(value, functools.partial):
        try:
            inspect.signature(value).bind()
        except (TypeError, ValueError):
            raise task_error(f"{name} is a function that takes arguments; {_NAME_MUST_BE}.", spec) from None
        result = value()
        if not isinstance(result, Task):
            raise task_error(f"{name} is a function that returned {kind(result)}, not a Task; {_fix(result)}", spec)
        return result
    if not isinstance(value, Task):
        raise task_error(f"{name} is {kind(value)}, not a Task; {_fix(value)}", spec)
    return value


def _fix(value: Any) -> str:
    """What to do about a NAME that is (or returned) `value` rather than a Task: for a model, wrap its builder."""
    if isinstance(value, keras.Model):
        return (
            "give the function that builds the model to tfmp.run.tasks.SupervisedTask(model=..., train_data=..., "
            "loss=...) and name that task."
        )
    return f"{_NAME_MUST_BE}."

"""Tests for tfmp/_deprecated.py: one table of every moved, renamed or removed name, and one way each warns."""

import ast
import dataclasses
import importlib
import os
import warnings

import pytest

import tfmp
from tfmp import _deprecated

LIBRARY = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tfmp")


def _resolve(dotted):
    module, _, attribute = dotted.rpartition(".")
    return getattr(importlib.import_module(module), attribute)


@pytest.mark.parametrize("old", sorted(_deprecated.MOVED_NAMES))
def test_every_moved_name_is_its_new_object_with_one_warning_naming_the_new_place_and_the_version(old):
    module, _, attribute = old.rpartition(".")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # an old module path (tfmp.tasks) warns on its own: test_deprecated_modules
        module = importlib.import_module(module)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        value = getattr(module, attribute)
    assert value is _resolve(_deprecated.MOVED_NAMES[old])
    assert [str(w.message) for w in caught if w.category is DeprecationWarning] == [
        f"`{old}` is deprecated; use `{_deprecated.MOVED_NAMES[old]}`. It will be removed in tfmp 0.3."
    ]


def test_every_new_module_and_method_the_tables_name_exists():
    for new in _deprecated.MOVED_MODULES.values():
        importlib.import_module(new)
    import keras

    from tfmp.loss_scale import LossScaleOptimizer
    from tfmp.run.directories import Directories
    from tfmp.run.runner import RunResult
    from tfmp.run.tasks import Task

    # An instance where the attribute is set in __init__.
    lso = LossScaleOptimizer(keras.optimizers.SGD())
    owners = {"Task": Task, "RunResult": RunResult, "Directories": Directories, "LossScaleOptimizer": lso}
    for old, new in _deprecated.RENAMED_METHODS.items():
        owner, _, name = new.partition(".")
        assert old.partition(".")[0] == owner, old
        assert hasattr(owners[owner], name) or name in {f.name for f in dataclasses.fields(owners[owner])}, new


def test_every_renamed_argument_is_taken_under_its_new_name_and_its_old_keyword_is_kept():
    import inspect

    from tfmp.run import callbacks, diagnostics, shipped, tasks

    functions = {
        "ConsoleLogger": [callbacks.ConsoleLogger.__init__],
        "Summaries": [callbacks.Summaries.__init__],
        "GeneratorSamples": [callbacks.GeneratorSamples.__init__],
        "GradientDiagnostics": [callbacks.GradientDiagnostics.__init__],
        "ProfileSteps": [callbacks.ProfileSteps.__init__],
        "write_gradient_summaries": [diagnostics.write_gradient_summaries],
        "Task.callbacks": [tasks.Task.callbacks, shipped.GANTask.callbacks],
        "LossScaleOptimizer": [tfmp.LossScaleOptimizer.__init__],
    }
    assert sorted(functions) == sorted(old.partition("(")[0] for old in _deprecated.RENAMED_ARGUMENTS)
    for old, new in _deprecated.RENAMED_ARGUMENTS.items():
        name, _, argument = old.partition("(")
        assert new.startswith(f"{name}("), new
        for function in functions[name]:
            parameters = inspect.signature(function).parameters
            assert (
                new.partition("(")[2].removesuffix(")") in parameters and argument.removesuffix(")") not in parameters
            )
            assert function.__code__.co_name == "with_old_name", (old, function)  # `renamed_argument` keeps the old


def test_a_renamed_argument_warns_naming_the_new_one_and_refuses_both():
    @_deprecated.renamed_argument("Summaries(logdir)")
    def summaries(tensorboard_dir, route=None):
        return tensorboard_dir, route

    assert summaries("logs/run", route=len) == ("logs/run", len)
    with pytest.warns(DeprecationWarning) as caught:
        assert summaries(logdir="logs/run") == ("logs/run", None)
    assert [str(w.message) for w in caught] == [
        "`Summaries(logdir)` is deprecated; use `Summaries(tensorboard_dir)`. It will be removed in tfmp 0.3. "
        "Received: logdir='logs/run'"
    ]
    assert caught[0].filename == __file__  # blames the caller
    with pytest.raises(TypeError, match=r"Received: tensorboard_dir='a', logdir='b'"):
        summaries(tensorboard_dir="a", logdir="b")


def test_a_removed_argument_warns_naming_what_to_do_and_what_was_received():
    with pytest.warns(DeprecationWarning) as caught:
        _deprecated.warn("gradient_report(print_fn)", received="print_fn=<built-in function print>")
    assert str(caught[0].message) == (
        "`gradient_report(print_fn)` is deprecated and will be removed in tfmp 0.3: the report is returned: "
        "print str(gradient_report(...)) yourself. Received: print_fn=<built-in function print>"
    )


def test_a_renamed_value_warns_naming_the_value_to_use():
    assert _deprecated.message('precision="auto"').endswith('whose name is "hardware": use "hardware".')
    assert "tfmp 0.3" in _deprecated.message('precision="auto"')


def test_a_name_in_no_table_is_refused_naming_it():
    with pytest.raises(KeyError, match="'tfmp.nonsense' is in no table"):
        _deprecated.message("tfmp.nonsense")


def _module_getattrs():
    """(file, how) of each module-level `__getattr__` under tfmp/: "def" for a function, "assigned" otherwise."""
    found = []
    for folder, _, names in os.walk(LIBRARY):
        for name in names:
            if not name.endswith(".py"):
                continue
            path = os.path.join(folder, name)
            for node in ast.parse(open(path).read(), path).body:
                if isinstance(node, ast.FunctionDef) and node.name == "__getattr__":
                    found.append((os.path.relpath(path, LIBRARY), "def"))
                elif isinstance(node, ast.Assign) and any(
                    (isinstance(t, ast.Name) and t.id == "__getattr__")
                    or (isinstance(t, ast.Attribute) and t.attr == "__getattr__")
                    for t in node.targets
                ):
                    assert ast.unparse(node.value) == "_deprecated.module_getattr(__name__)", path
                    found.append((os.path.relpath(path, LIBRARY), "assigned"))
    return sorted(found)


def test_one_deprecation_hook_backed_by_one_table():
    """Every module that answers for deprecated names uses `module_getattr`; no module has a hook of its own."""
    found = _module_getattrs()
    assert [path for path, how in found if how == "def"] == []  # no lazy import behind a name
    assert sorted(path for path, how in found if how == "assigned") == [
        "__init__.py",
        os.path.join("_deprecated", "tasks.py"),  # tfmp.tasks: 0.1's shipped tasks
        "precision.py",
        os.path.join("trainers", "__init__.py"),
        os.path.join("trainers", "gan.py"),
    ]
    modules = {old.rpartition(".")[0] for old in _deprecated.MOVED_NAMES}
    assert modules == {"tfmp", "tfmp.precision", "tfmp.tasks", "tfmp.trainers", "tfmp.trainers.gan"}
    assert len([how for _, how in found if how == "assigned"]) == len(modules)

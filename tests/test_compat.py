"""Tests for tfmp/_compat.py: the private Keras/TensorFlow APIs tfmp relies on are all there, and only there."""

import ast
import os

import keras
import pytest

from tfmp import _compat

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIBRARY = os.path.join(ROOT, "tfmp")


def test_the_installed_keras_and_tensorflow_have_every_private_api_tfmp_uses():
    _compat.check()  # raises ImportError naming what is missing


def test_a_missing_private_api_is_named_with_what_it_was_for(monkeypatch):
    owner = next(c for c in keras.Model.__mro__ if "_make_function" in vars(c))  # Keras's TensorFlowTrainer
    monkeypatch.delattr(owner, "_make_function")
    with pytest.raises(ImportError) as error:
        _compat.check()
    message = str(error.value)
    assert "keras.Model._make_function (overridden: shape scalar step logs (1,) across workers" in message
    assert f"Keras {keras.__version__}" in message and "keras>=3.15,<3.16" in message
    assert "_symbolic_build" not in message  # only what is gone


def _private_uses(path):
    """(line, text) of each private name another module's object is asked for, and each private import."""
    tree = ast.parse(open(path).read(), path)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            base = node.value
            # Our own privates: self._x, cls._x, and module-level _helpers of tfmp modules.
            if isinstance(base, ast.Name) and base.id in ("self", "cls", "super"):
                continue
            if isinstance(base, ast.Name) and base.id in {"training", "callbacks", "checkpoint", "trainers",
                                                          "sys", "_compat", "os"}:
                continue
            found.append((node.lineno, ast.unparse(node)))
        if isinstance(node, ast.Attribute) and node.attr == "__internal__":
            found.append((node.lineno, ast.unparse(node)))
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            module = node.module if isinstance(node, ast.ImportFrom) else node.names[0].name
            if module and (module.startswith("keras.src") or module.startswith("tensorflow.python")):
                found.append((node.lineno, f"import {module}"))
    return sorted(found)


@pytest.mark.parametrize("module", sorted(f for f in os.listdir(LIBRARY) if f.endswith(".py") and f != "_compat.py"))
def test_no_other_library_module_touches_a_private_keras_or_tensorflow_api(module):
    assert _private_uses(os.path.join(LIBRARY, module)) == []


def test_the_checker_sees_private_uses(tmp_path):
    # The scan has teeth: each kind of private use is reported.
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import tensorflow as tf\n"
        "from tensorflow.python.ops import control_flow_util\n"
        "def f(layer, model):\n"
        "    self_like = layer._inbound_nodes\n"
        "    return tf.__internal__.distribute, model._flatten_layers(), self._ok\n"
    )
    assert [text for _, text in _private_uses(str(sample))] == [
        "import tensorflow.python.ops", "layer._inbound_nodes", "model._flatten_layers", "tf.__internal__"]

"""Tests for tfmp/_compat.py: the private Keras/TensorFlow APIs tfmp relies on are all there, and only there.

The scan covers the whole library: a private API is used only in the core's `tfmp/_compat.py` or the run
framework's `tfmp/run/_private_apis.py` (tested in tests/run/test_private_apis.py), and each holds only what
its half uses.
"""

import ast
import os

import keras
import pytest

from tfmp import _compat
from tfmp.run import _private_apis as run_private_apis

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


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


def test_a_functional_layers_inbound_nodes_are_its_calls():
    inputs = keras.Input((2,))
    dense = keras.layers.Dense(1)
    keras.Model(inputs, dense(inputs))
    (node,) = _compat.inbound_nodes(dense)
    assert node.input_tensors[0] is inputs
    assert run_private_apis.inbound_nodes is _compat.inbound_nodes  # the run framework's, re-exported


# Packages whose privates are tfmp's own: the library, its models (installed as tfmp.models) and the scripts.
OWN_PACKAGES = {"tfmp", "tfmp_scripts", "common"}
# Standard-library privates that are documented (sys._getframe, os._exit).
STDLIB_PRIVATES = {"sys", "os"}
SCANNED = ("tfmp", "models", "scripts")


def _is_private(name):
    return name.startswith("_") and not name.startswith("__")


def _own_names(tree):
    """Names bound in a module to tfmp's own objects: what it imports from tfmp (or the scripts), and defines."""
    names = set(STDLIB_PRIVATES)
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(
                (alias.asname or alias.name).split(".")[0]
                for alias in node.names
                if alias.name.split(".")[0] in OWN_PACKAGES
            )
        elif isinstance(node, ast.ImportFrom) and (node.level or node.module.split(".")[0] in OWN_PACKAGES):
            names.update(alias.asname or alias.name for alias in node.names)
    return names


def _is_own(node, own):
    """Whether `node` (the object asked for a private) is tfmp's own: self, cls, or a name bound to tfmp."""
    return isinstance(node, ast.Name) and (node.id in ("self", "cls") or node.id in own)


def _private_uses(path):
    """(line, text) of each private name another package's object is asked for (as an attribute, a keyword
    argument or a getattr string), and each private import."""
    tree = ast.parse(open(path).read(), path)
    own = _own_names(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _is_private(node.attr) and not _is_own(node.value, own):
            found.append((node.lineno, ast.unparse(node)))
        if isinstance(node, ast.Attribute) and node.attr == "__internal__":
            found.append((node.lineno, ast.unparse(node)))
        if isinstance(node, ast.Call):
            callee = node.func.value if isinstance(node.func, ast.Attribute) else node.func
            if not _is_own(callee, own):
                found += [
                    (kw.lineno, f"{ast.unparse(node.func)}({kw.arg}=...)")
                    for kw in node.keywords
                    if kw.arg and _is_private(kw.arg)
                ]
            if (
                isinstance(node.func, ast.Name)
                and node.func.id in ("getattr", "setattr", "hasattr", "delattr")
                and len(node.args) >= 2
                and isinstance(node.args[1], ast.Constant)
                and isinstance(node.args[1].value, str)
                and _is_private(node.args[1].value)
                and not _is_own(node.args[0], own)
            ):
                found.append((node.lineno, ast.unparse(node)))
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            module = node.module if isinstance(node, ast.ImportFrom) else node.names[0].name
            if module and (module.startswith("keras.src") or module.startswith("tensorflow.python")):
                found.append((node.lineno, f"import {module}"))
            elif isinstance(node, ast.ImportFrom) and not node.level and module.split(".")[0] not in OWN_PACKAGES:
                found += [
                    (node.lineno, f"from {module} import {alias.name}")
                    for alias in node.names
                    if _is_private(alias.name)
                ]
    return sorted(found)


def _scanned_files(root=ROOT):
    """Every .py file of the library (but `_compat.py` and `run/_private_apis.py`, where the private uses belong),
    the models and the scripts, subpackages included."""
    files = []
    for top in SCANNED:
        for directory, _, names in os.walk(os.path.join(root, top)):
            files += [os.path.relpath(os.path.join(directory, name), root) for name in names if name.endswith(".py")]
    return sorted(f for f in files if f not in COMPAT_FILES)


COMPAT_FILES = (os.path.join("tfmp", "_compat.py"), os.path.join("tfmp", "run", "_private_apis.py"))


def test_the_scan_finds_every_module_of_the_packages_and_their_subpackages(tmp_path):
    for path in (
        "tfmp/_compat.py",
        "tfmp/run/_private_apis.py",
        "tfmp/core.py",
        "tfmp/run/runner.py",
        "tfmp/run/later/deep/new.py",
        "models/gan.py",
        "scripts/train_gan.py",
        "scripts/data.txt",
        "tests/test_x.py",
    ):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text("")
    assert _scanned_files(str(tmp_path)) == [
        "models/gan.py",
        "scripts/train_gan.py",
        "tfmp/core.py",
        "tfmp/run/later/deep/new.py",
        "tfmp/run/runner.py",
    ]
    assert {"tfmp/run/runner.py", "models/gan.py", "scripts/train_gan.py"} <= set(_scanned_files())


@pytest.mark.parametrize("module", _scanned_files())
def test_no_other_library_module_touches_a_private_keras_or_tensorflow_api(module):
    assert _private_uses(os.path.join(ROOT, module)) == []


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
        "import tensorflow.python.ops",
        "layer._inbound_nodes",
        "model._flatten_layers",
        "tf.__internal__",
    ]


def test_the_checker_sees_private_keyword_arguments_and_names(tmp_path):
    # Private keywords, getattr strings and imported names of other packages are reported; tfmp's own are not.
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import tensorflow as tf\n"
        "from keras.optimizers import _private_optimizer\n"
        "from tfmp.run import callbacks as callbacks_lib\n"
        "def _helper(x, _depth=0):\n"
        "    return x\n"
        "def f(layer, s):\n"
        "    with tf.profiler.experimental.Trace('train', step_num=s, _r=1):\n"
        "        pass\n"
        "    _helper(1, _depth=2), callbacks_lib.StepTimer(1, _x=1), callbacks_lib._private, self.g(_y=1)\n"
        "    return getattr(layer, '_inbound_nodes'), getattr(layer, '__name__'), getattr(self, '_ok')\n"
    )
    assert [text for _, text in _private_uses(str(sample))] == [
        "from keras.optimizers import _private_optimizer",
        "tf.profiler.experimental.Trace(_r=...)",
        "getattr(layer, '_inbound_nodes')",
    ]


def _uses_of(names, files, layer="_compat"):
    """The names of `names` that some file of `files` asks a compatibility layer for (`<layer>.name`)."""
    text = "".join(open(os.path.join(ROOT, path)).read() for path in files)
    return {name for name in names if f"{layer}.{name}" in text}


# What a compatibility layer exports for its own checks, not for the code around it.
CHECKING = {"PRIVATE_APIS", "PrivateAPI", "check", "missing", "missing_error"}


def test_each_compatibility_layer_holds_only_what_its_half_of_tfmp_uses():
    core = [path for path in _scanned_files() if path.startswith("tfmp") and not path.startswith("tfmp/run/")]
    run = [path for path in _scanned_files() if path.startswith("tfmp/run/")]
    core_names = set(_compat.__all__) - CHECKING
    run_names = set(run_private_apis.__all__) - CHECKING
    assert _uses_of(core_names, core) == core_names
    assert _uses_of(run_names, run, "_private_apis") == run_names
    # The core needs none of the run framework's wrappers; the run framework reaches the core's through its own.
    assert _uses_of(run_names - core_names, core, "_private_apis") == set()
    assert [path for path in run if "from tfmp import _compat" in open(os.path.join(ROOT, path)).read()] == []

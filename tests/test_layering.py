"""The layers: the core (tfmp/*.py, tfmp/trainers/) never imports the run framework (tfmp.run) or the models,
and each layer of the run framework imports only from the layers below it.

`import tfmp` must stay light: a user of `tfmp.LossScaleOptimizer` or the
trainers gets neither the run framework nor the model zoo. The models may use
the core but not the run framework. Checked twice: by importing the core in
a fresh interpreter, and by scanning every import statement.
"""

import ast
import os

import pytest
from fresh_python import imports_in_order

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIBRARY = os.path.join(ROOT, "tfmp")
MODELS = os.path.join(ROOT, "models")


def test_importing_the_core_loads_neither_the_run_framework_nor_the_models():
    *_, tfmp_file, _ = imports_in_order()["tfmp"]
    modules = imports_in_order()["core"]
    assert tfmp_file == os.path.join(LIBRARY, "__init__.py")  # this checkout's core, not another install
    assert "tfmp.trainers.gan" in modules  # the import ran
    assert [m for m in modules if m.split(".")[:2] in (["tfmp", "run"], ["tfmp", "models"])] == []


# -- the static scan ----------------------------------------------------------------------------


def _imported_modules(path, package):
    """(line, absolute module name) of every module an import statement in `path` names.

    `package` is the package `path` belongs to, for relative imports. For
    `from X import a, b`, both `X` and `X.a`, `X.b` are listed, since `a` may
    be a submodule (`from tfmp import run`). A call of
    `importlib.import_module` (or `import_module`, or `__import__`) is an
    import too: with a constant name it lists that name; with any other
    argument it lists `"<computed>"`, which the layers below refuse outside
    the modules whose job it is (`DYNAMIC_IMPORTERS`).
    """
    tree = ast.parse(open(path).read(), path)
    found = []
    for node in ast.walk(tree):
        if _is_import_module_call(node):
            found.append((node.lineno, _import_module_target(node)))
        elif isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module
            found.append((node.lineno, module))
            found.extend((node.lineno, f"{module}.{alias.name}") for alias in node.names)
    return found


def _is_import_module_call(node):
    """Whether `node` calls `importlib.import_module`, `import_module` or `__import__`."""
    if not isinstance(node, ast.Call):
        return False
    f = node.func
    if isinstance(f, ast.Attribute):
        return f.attr == "import_module" and isinstance(f.value, ast.Name) and f.value.id == "importlib"
    return isinstance(f, ast.Name) and f.id in ("import_module", "__import__")


def _import_module_target(node):
    """The module an import call names: its first argument when a constant string, else "<computed>"."""
    if node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
        return node.args[0].value
    return "<computed>"


def _forbidden_imports(path, package, forbidden):
    """(line, module) of each import in `path` of a module in or under one of `forbidden`."""
    return sorted(
        {
            (line, module)
            for line, module in _imported_modules(path, package)
            if any(module == f or module.startswith(f + ".") for f in forbidden)
        }
    )


def _core_files():
    """(path, package) of every Python file of tfmp/ outside tfmp/run/."""
    files = []
    for folder, dirs, names in os.walk(LIBRARY):
        dirs[:] = [d for d in dirs if d not in ("run", "__pycache__")]
        package = "tfmp" if folder == LIBRARY else "tfmp." + ".".join(os.path.relpath(folder, LIBRARY).split(os.sep))
        files.extend((os.path.join(folder, name), package) for name in names if name.endswith(".py"))
    return sorted(files)


def test_the_scan_sees_the_whole_core():
    scanned = {os.path.relpath(path, LIBRARY) for path, _ in _core_files()}
    assert {
        "__init__.py",
        "loss_scale.py",
        os.path.join("_deprecated", "__init__.py"),
        os.path.join("trainers", "gan.py"),
    } <= scanned
    assert not any(path.startswith("run" + os.sep) for path in scanned)


@pytest.mark.parametrize("path, package", _core_files(), ids=[os.path.relpath(p, ROOT) for p, _ in _core_files()])
def test_no_core_module_imports_the_run_framework_or_the_models(path, package):
    assert _forbidden_imports(path, package, ("tfmp.run", "tfmp.models")) == []


@pytest.mark.parametrize("name", sorted(f for f in os.listdir(MODELS) if f.endswith(".py")))
def test_no_model_imports_the_run_framework(name):
    assert _forbidden_imports(os.path.join(MODELS, name), "tfmp.models", ("tfmp.run",)) == []


def test_the_scan_sees_every_form_of_import(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import tfmp.run.training\n"
        "import tfmp.run as run_lib\n"
        "from tfmp.run import config\n"
        "from tfmp.run.tasks import Task\n"
        "from tfmp import run\n"
        "from tfmp import precision, models\n"
        "from . import run\n"
        "from .run.data import load_digits\n"
        "def lazy():\n"
        "    from tfmp.run import data\n"
        "import tfmp.runner_like, tfmp.precision\n"  # not tfmp.run: a name that merely starts alike
        "from tfmp import running\n"
    )
    assert [line for line, _ in _forbidden_imports(str(sample), "tfmp", ("tfmp.run", "tfmp.models"))] == [
        1,
        2,
        3,
        3,
        4,
        4,
        5,
        6,
        7,
        8,
        8,
        10,
        10,
    ]
    # Relative imports are resolved against the file's package.
    relative = tmp_path / "relative.py"
    relative.write_text("from .. import run\nfrom ..run.data import load_digits\nfrom . import base\n")
    assert _forbidden_imports(str(relative), "tfmp.trainers", ("tfmp.run",)) == [
        (1, "tfmp.run"),
        (2, "tfmp.run.data"),
        (2, "tfmp.run.data.load_digits"),
    ]
    clean = tmp_path / "clean.py"
    clean.write_text("import tfmp\nfrom tfmp import precision, loss_scale\nfrom tfmp.trainers import base\n")
    assert _forbidden_imports(str(clean), "tfmp", ("tfmp.run", "tfmp.models")) == []


# -- the run framework's own layers ------------------------------------------------------------

# Bottom to top, as docs/guides/architecture.md draws them. A module of tfmp/run imports only from
# layers below its own (and from inside its own package), so an upward import fails here.
RUN_LAYERS = (
    ("_private_apis",),  # the private TensorFlow and Keras APIs the run framework uses
    (
        "autotune",
        "data",
        "determinism",
        "memory_meters",
        "preemption",
        "replica_state",
        "baseline",
        "options",
        "output",
        "reporting",
    ),  # leaves
    ("config",),  # the settings a run is checked against
    ("cluster",),  # where a multi-worker run finds its hosts
    ("distribute", "checkpoint", "diagnostics", "trainer_contract"),  # run services
    ("callbacks", "directories"),  # a run's side effects; where it writes, one run per directory
    ("tasks",),  # the public Task: what the user writes
    ("task_loader", "shipped", "trials"),  # finding what --task names; the shipped tasks; `auto`'s trial runs
    ("settled",),  # what a config settles to before the run's model is built
    ("runner",),  # one run
    ("training", "benchmark"),  # entry points
    ("parity",),  # paired runs of the entry points
)
RUN = os.path.join(LIBRARY, "run")


def _run_files():
    """(path, package, top-level name under tfmp/run) of every Python file of tfmp/run."""
    files = []
    for folder, dirs, names in os.walk(RUN):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        package = ".".join(["tfmp"] + os.path.relpath(folder, LIBRARY).split(os.sep))
        for name in names:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                files.append((path, package, os.path.relpath(path, RUN).split(os.sep)[0].removesuffix(".py")))
    return sorted(files)


def _layer(name):
    return next(i for i, layer in enumerate(RUN_LAYERS) if name in layer)


def _run_imports(path, package):
    """The top-level names under tfmp/run that `path` imports from ('runner' for tfmp.run.runner.Runner)."""
    return {
        module.split(".")[2]
        for _, module in _imported_modules(path, package)
        if module.split(".")[:2] == ["tfmp", "run"] and len(module.split(".")) > 2
    }


def test_every_run_module_has_one_layer():
    layered = [name for layer in RUN_LAYERS for name in layer]
    assert len(layered) == len(set(layered))
    assert {own for _, _, own in _run_files()} - {"__init__"} == set(layered)


@pytest.mark.parametrize("path, package, own", _run_files(), ids=[os.path.relpath(p, ROOT) for p, _, _ in _run_files()])
def test_each_run_module_imports_only_from_the_layers_below_it(path, package, own):
    imported = _run_imports(path, package)
    if own == "__init__":
        assert imported == set()  # importing tfmp.run loads nothing
        return
    upward = sorted(name for name in imported - {own} if _layer(name) >= _layer(own))
    assert upward == [], f"{own} (layer {_layer(own)}) imports {upward} from its own layer or above"


def test_the_layer_check_sees_an_upward_import(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text("from tfmp.run import runner, data\nimport tfmp.run.tasks\n")
    imported = _run_imports(str(sample), "tfmp.run")
    assert imported == {"runner", "data", "tasks"}
    assert sorted(n for n in imported if _layer(n) >= _layer("callbacks")) == ["runner", "tasks"]


def test_the_layer_check_sees_an_import_by_name(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import importlib\n"
        "def __getattr__(name):\n"
        "    return importlib.import_module('tfmp.run.shipped')\n"
        "def later():\n"
        "    return __import__('tfmp.run.runner')\n"
        "def named(module):\n"
        "    return importlib.import_module(module)\n"
    )
    assert _run_imports(str(sample), "tfmp.run") == {"shipped", "runner"}
    assert [m for _, m in _imported_modules(str(sample), "tfmp.run") if m == "<computed>"] == ["<computed>"]


# Modules whose job is to import a module named at run time, and why; no other module of tfmp/ computes the name
# of what it imports, so every import is one the scans above read.
DYNAMIC_IMPORTERS = {
    os.path.join("_deprecated", "__init__.py"): "an old name's new module, from the deprecation table",
    os.path.join("run", "task_loader.py"): "the user's MODULE of --task=MODULE:NAME",
}


def _library_files():
    """(path, package) of every Python file of tfmp/."""
    found = []
    for folder, dirs, names in os.walk(LIBRARY):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        package = ".".join(["tfmp"] + [p for p in os.path.relpath(folder, LIBRARY).split(os.sep) if p != "."])
        found.extend((os.path.join(folder, name), package) for name in names if name.endswith(".py"))
    return sorted(found)


def test_no_module_imports_a_name_it_computes_but_the_deprecation_table_and_the_task_loader():
    computed = sorted(
        os.path.relpath(path, LIBRARY)
        for path, package in _library_files()
        if any(module == "<computed>" for _, module in _imported_modules(path, package))
    )
    assert computed == sorted(DYNAMIC_IMPORTERS)


def test_no_two_modules_of_tfmp_share_a_name():
    """One name, one module: a reader who meets `nonfinite` or `_common` knows which file it is.

    tfmp 0.1's old paths in `_deprecated/` are named for the modules they stand for, so they are left out.
    """
    names = {}
    for path, _ in _library_files():
        relative = os.path.relpath(path, LIBRARY)
        if relative.startswith("_deprecated" + os.sep) or os.path.basename(path) == "__init__.py":
            continue
        names.setdefault(os.path.basename(path), []).append(relative)
    assert {name: paths for name, paths in names.items() if len(paths) > 1} == {}


# -- the old import paths ----------------------------------------------------------------------


def test_an_old_import_path_is_the_new_module_with_a_deprecation_warning():
    same, _, messages = imports_in_order()["old_paths"]["training"]
    assert same
    assert [m for m in messages if "tfmp.run.training" in m] == [
        "`tfmp.training` moved to `tfmp.run.training` in tfmp 0.2; import it from there. "
        "The old path will be removed in tfmp 0.3."
    ]

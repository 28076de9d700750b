"""Code run in a fresh interpreter, for tests of what importing tfmp loads or installs."""

import functools
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The core: what `import tfmp` may load, and nothing of the run framework or the models.
CORE_MODULES = (
    "tfmp",
    "tfmp.precision",
    "tfmp.float32_layers",
    "tfmp.loss_scale",
    "tfmp.scaling",
    "tfmp.optimizers",
    "tfmp.trainers",
    "tfmp.transaction",
    "tfmp.fit_logs",
    "tfmp.layers",
    "tfmp.mixed_precision",
)


def run_json(code):
    """Runs `code` in a fresh interpreter at the checkout's root; returns its last stdout line, parsed as JSON."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@functools.cache
def imports_in_order():
    """What one fresh interpreter loads as it imports tfmp layer by layer, lightest first, and what it warns.

    A fresh interpreter starts TensorFlow (about 10 s on 2 busy cores), so the
    tests of what an import loads share this one, once per test process. Each
    step lists the `tfmp` modules loaded so far: modules are only ever added,
    so a module that no step may load is absent from every step before it too.

    Returns:
        A dict: "tfmp" (after `import keras, tensorflow` then `import tfmp`):
        [meta_path unchanged, path_hooks unchanged, tfmp.__file__, modules];
        "core" (after importing `CORE_MODULES`): modules; "tfmp.run.config":
        modules; "tfmp.run.tasks": [hasattr(tasks, "GANTask"), modules];
        "old_paths": for each name of `tfmp._deprecated.MOVED`, [the old path is
        the new module, `tfmp.<name>` is it, the DeprecationWarnings its import gave].
    """
    return run_json(
        "import importlib, json, sys, warnings\n"
        "def loaded():\n"
        "    return sorted(m for m in sys.modules if m.split('.')[0] == 'tfmp')\n"
        "report = {}\n"
        "import keras, tensorflow\n"  # what they install is theirs
        "finders, hooks = list(sys.meta_path), list(sys.path_hooks)\n"
        "import tfmp\n"
        "report['tfmp'] = [sys.meta_path == finders, sys.path_hooks == hooks, tfmp.__file__, loaded()]\n"
        f"for name in {CORE_MODULES!r}:\n"
        "    importlib.import_module(name)\n"
        "report['core'] = loaded()\n"
        "import tfmp.run.config\n"
        "report['tfmp.run.config'] = loaded()\n"
        "import tfmp.run.tasks as tasks\n"
        "report['tfmp.run.tasks'] = [hasattr(tasks, 'GANTask'), loaded()]\n"
        "from tfmp import _deprecated\n"
        "report['old_paths'] = {}\n"
        "for name in _deprecated.MOVED:\n"
        "    with warnings.catch_warnings(record=True) as caught:\n"
        "        warnings.simplefilter('always')\n"
        "        old = importlib.import_module('tfmp.' + name)\n"
        "    new = importlib.import_module(_deprecated.MOVED_MODULES['tfmp.' + name])\n"
        "    report['old_paths'][name] = [old is new, getattr(tfmp, name) is new,\n"
        "                                 [str(w.message) for w in caught if w.category is DeprecationWarning]]\n"
        "print(json.dumps(report))\n"
    )

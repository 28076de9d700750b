"""Old import paths of modules that moved in tfmp 0.2, kept working with a warning.

tfmp 0.1 kept the run framework beside the core (`tfmp.training`,
`tfmp.callbacks`, ...). In 0.2 it lives in `tfmp.run`. `import tfmp.training`
still works: this folder holds one small module per old name, and `tfmp`
adds the folder to its own `__path__`, so the ordinary import system finds
`tfmp.training` here. Each module calls `alias`, which imports
`tfmp.run.training`, binds that module object to the old name, and warns
with the new path. Nothing is installed in `sys.meta_path` or
`sys.path_hooks`, and `import tfmp` loads none of these modules, so the run
framework stays unloaded until an old name is imported.
"""

from __future__ import annotations

import importlib
import os
import sys
import warnings

# The folder `tfmp.__path__` ends with, so that `tfmp.<old name>` resolves to a module here.
FOLDER = os.path.dirname(os.path.abspath(__file__))

# The modules of the run framework, moved in 0.2: `tfmp.<name>` is `tfmp.run.<name>`.
MOVED = (
    "autotune",
    "benchmark",
    "callbacks",
    "checkpoint",
    "config",
    "data",
    "diagnostics",
    "distribute",
    "memory",
    "parity",
    "preemption",
    "reporting",
    "rundir",
    "runner",
    "tasks",
    "training",
)


def alias(old_name: str) -> None:
    """Makes the module being imported as `old_name` (`tfmp.training`) the module of its new name.

    Called from the body of the old name's module. The import system hands
    the importer whatever `sys.modules` holds once that body has run, so
    `import tfmp.training` gives the `tfmp.run.training` module object
    itself, and both names stay the same module.

    Args:
        old_name: `__name__` of the calling module, `tfmp.<name>` with
            `<name>` one of `MOVED`.

    Raises:
        ValueError: for a name that is not one of `MOVED`.
    """
    name = old_name.rsplit(".", 1)[-1]
    if name not in MOVED:
        raise ValueError(f"{old_name!r} is not an old path of tfmp: expected tfmp.<one of {', '.join(MOVED)}>")
    new_name = f"tfmp.run.{name}"
    warnings.warn(
        f"`tfmp.{name}` moved to `{new_name}` in tfmp 0.2; import it from there. "
        f"The old path will be removed in tfmp 0.3.",
        DeprecationWarning,
        stacklevel=3,  # the import statement (importlib's own frames are skipped)
    )
    sys.modules[old_name] = importlib.import_module(new_name)

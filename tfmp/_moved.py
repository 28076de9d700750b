"""Old import paths of modules that moved in tfmp 0.2, kept working with a warning.

tfmp 0.1 kept the run framework beside the core (`tfmp.training`,
`tfmp.callbacks`, ...). In 0.2 it lives in `tfmp.run`. `import tfmp.training`
still works: it imports `tfmp.run.training`, binds the same module object to
the old name, and warns once with the new path. The alias is resolved only when
the old name is imported, so `import tfmp` loads nothing of the run framework.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from types import ModuleType

# Old name -> new name. The modules of the run framework, moved in 0.2.
MOVED = {
    f"tfmp.{name}": f"tfmp.run.{name}"
    for name in (
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
}


class _AliasLoader(importlib.abc.Loader):
    def __init__(self, new_name: str):
        self._new_name = new_name

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None  # a placeholder; exec_module replaces it in sys.modules

    def exec_module(self, module: ModuleType) -> None:
        warnings.warn(
            f"`{module.__name__}` moved to `{self._new_name}` in tfmp 0.2; import it from there. "
            f"The old path will be removed in tfmp 0.3.",
            DeprecationWarning,
            stacklevel=2,
        )
        # importlib returns whatever sys.modules holds after exec_module, so the
        # old name and the new one are the same module object.
        sys.modules[module.__name__] = importlib.import_module(self._new_name)


class _MovedModuleFinder(importlib.abc.MetaPathFinder):
    """Finds `tfmp.<old name>` for the modules in `MOVED`, and nothing else."""

    def find_spec(self, fullname, path=None, target=None):  # noqa: D102 (importlib protocol)
        new_name = MOVED.get(fullname)
        if new_name is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, _AliasLoader(new_name))


def install() -> None:
    """Adds the finder once (idempotent across reloads of `tfmp`)."""
    if not any(isinstance(finder, _MovedModuleFinder) for finder in sys.meta_path):
        sys.meta_path.append(_MovedModuleFinder())

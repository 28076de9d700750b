"""A griffe extension for the docs build: `models/` as `tfmp.models`.

setup.cfg installs the top-level `models/` folder as `tfmp.models`
(`package_dir`). Griffe reads packages from their folders, where `tfmp/`
has no `models/`, so `::: tfmp.models.gan` would not be found. This attaches
each module of `models/` to the `tfmp` package while griffe visits it, so the
API pages and cross-references use the installed names.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import griffe


class TfmpModels(griffe.Extension):
    """Attaches the modules of `<repo>/models/` to `tfmp` as `tfmp.models`."""

    def on_module_members(self, *, node: Any, mod: griffe.Module, agent: Any, **kwargs: Any) -> None:
        if mod.path != "tfmp" or mod.filepath is None or isinstance(mod.filepath, list):
            return
        folder = Path(mod.filepath).parent.parent / "models"
        if not (folder / "__init__.py").is_file():
            raise FileNotFoundError(f"tfmp.models: no package at {folder}")
        package = self._visit("models", folder / "__init__.py", mod, agent)
        for path in sorted(folder.glob("*.py")):
            if path.stem != "__init__":
                self._visit(path.stem, path, package, agent)

    @staticmethod
    def _visit(name: str, path: Path, parent: griffe.Module, agent: Any) -> griffe.Module:
        code = path.read_text(encoding="utf-8")
        if agent.lines_collection is not None:
            agent.lines_collection[path] = code.splitlines(keepends=False)
        module = griffe.visit(
            name,
            filepath=path,
            code=code,
            extensions=agent.extensions,
            parent=parent,
            docstring_parser=agent.docstring_parser,
            docstring_options=agent.docstring_options,
            lines_collection=agent.lines_collection,
            modules_collection=agent.modules_collection,
        )
        parent.set_member(name, module)
        return module

"""Old import paths of modules that moved in tfmp 0.2, kept working with a warning until tfmp 0.3.

tfmp 0.1 kept the run framework beside the core (`tfmp.training`,
`tfmp.callbacks`, ...). In 0.2 it lives in `tfmp.run`. `import tfmp.training`
still works: this folder holds one small module per old path
(`tfmp._deprecated.MOVED_MODULES`), and `tfmp` adds the folder to its own
`__path__`, so the ordinary import system finds `tfmp.training` here. Each
module calls `tfmp._deprecated.alias`, which imports the module it is now,
binds that module object to the old name, and warns with the new path.
Nothing is installed in `sys.meta_path` or `sys.path_hooks`, and
`import tfmp` loads none of these modules, so the run framework stays
unloaded until an old name is imported.
"""

from __future__ import annotations

import os

from tfmp._deprecated import MOVED_MODULES, alias

__all__ = ["FOLDER", "MOVED", "alias"]

# The folder `tfmp.__path__` ends with, so that `tfmp.<old name>` resolves to a module here.
FOLDER = os.path.dirname(os.path.abspath(__file__))

# The old names, `tfmp.<name>`, that have a module here.
MOVED = tuple(sorted(old.rpartition(".")[2] for old in MOVED_MODULES))

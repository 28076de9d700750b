"""`tfmp.tasks`: tfmp 0.1's path of `tfmp.run.tasks`, with a DeprecationWarning.

tfmp 0.1's module also held the shipped tasks (`tfmp.tasks.GANTask`, ...),
which live in `tfmp.run.shipped` now: through this old path they are found
by `MOVED_NAMES`, each with its warning. `tfmp.run.tasks` itself holds none
of them and imports nothing above it.
"""

import sys

from tfmp import _deprecated

_deprecated.alias(__name__)
sys.modules[__name__].__getattr__ = _deprecated.module_getattr(__name__)

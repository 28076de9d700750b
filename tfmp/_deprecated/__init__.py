"""Every public name tfmp moved, renamed or removed, in one table, and the one way each of them warns.

Before 1.0 a minor version may change the API; a name that changes keeps
working for one release with a `DeprecationWarning` that names its new place
and the version that removes it. The table says which:

* `MOVED_MODULES`: module paths of tfmp 0.1 (`tfmp.training`), each now a
  module of the run framework. This package's folder holds one tiny module
  per old path and `tfmp` adds the folder to its own `__path__`, so that
  `import tfmp.training` is found by the ordinary import system: nothing is
  installed in `sys.meta_path` or `sys.path_hooks`, and `import tfmp` loads
  none of those modules. Each calls `alias`.
* `MOVED_NAMES`: attributes reached through a module's `__getattr__`
  (`tfmp.parse_loss_scale`, `tfmp.trainers.SEED_GAN`). A module with such
  names sets `__getattr__ = module_getattr(__name__)` (for `tfmp.tasks`, its
  alias module here sets it); nothing else in the package answers for a
  deprecated name.
* `RENAMED_METHODS` and `REMOVED_ARGUMENTS`: a method's or attribute's old
  name and a documented argument that is gone; the code keeping them (a
  method, or a property under the old name) calls `warn`. An attribute's
  property can be `renamed_attribute(old)`.
* `RENAMED_ARGUMENTS`: an argument's old keyword (`Summaries(logdir=...)`);
  the function that takes it under its new name is decorated with
  `renamed_argument`, which warns and passes the value on.
* `REMOVED_CONFIG_KEYS`: a setting an earlier tfmp wrote into a saved config
  and this one no longer has; `from_config` drops it with
  `without_removed_keys`, which says so when it was on.
* `RENAMED_VALUES`: an argument's value whose meaning has another name now
  (`precision="auto"` outside a run); the function reading it calls `warn`.
* `CHANGED_MEANINGS`: a call that still runs but does something else now
  (`tfmp.LossScaleOptimizer.get_unscaled_gradients`); the method calls
  `warn`, which issues a `FutureWarning` for these: code that goes on with
  another meaning must hear of it, and Python shows a `FutureWarning` by
  default (a `DeprecationWarning` only in `__main__`), as NumPy and pandas
  warn of changed behaviour.

```python
warn("Task.replace")   # DeprecationWarning: `Task.replace` is deprecated; use `Task.with_config` ...
```
"""

from __future__ import annotations

import functools
import importlib
import os
import sys
import warnings
from collections.abc import Callable
from typing import Any

__all__ = [
    "FOLDER",
    "CHANGED_MEANINGS",
    "MOVED",
    "MOVED_MODULES",
    "MOVED_NAMES",
    "REMOVED_ARGUMENTS",
    "REMOVED_CONFIG_KEYS",
    "REMOVED_IN",
    "RENAMED_ARGUMENTS",
    "RENAMED_METHODS",
    "RENAMED_VALUES",
    "alias",
    "message",
    "module_getattr",
    "renamed_argument",
    "renamed_attribute",
    "warn",
    "without_removed_keys",
]

# The release that removes every name below.
REMOVED_IN = "0.3"

_RUN_MODULES = (
    "autotune",
    "benchmark",
    "callbacks",
    "checkpoint",
    "config",
    "data",
    "diagnostics",
    "distribute",
    "parity",
    "preemption",
    "reporting",
    "runner",
    "tasks",
    "training",
)

# tfmp 0.1's module paths: old dotted path -> the module it is now.
MOVED_MODULES: dict[str, str] = {
    **{f"tfmp.{name}": f"tfmp.run.{name}" for name in _RUN_MODULES},
    "tfmp.memory": "tfmp.run.memory_meters",
    "tfmp.rundir": "tfmp.run.directories",
}

# The folder `tfmp.__path__` ends with, so that `tfmp.<old name>` resolves to a module here.
FOLDER = os.path.dirname(os.path.abspath(__file__))

# The old names, `tfmp.<name>`, that have a module here.
MOVED = tuple(sorted(old.rpartition(".")[2] for old in MOVED_MODULES))

# What `tfmp.precision` held in 0.1 and `tfmp.float32_layers` holds now.
_FLOAT32_LAYER_NAMES = (
    "FLOAT32_LAYERS_AUTO",
    "FLOAT32_LAYERS_NONE",
    "float32_copy",
    "keep_float32",
    "layer_paths",
    "resolve_float32_layers",
)

# What `tfmp.tasks` held in 0.1 and `tfmp.run.shipped` holds now.
_SHIPPED_TASK_NAMES = ("ClassifierTask", "GANTask", "resnet50_task", "task_for")

# Attributes that moved or were renamed: old dotted path -> new dotted path.
MOVED_NAMES: dict[str, str] = {
    "tfmp.ClassifierTrainer": "tfmp.Trainer",
    "tfmp.trainers.ClassifierTrainer": "tfmp.trainers.Trainer",
    "tfmp.canonical_precision": "tfmp.precision.canonical_precision",
    "tfmp.resolve_jit_compile": "tfmp.precision.resolve_jit_compile",
    "tfmp.parse_loss_scale": "tfmp.optimizers.parse_loss_scale",
    "tfmp.trainers.SEED_GAN": "tfmp.trainers.TUTORIAL_GAN",
    "tfmp.trainers.SeedGANTraining": "tfmp.trainers.TutorialGANTraining",
    "tfmp.trainers.gan.SEED_GAN": "tfmp.trainers.TUTORIAL_GAN",
    "tfmp.trainers.gan.SeedGANTraining": "tfmp.trainers.TutorialGANTraining",
    **{f"tfmp.precision.{name}": f"tfmp.float32_layers.{name}" for name in _FLOAT32_LAYER_NAMES},
    # tfmp 0.1's tfmp.tasks held the shipped tasks; tfmp/_deprecated/tasks.py answers for them.
    **{f"tfmp.tasks.{name}": f"tfmp.run.shipped.{name}" for name in _SHIPPED_TASK_NAMES},
}

# Methods renamed: old qualified name -> new one.
RENAMED_METHODS: dict[str, str] = {
    "Task.replace": "Task.with_config",
    "Task.cpu_bfloat16_float32_layers": "Task.auto_float32_layers",
    "RunResult.images_per_sec": "RunResult.throughput",
    "RunResult.logdir": "RunResult.tensorboard_dir",
    "RunResult.jit_compile": "RunResult.xla",
    "Directories.writes": "Directories.tensorboard_dir",
    "LossScaleOptimizer.jit_compile": "LossScaleOptimizer.xla_update",
}

# Documented arguments removed: "function(argument)" -> what to do instead.
REMOVED_ARGUMENTS: dict[str, str] = {
    **{
        f"{report}(print_fn)": f"the report is returned: print str({report}(...)) yourself"
        for report in ("tensor_core_report", "float32_output_report", "gradient_report", "diagnose")
    },
    "ClassifierTask(cpu_bfloat16_float32_layers)": "use auto_float32_layers, the attribute float32_layers='auto' reads",
    "MixedPrecisionTrainer.optimize(forward())": (
        "`forward` takes the step, `forward(step)`, and hands its metric updates to `step.unless_skipped`, "
        "so that a skipped step's loss stays out of them"
    ),
}

# Arguments renamed: "function(old)" -> "function(new)". A folder argument is named for the folder it is
# (architecture guide, "One name per thing"): the config's `logdir` is the parent of every run's directory.
RENAMED_ARGUMENTS: dict[str, str] = {
    "ConsoleLogger(logdir)": "ConsoleLogger(run_dir)",
    "Summaries(logdir)": "Summaries(tensorboard_dir)",
    "GeneratorSamples(logdir)": "GeneratorSamples(summary_dir)",
    "GradientDiagnostics(logdir)": "GradientDiagnostics(tensorboard_dir)",
    "ProfileSteps(logdir)": "ProfileSteps(tensorboard_dir)",
    "write_gradient_summaries(logdir)": "write_gradient_summaries(tensorboard_dir)",
    "Task.callbacks(run_dir)": "Task.callbacks(tensorboard_dir)",
    "LossScaleOptimizer(jit_compile)": "LossScaleOptimizer(xla_update)",
}

# Settings of a saved config that are gone: "Class.key" -> what is done instead. Only a config of an earlier tfmp
# holds them (the constructor refuses them); loading one drops them, and says so when the setting was on.
REMOVED_CONFIG_KEYS: dict[str, str] = {
    # Earlier releases had an opt-in speculative update, with the same results as the gated one.
    "LossScaleOptimizer.speculative_update": (
        "the gated update (waiting for the finite check, with the same results) is used"
    ),
}

# Argument values renamed: "argument=value" -> why, and the value to use instead.
RENAMED_VALUES: dict[str, str] = {
    'precision="auto"': (
        "outside a run (set_precision, precision_scope, resolve_precision, wrap_optimizer) nothing can be "
        'measured, so "auto" applies the compute-capability rule, whose name is "hardware": use "hardware"'
    ),
}


# Calls of tfmp 0.1 that still run and mean something else: "Class.method" -> what it does now, and what to use.
CHANGED_MEANINGS: dict[str, str] = {
    "LossScaleOptimizer.get_scaled_loss": (
        "is `scale_loss` on tfmp.LossScaleOptimizer, Keras 3's class, whose apply() and apply_gradients() divide "
        "the gradients by the loss scale. For tf.keras 2's flow, where apply_gradients() applies them as given, "
        "construct tfmp.mixed_precision.LossScaleOptimizer"
    ),
    "LossScaleOptimizer.get_unscaled_gradients": (
        "returns the gradients as given, still scaled, on tfmp.LossScaleOptimizer, Keras 3's class: its apply() "
        "and apply_gradients() divide them by the loss scale, so the update is right, but code that reads or "
        "clips them sees them scaled. Hand them to apply_gradients() unchanged, or construct "
        "tfmp.mixed_precision.LossScaleOptimizer (tf.keras 2's class: get_unscaled_gradients() divides, "
        "apply_gradients() applies as given)"
    ),
}


def message(old: str) -> str:
    """The warning for `old`, a key of one of the tables: what to use instead, and when `old` goes."""
    if old in MOVED_MODULES:
        return (
            f"`{old}` moved to `{MOVED_MODULES[old]}` in tfmp 0.2; import it from there. "
            f"The old path will be removed in tfmp {REMOVED_IN}."
        )
    if old in MOVED_NAMES:
        return f"`{old}` is deprecated; use `{MOVED_NAMES[old]}`. It will be removed in tfmp {REMOVED_IN}."
    if old in RENAMED_METHODS or old in RENAMED_ARGUMENTS:
        new = RENAMED_METHODS.get(old) or RENAMED_ARGUMENTS[old]
        return f"`{old}` is deprecated; use `{new}`. It will be removed in tfmp {REMOVED_IN}."
    if old in REMOVED_ARGUMENTS:
        return f"`{old}` is deprecated and will be removed in tfmp {REMOVED_IN}: {REMOVED_ARGUMENTS[old]}."
    if old in RENAMED_VALUES:
        return f"`{old}` is deprecated and will be removed in tfmp {REMOVED_IN}: {RENAMED_VALUES[old]}."
    if old in CHANGED_MEANINGS:
        return f"`{old}` {CHANGED_MEANINGS[old]}. It will be removed in tfmp {REMOVED_IN}."
    raise KeyError(f"{old!r} is in no table of tfmp._deprecated")


def warn(old: str, received: str = "", stacklevel: int = 3) -> None:
    """Issues the `DeprecationWarning` for `old` (a key of a table), with what the caller received if given.

    A `FutureWarning` for a key of `CHANGED_MEANINGS`: that code runs on, meaning something else.

    Args:
        old: The deprecated name, as the tables key it.
        received: Appended as `Received: ...` (e.g. the value of a removed argument).
        stacklevel: Frames above the caller of `warn` to blame (default: the caller's caller).
    """
    text = message(old) + (f" Received: {received}" if received else "")
    category = FutureWarning if old in CHANGED_MEANINGS else DeprecationWarning
    warnings.warn(text, category, stacklevel=stacklevel)


def _argument(call: str) -> str:
    """`logdir` of `"Summaries(logdir)"`."""
    return call.partition("(")[2].removesuffix(")")


def renamed_argument(old: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Keeps the old keyword of a renamed argument working, with its warning.

    `old` is a key of `RENAMED_ARGUMENTS`; the decorated function takes the
    argument under its new name, at the same position, so a positional call
    is unchanged:

    ```python
    @_deprecated.renamed_argument("Summaries(logdir)")
    def __init__(self, tensorboard_dir: str, ...): ...
    ```

    `Summaries(logdir=path)` then warns and passes `tensorboard_dir=path`.

    Raises:
        KeyError: for an `old` that is not a key of `RENAMED_ARGUMENTS`.
        TypeError: from the decorated function, when both names are given.
    """
    old_name, new_name = _argument(old), _argument(RENAMED_ARGUMENTS[old])

    def decorate(function: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(function)
        def with_old_name(*args: Any, **kwargs: Any) -> Any:
            if old_name in kwargs:
                value = kwargs.pop(old_name)
                if new_name in kwargs:
                    raise TypeError(
                        f"{RENAMED_ARGUMENTS[old]} was given under its new and its old name ({old_name}). "
                        f"Received: {new_name}={kwargs[new_name]!r}, {old_name}={value!r}"
                    )
                warn(old, received=f"{old_name}={value!r}")
                kwargs[new_name] = value
            return function(*args, **kwargs)

        return with_old_name

    return decorate


def renamed_attribute(old: str) -> property:
    """A property under the old name `old` ("Class.attribute", a key of `RENAMED_METHODS`) of the new attribute.

    Reading or setting it warns and reads or sets the new attribute.
    """
    new = RENAMED_METHODS[old].rpartition(".")[2]

    def get(instance: Any) -> Any:
        warn(old)
        return getattr(instance, new)

    def set_(instance: Any, value: Any) -> None:
        warn(old)
        setattr(instance, new, value)

    return property(get, set_, doc=f"Deprecated: {message(old)}")


def without_removed_keys(owner: str, config: dict[str, Any]) -> dict[str, Any]:
    """A copy of the saved config of a class `owner` without the settings `REMOVED_CONFIG_KEYS` lists for it.

    A setting that was on (true) says what is done instead, with a `UserWarning`: the file still loads, and
    there is nothing for its owner to change but to save it again.
    """
    config = dict(config)
    for key, instead in REMOVED_CONFIG_KEYS.items():
        cls, _, setting = key.partition(".")
        if cls == owner and config.pop(setting, False):
            warnings.warn(
                f"{owner} {config.get('name')!r}: {setting} no longer exists; {instead}. Received: {setting}=True",
                stacklevel=3,
            )
    return config


def module_getattr(module: str) -> Callable[[str], Any]:
    """The `__getattr__` of `module`: its names in `MOVED_NAMES`, each with its warning.

    ```python
    __getattr__ = _deprecated.module_getattr(__name__)
    ```

    Any other missing name is the usual `AttributeError`, without a warning.
    """

    def __getattr__(name: str) -> Any:
        old = f"{module}.{name}"
        if old not in MOVED_NAMES:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        warn(old)
        new_module, _, attribute = MOVED_NAMES[old].rpartition(".")
        return getattr(importlib.import_module(new_module), attribute)

    return __getattr__


def alias(old_name: str) -> None:
    """Makes the module being imported as `old_name` (`tfmp.training`) the module it is now, with its warning.

    Called from the body of the old path's module in this folder. The
    import system hands the importer whatever `sys.modules` holds once that
    body has run, so `import tfmp.training` gives the `tfmp.run.training`
    module object itself, and both names stay the same module.

    Raises:
        ValueError: for a name that is not a key of `MOVED_MODULES`.
    """
    if old_name not in MOVED_MODULES:
        raise ValueError(f"{old_name!r} is not an old path of tfmp: expected one of {', '.join(sorted(MOVED_MODULES))}")
    warn(old_name, stacklevel=4)  # the import statement (importlib's own frames are skipped)
    sys.modules[old_name] = importlib.import_module(MOVED_MODULES[old_name])

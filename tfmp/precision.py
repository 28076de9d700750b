"""Precision policies: names, the global Keras dtype policy, TF32 and XLA.

tfmp speaks of three precisions a model computes in:

* `float32`: everything in float32;
* `mixed_float16`: float16 compute, float32 variables (needs loss scaling);
* `mixed_bfloat16`: bfloat16 compute, float32 variables;

and of two names that choose one of them:

* `hardware`: chosen from the hardware alone, by the compute-capability
  rule of `choose_precision` (`resolve_precision`, `set_precision` and
  `precision_scope` apply it; a multi-worker run too, where every worker
  must choose the same);
* `auto`: the fastest for the model on this device, which a training run
  (`tfmp.run`) measures by training each candidate briefly
  (`tfmp.run.autotune`). Outside a run nothing can be measured:
  there `auto` applies the rule of `hardware`, with a `DeprecationWarning`
  (it will be refused in tfmp 0.3; `tfmp._deprecated.RENAMED_VALUES`).

Aliases `fp32`, `fp16` and `bf16` are accepted wherever a name is.

The Keras dtype policy is process-global. `precision_scope` sets it for a
block and restores the previous policy on exit, even on error; library code
in tfmp uses it rather than leaving a policy behind.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Iterator, Sequence

import keras
import tensorflow as tf

from tfmp import _deprecated

__all__ = [
    "CONCRETE_PRECISIONS",
    "PRECISIONS",
    "auto_jit_compile",
    "canonical_precision",
    "canonical_xla",
    "choose_precision",
    "gpu_compute_capabilities",
    "precision_scope",
    "resolve_jit_compile",
    "resolve_precision",
    "set_precision",
    "set_tf32",
    "tf32_scope",
    "visible_gpus",
]

_logger = logging.getLogger(__name__)

# The precisions a model computes in: what `auto` chooses among and what a benchmark measures.
CONCRETE_PRECISIONS = ("float32", "mixed_bfloat16", "mixed_float16")
# Every precision name: the concrete ones, and the names that choose one of them.
PRECISIONS = CONCRETE_PRECISIONS + ("auto", "hardware")
ALIASES = {"fp32": "float32", "fp16": "mixed_float16", "bf16": "mixed_bfloat16"}


def canonical_precision(name: str) -> str:
    """Returns the canonical precision name for `name` or an alias.

    Args:
        name: One of `PRECISIONS` or an alias (`fp32`, `fp16`, `bf16`),
            case-insensitive.

    Returns:
        One of `PRECISIONS`.

    Raises:
        ValueError: naming the value received and the valid names.
    """
    key = name.strip().lower() if isinstance(name, str) else name
    key = ALIASES.get(key, key)
    if key not in PRECISIONS:
        valid = ", ".join(PRECISIONS + tuple(ALIASES))
        raise ValueError(f"Unknown precision. Valid names: {valid}. Received: precision={name!r}")
    return key


def choose_precision(compute_capabilities: Sequence[tuple[int, int]]) -> tuple[str, str]:
    """Chooses a precision from the GPUs' compute capabilities.

    The rule: no GPU gives `float32` (CPU); otherwise the oldest GPU decides,
    since every replica must run the same policy: 8.0 or newer (Ampere,
    Hopper: bfloat16 Tensor Cores, float32's range, no loss scaling) gives
    `mixed_bfloat16`; 7.x (Volta, Turing: float16 Tensor Cores only) gives
    `mixed_float16`; older GPUs have no Tensor Cores and keep `float32`.

    This is the fallback. What is fastest depends on the model, not only on
    the GPU: small, launch-bound steps (MobileNetV2 on 32x32 images) get
    slower in 16 bits even on an H100 (see the Performance report), so the
    training runs measure instead (`tfmp.run.autotune`).

    Args:
        compute_capabilities: One `(major, minor)` pair per visible GPU.

    Returns:
        `(precision, reason)`, the reason being one human-readable sentence.
    """
    if not compute_capabilities:
        return "float32", "no GPU is visible; float32 on CPU"
    major, minor = min(compute_capabilities)
    where = f"GPU compute capability {major}.{minor}"
    if major >= 8:
        return "mixed_bfloat16", f"{where} >= 8.0 has bfloat16 Tensor Cores"
    if major == 7:
        return "mixed_float16", f"{where} (7.x) has float16 Tensor Cores only"
    return "float32", f"{where} < 7.0 has no Tensor Cores"


def visible_gpus() -> list[tuple[str, tuple[int, int]]]:
    """`(name, (major, minor))` for every visible NVIDIA GPU (empty on CPU).

    GPUs that report no CUDA compute capability are left out: the rule and
    the Tensor Core checks are NVIDIA's.
    """
    gpus = []
    for gpu in tf.config.list_physical_devices("GPU"):
        details = tf.config.experimental.get_device_details(gpu)
        capability = details.get("compute_capability")
        if capability is not None:
            gpus.append((str(details.get("device_name", gpu.name)), tuple(capability)))
    return gpus


def gpu_compute_capabilities() -> list[tuple[int, int]]:
    """Returns `(major, minor)` for every visible GPU (empty on CPU)."""
    return [capability for _, capability in visible_gpus()]


def resolve_precision(name: str, compute_capabilities: Sequence[tuple[int, int]] | None = None) -> str:
    """Returns a concrete precision, deciding `hardware` by the compute-capability rule.

    For `hardware`, logs one line saying what was chosen and why
    (`choose_precision`). `auto` is decided the same way, with a
    `DeprecationWarning`: measuring it needs a model, which only a training
    run has (`tfmp.run.autotune`); outside one, say `hardware`.

    Args:
        name: A precision name or alias (`canonical_precision`).
        compute_capabilities: The GPUs the rule decides for; default: the
            visible ones (`gpu_compute_capabilities`).
    """
    name = canonical_precision(name)
    if name == "auto":
        _deprecated.warn('precision="auto"', stacklevel=_caller_outside_tfmp())
    elif name != "hardware":
        return name
    if compute_capabilities is None:
        compute_capabilities = gpu_compute_capabilities()
    chosen, reason = choose_precision(compute_capabilities)
    _logger.info("precision=%s chose %s: %s.", name, chosen, reason)
    return chosen


def _caller_outside_tfmp() -> int:
    """The `stacklevel` of `_deprecated.warn` that blames the first caller outside tfmp (and `contextlib`).

    `set_precision("auto")` and `precision_scope("auto")` reach
    `resolve_precision` through tfmp's own frames; the warning names the
    user's line, where Python's default filters show it.
    """
    package = os.path.dirname(os.path.abspath(__file__))
    frame, level = sys._getframe(2), 3  # `resolve_precision`'s caller; warn's default blames that frame
    while frame.f_back is not None and (
        frame.f_code.co_filename.startswith(package + os.sep) or frame.f_code.co_filename == contextlib.__file__
    ):
        frame, level = frame.f_back, level + 1
    return level


def set_precision(name: str) -> str:
    """Sets the global Keras dtype policy and returns the concrete name.

    Prefer `precision_scope`, which restores the previous policy.
    """
    resolved = resolve_precision(name)
    keras.config.set_dtype_policy(resolved)
    return resolved


@contextlib.contextmanager
def precision_scope(name: str) -> Iterator[str]:
    """Sets the global Keras dtype policy for a block, then restores it.

    Layers built inside the block take the policy; they keep it after the
    block ends, while layers built afterwards get the previous policy again.

    ```python
    with tfmp.precision_scope("bf16") as policy:   # policy == "mixed_bfloat16"
        model = build_model()
    ```

    Yields:
        The concrete precision name in force inside the block.
    """
    previous = keras.config.dtype_policy()
    try:
        yield set_precision(name)
    finally:
        keras.config.set_dtype_policy(previous)


def set_tf32(enabled: bool) -> bool:
    """Turns TensorFloat-32 matmuls/convs on or off; returns the old setting.

    TF32 only affects float32 math on Ampere or newer GPUs, where it gives
    float32 models Tensor-Core speed at a 10-bit mantissa. It has no effect on
    CPU, or on float16/bfloat16 math.
    """
    previous = tf.config.experimental.tensor_float_32_execution_enabled()
    tf.config.experimental.enable_tensor_float_32_execution(bool(enabled))
    return previous


@contextlib.contextmanager
def tf32_scope(enabled: bool) -> Iterator[None]:
    """Sets TF32 for a block, then restores the previous setting."""
    previous = set_tf32(enabled)
    try:
        yield
    finally:
        set_tf32(previous)


_XLA_NAMES = {
    "auto": "auto",
    "true": True,
    "false": False,
    "on": True,
    "off": False,
    "1": True,
    "0": False,
    "yes": True,
    "no": False,
}


def canonical_xla(xla: str | bool) -> bool | str:
    """Returns the canonical XLA setting for `xla`: True, False or `"auto"`.

    Args:
        xla: `True`/`False`, or a name: `"auto"`, `"true"`/`"false"`,
            `"on"`/`"off"`, `"yes"`/`"no"` or `"1"`/`"0"`, case-insensitive.

    Returns:
        True or False, or `"auto"`, which `auto_jit_compile` decides.

    Raises:
        ValueError: for an unknown setting, naming it.
    """
    if isinstance(xla, bool):
        return xla
    key = xla.strip().lower() if isinstance(xla, str) else xla
    if key not in _XLA_NAMES:
        raise ValueError(f"Unknown XLA setting. Expected auto, true or false. Received: xla={xla!r}")
    return _XLA_NAMES[key]


def auto_jit_compile(has_gpu: bool | None = None) -> bool:
    """What XLA `"auto"` means: on with a GPU, off on CPU, where XLA measured slower than plain graph mode.

    Args:
        has_gpu: Whether a GPU is visible; detected when None.

    Returns:
        The bool to pass as `jit_compile`.
    """
    return bool(tf.config.list_physical_devices("GPU")) if has_gpu is None else has_gpu


def resolve_jit_compile(xla: str | bool, has_gpu: bool | None = None) -> bool:
    """Turns an XLA setting into the `jit_compile` value for a train step.

    `canonical_xla` parses the setting; `auto_jit_compile` decides `"auto"`.

    Args:
        xla: `True`/`False`, or `"true"`, `"false"` or `"auto"` (or another
            name `canonical_xla` takes). `auto` means on with a GPU and off
            on CPU, where XLA measured slower than plain graph mode for
            tfmp's models.
        has_gpu: Whether a GPU is visible; detected when None.

    Returns:
        The bool to pass as `jit_compile`.

    Raises:
        ValueError: for an unknown setting, naming it.
    """
    setting = canonical_xla(xla)
    return auto_jit_compile(has_gpu) if setting == "auto" else setting


# The float32-layer names that moved to `tfmp.float32_layers`, each with a DeprecationWarning.
__getattr__ = _deprecated.module_getattr(__name__)

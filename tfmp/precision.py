"""Precision policies: names, the global Keras dtype policy, TF32 and XLA.

tfmp speaks of four precisions:

* `float32`: everything in float32;
* `mixed_float16`: float16 compute, float32 variables (needs loss scaling);
* `mixed_bfloat16`: bfloat16 compute, float32 variables;
* `auto`: chosen for the hardware. The training runs (`tfmp.run.training`)
  measure the candidate precisions on the model itself (`tfmp.run.autotune`);
  where there is no model to measure (`resolve_precision`, `set_precision`,
  `precision_scope`) and across hosts, the compute-capability rule of
  `choose_precision` decides.

Aliases `fp32`, `fp16` and `bf16` are accepted wherever a name is.

The Keras dtype policy is process-global. `precision_scope` sets it for a
block and restores the previous policy on exit, even on error; library code
in tfmp uses it rather than leaving a policy behind.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Iterator, Sequence

import keras
import tensorflow as tf

from tfmp import _compat

__all__ = [
    "FLOAT32_LAYERS_AUTO",
    "FLOAT32_LAYERS_NONE",
    "PRECISIONS",
    "canonical_precision",
    "choose_precision",
    "float32_copy",
    "gpu_compute_capabilities",
    "keep_float32",
    "layer_paths",
    "precision_scope",
    "resolve_float32_layers",
    "resolve_jit_compile",
    "resolve_precision",
    "set_precision",
    "set_tf32",
    "tf32_scope",
    "visible_gpus",
]

_logger = logging.getLogger(__name__)

PRECISIONS = ("float32", "mixed_float16", "mixed_bfloat16", "auto")
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
    """Returns a concrete precision, deciding `auto` by the compute-capability rule.

    For `auto`, logs one line saying what was chosen and why. The training
    runs measure `auto` on the model instead (`tfmp.run.autotune`); this rule is
    what is left without a model to measure.

    Args:
        name: A precision name or alias (`canonical_precision`).
        compute_capabilities: The GPUs `auto` decides for; default: the
            visible ones (`gpu_compute_capabilities`).
    """
    name = canonical_precision(name)
    if name != "auto":
        return name
    if compute_capabilities is None:
        compute_capabilities = gpu_compute_capabilities()
    chosen, reason = choose_precision(compute_capabilities)
    _logger.info("precision=auto chose %s: %s.", chosen, reason)
    return chosen


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
    "auto": None,
    "true": True,
    "false": False,
    "on": True,
    "off": False,
    "1": True,
    "0": False,
    "yes": True,
    "no": False,
}


def resolve_jit_compile(xla: str | bool, has_gpu: bool | None = None) -> bool:
    """Turns an XLA setting into the `jit_compile` value for a train step.

    Args:
        xla: `True`/`False`, or `"true"`, `"false"` or `"auto"`. `auto` means
            on with a GPU and off on CPU, where XLA measured slower than plain
            graph mode for tfmp's models.
        has_gpu: Whether a GPU is visible; detected when None.

    Returns:
        The bool to pass as `jit_compile`.

    Raises:
        ValueError: for an unknown setting, naming it.
    """
    if isinstance(xla, bool):
        return xla
    key = xla.strip().lower() if isinstance(xla, str) else xla
    if key not in _XLA_NAMES:
        raise ValueError(f"Unknown XLA setting. Expected auto, true or false. Received: xla={xla!r}")
    value = _XLA_NAMES[key]
    if value is None:
        if has_gpu is None:
            has_gpu = bool(tf.config.list_physical_devices("GPU"))
        value = has_gpu
    return value


def float32_copy(model: keras.Model) -> keras.Model:
    """A copy of a functional or sequential model computing in float32, same weights.

    Every layer (nested models included) is rebuilt from its config with
    `dtype="float32"`, and the weights are copied over, so the copy computes
    what the mixed-precision model approximates. Operations in a functional
    graph that are not layers (the `Add` of `x + y`, `keras.ops` calls) are
    rebuilt from their config unchanged: they have no dtype policy and
    compute in the dtype of their inputs, which is float32 in the copy.
    Layers nested inside a layer (e.g. `MultiHeadAttention`'s projections)
    take the float32 policy their enclosing layer passes them; the layers a
    wrapper such as `Bidirectional` or `TimeDistributed` rebuilds from its
    own config are set to float32 afterwards.

    ```python
    with tfmp.precision_scope("mixed_float16"):
        model = build_model()
    reference = tfmp.precision.float32_copy(model)  # float32 math, same weights
    ```

    Args:
        model: A functional or sequential `keras.Model`.

    Returns:
        The float32 copy, with the same weights and layer names.

    Raises:
        ValueError: for a model Keras cannot clone: a subclassed model, or a
            layer that cannot be rebuilt from its config (a `Lambda` of a
            Python lambda, a custom layer without `get_config`); the message
            names the model and, where known, the layer.
    """

    def clone(operation: keras.Operation) -> keras.Operation:
        is_layer = isinstance(operation, keras.layers.Layer)
        try:
            config = operation.get_config()
            # Only layers have a dtype policy; an operation's config rejects the key.
            return operation.__class__.from_config({**config, "dtype": "float32"} if is_layer else config)
        except (NotImplementedError, TypeError, ValueError) as e:
            kind = "layer" if is_layer else "operation"
            raise ValueError(
                f"{kind} {operation.name!r} ({type(operation).__name__}) cannot be rebuilt from its config: {e}"
            ) from None

    try:
        with precision_scope("float32"):
            copy = keras.models.clone_model(model, clone_function=clone, recursive=True)
        copy.set_weights(model.get_weights())
    except (NotImplementedError, TypeError, ValueError) as e:
        raise ValueError(
            "float32 reference gradients need a copy of the model in float32, made with "
            f"keras.models.clone_model; it failed: {e}. Use a functional or sequential model whose layers "
            f"have get_config/from_config. Received: model={model.name!r}"
        ) from None
    # A wrapper (Bidirectional, TimeDistributed) rebuilds the layer it wraps from a config of its own,
    # which still names the original policy; the copy has not run yet, so a new policy still applies.
    for _, layer in layer_paths(copy):
        if layer.compute_dtype in ("float16", "bfloat16"):
            layer.dtype_policy = "float32"
    return copy


def layer_paths(model: keras.Model) -> list[tuple[str, keras.layers.Layer]]:
    """`(path, layer)` for every layer of `model` that is not itself a model.

    Paths join the names of the enclosing models and layers with `/`, e.g.
    `mobilenet_v2_classifier/mobilenetv2_1.00_32/block_1_expand_BN`.
    """
    found = []

    def walk(layer: keras.layers.Layer, prefix: str) -> None:
        for sub in _compat.child_layers(layer):
            path = f"{prefix}/{sub.name}"
            if not isinstance(sub, keras.Model):
                found.append((path, sub))
            walk(sub, path)

    walk(model, model.name)
    return found


def keep_float32(models: Sequence[keras.Model], pattern: str) -> list[str]:
    """Makes the layers whose path matches `pattern` compute in float32.

    Sets each matching layer's Keras dtype policy to `"float32"` (a per-layer
    policy, as `dtype="float32"` at construction would), so under a mixed
    global policy those layers cast their inputs to float32 and compute in
    it; their variables are float32 already. Call it before the first
    training step is traced.

    Args:
        models: The models to search (nested models are searched too).
        pattern: A regular expression, matched with `re.search` against each
            layer's path (see `layer_paths`), e.g. `"_BN$|_relu$"`.

    Returns:
        The paths of the layers changed.

    Raises:
        ValueError: if `pattern` is not a valid regular expression or matches
            no layer; the message repeats it and shows some paths.
    """
    try:
        regex = re.compile(pattern)
    except re.error as e:
        raise ValueError(f"float32_layers is not a valid regular expression ({e}). Received: {pattern!r}") from None
    paths = [(path, layer) for model in models for path, layer in layer_paths(model)]
    matched = [(path, layer) for path, layer in paths if regex.search(path)]
    if not matched:
        examples = ", ".join(path for path, _ in paths[:4])
        raise ValueError(
            f"float32_layers matched no layer; it is searched in layer paths such as {examples}. Received: {pattern!r}"
        )
    for _, layer in matched:
        layer.dtype_policy = "float32"
    return [path for path, _ in matched]


FLOAT32_LAYERS_AUTO = "auto"
FLOAT32_LAYERS_NONE = "none"


def resolve_float32_layers(
    setting: str, precision: str, cpu_bfloat16_default: str = "", has_gpu: bool | None = None
) -> str:
    """The `keep_float32` pattern a run applies, from the user's setting.

    Args:
        setting: A regular expression; `"none"` (or `""`) for no layer; or
            `"auto"`: the model's advice for this machine, which is
            `cpu_bfloat16_default` under `mixed_bfloat16` without a GPU
            (bfloat16 kernels that oneDNN lacks, such as MobileNetV2's
            depthwise backward passes) and nothing otherwise.
        precision: The concrete precision of the run (not `auto`).
        cpu_bfloat16_default: The model's pattern for bfloat16 on a CPU;
            `""` when it has none.
        has_gpu: Whether a GPU is visible; detected when None.

    Returns:
        The pattern, or `""` when no layer is to be kept in float32.
    """
    key = setting.strip()
    if key in ("", FLOAT32_LAYERS_NONE):
        return ""
    if key != FLOAT32_LAYERS_AUTO:
        return setting
    if canonical_precision(precision) != "mixed_bfloat16" or not cpu_bfloat16_default:
        return ""
    if has_gpu is None:
        has_gpu = bool(tf.config.list_physical_devices("GPU"))
    return "" if has_gpu else cpu_bfloat16_default

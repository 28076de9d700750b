"""Layers that compute in float32 under a mixed policy: found by path, kept in float32, or a whole float32 copy.

A mixed policy computes every layer in 16 bits unless the layer says
otherwise. These functions say otherwise, after the model is built:

* `layer_paths`: every layer of a model with its path
  (`model/block_1_expand_BN`), the names `float32_layers` patterns match;
* `keep_float32`: the layers a pattern matches compute in float32
  (`compile_pattern`: a pattern checked, as every `float32_layers` setting is);
* `resolve_float32_layers`: the pattern a run applies, from its
  `float32_layers` setting (`"auto"`: the model's advice for this machine);
* `float32_copy`: a copy of the whole model computing in float32, with the
  same weights: the reference the diagnosis compares gradients against.

```python
with tfmp.precision_scope("mixed_float16"):
    model = build_model()
tfmp.float32_layers.keep_float32([model], "_BN$")  # BatchNorm layers in float32
```
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import keras
import tensorflow as tf

from tfmp import _compat
from tfmp.precision import canonical_precision, precision_scope

__all__ = [
    "FLOAT32_LAYERS_AUTO",
    "FLOAT32_LAYERS_NONE",
    "compile_pattern",
    "float32_copy",
    "keep_float32",
    "layer_paths",
    "resolve_float32_layers",
]


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
    reference = tfmp.float32_layers.float32_copy(model)  # float32 math, same weights
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


def compile_pattern(pattern: str) -> re.Pattern:
    """A `float32_layers` pattern compiled, as `keep_float32` searches it.

    Raises:
        ValueError: if `pattern` is not a valid regular expression (or not a
            string), naming it.
    """
    try:
        return re.compile(pattern)
    except (re.error, TypeError) as e:
        raise ValueError(
            f"float32_layers is not a valid regular expression ({e}). Received: float32_layers={pattern!r}"
        ) from None


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
    regex = compile_pattern(pattern)
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

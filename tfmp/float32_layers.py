"""What must compute in float32 under a mixed policy: found by path, kept in float32, checked, or a float32 copy.

A mixed policy computes every layer in 16 bits unless the layer says
otherwise. These functions say otherwise, after the model is built, and
check that a model's outputs stayed float32:

* `layer_paths`: every layer of a model with its path
  (`model/block_1_expand_BN`), the names `float32_layers` patterns match;
* `keep_float32`: the layers a pattern matches compute in float32
  (`compile_pattern`: a pattern checked, as every `float32_layers` setting is);
* `resolve_float32_layers`: the pattern a run applies, from its
  `float32_layers` setting (`"auto"`: the model's advice for this machine);
* `float32_copy`: a copy of the whole model computing in float32, with the
  same weights: the reference the diagnosis compares gradients against;
* `output_findings`, `check_outputs`: the model outputs and softmax/sigmoid
  layers computed in 16 bits, each with its fix; `check_outputs` warns
  before the first step, where a float16 output would otherwise meet float32
  data in a `TypeError` or lose precision in the loss.

```python
with tfmp.precision_scope("mixed_float16"):
    model = build_model()
tfmp.float32_layers.keep_float32([model], "_BN$")  # BatchNorm layers in float32
tfmp.float32_layers.check_outputs(model)  # warns if an output is float16
```
"""

from __future__ import annotations

import dataclasses
import re
import warnings
from collections.abc import Sequence

import keras
import tensorflow as tf

from tfmp import _compat
from tfmp.precision import canonical_precision, precision_scope

__all__ = [
    "FLOAT32_LAYERS_AUTO",
    "FLOAT32_LAYERS_NONE",
    "OutputFinding",
    "check_outputs",
    "compile_pattern",
    "float32_copy",
    "is_graph_model",
    "keep_float32",
    "layer_paths",
    "output_findings",
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


# -- what must stay float32 --------------------------------------------------------------------

_LOW_PRECISION = ("float16", "bfloat16")
_SQUASHING = ("softmax", "log_softmax", "sigmoid", "hard_sigmoid", "log_sigmoid")
_OUTPUT_FIX = (
    "give the model's last layer dtype='float32', or end it with keras.layers.Activation('linear', dtype='float32')"
)


@dataclasses.dataclass(frozen=True)
class OutputFinding:
    """A model output or squashing activation computed in 16 bits.

    Attributes:
        where: `<model>/<layer>` or `<model> output <i>`.
        what: What is computed in low precision (`model output`, `softmax`, ...).
        dtype: `float16` or `bfloat16`.
        fix: How to keep it in float32.
    """

    where: str
    what: str
    dtype: str
    fix: str


def is_graph_model(model: keras.layers.Layer) -> bool:
    """Whether `model` is a functional or sequential model (its inputs and outputs are known without running it)."""
    try:
        return isinstance(model, keras.Model) and bool(model.inputs) and bool(model.outputs)
    except (AttributeError, ValueError):
        return False


def _graph_networks(model: keras.layers.Layer) -> list[keras.Model]:
    """`model` if it is a functional or sequential model; else those it holds at any depth (a GAN's generator)."""
    if is_graph_model(model):
        return [model]
    found: dict[int, keras.Model] = {}

    def walk(layer: keras.layers.Layer) -> None:
        for sub in _compat.child_layers(layer):
            if is_graph_model(sub):
                found.setdefault(id(sub), sub)  # its own nested models feed its layers, not its outputs
            else:
                walk(sub)

    walk(model)
    return list(found.values())


def _squashing_activation(layer: keras.layers.Layer) -> str | None:
    if isinstance(layer, keras.layers.Softmax):
        return "softmax"
    name = getattr(getattr(layer, "activation", None), "__name__", None)
    return name if name in _SQUASHING else None


def _attention_runs_its_softmax(layer: keras.layers.MultiHeadAttention) -> bool:
    """Whether a built `MultiHeadAttention` calls its own softmax layer.

    Keras calls it only with attention dropout, over more than one attention
    axis, or when the attention scores are returned. Otherwise it calls
    `keras.ops.dot_product_attention`, whose TensorFlow kernel computes the
    softmax in float32 whatever the inputs' dtype. Only calls recorded in a
    functional graph are known; a subclassed model's are assumed to return
    no scores.
    """
    if layer.dropout > 0 or len(layer.query_dense.equation.split("->")[1]) != 4:
        return True
    for node in _compat.inbound_nodes(layer):
        arguments = getattr(node, "arguments", None)
        if arguments is not None and arguments.kwargs.get("return_attention_scores"):
            return True
    return False


def _enclosing_layer(path: str, layers: dict[str, keras.layers.Layer]) -> str | None:
    """The path of the outermost layer (not a model) that `path` is nested in, or None for a model's own layer."""
    parts = path.split("/")
    for end in range(2, len(parts)):
        prefix = "/".join(parts[:end])
        if prefix in layers and not isinstance(layers[prefix], keras.Model):
            return prefix
    return None


def _layer_fix(path: str, layers: dict[str, keras.layers.Layer]) -> str:
    """How to keep the layer at `path` in float32, in words the user can apply.

    A model's own layer takes `dtype="float32"` where it is created. A layer
    created inside another layer (`MultiHeadAttention`'s softmax) cannot:
    `keep_float32` changes it in place, by a pattern ending at its name
    within the enclosing layer the user created.
    """
    enclosing = _enclosing_layer(path, layers)
    if enclosing is None:
        return "give this layer dtype='float32'"
    parent, name = enclosing.rsplit("/", 1)
    pattern = "/" + re.escape(path[len(parent) + 1 :]) + "$"  # e.g. "/attention/softmax$"
    keep = f"tfmp.float32_layers.keep_float32([model], {pattern!r})"
    fix = f"inside {name!r}, the layer you created: {keep} before training"
    if isinstance(layers[enclosing], keras.layers.MultiHeadAttention):  # it passes its dtype to its sub-layers
        fix += f", or give {name!r} dtype='float32' (its whole attention then computes in float32)"
    return fix


def output_findings(model: keras.layers.Layer) -> list[OutputFinding]:
    """What should stay float32 in `model` but is computed in float16 or bfloat16.

    * a model output in 16 bits: of `model` if it is a functional or
      sequential model, else of each such model it holds (a subclassed GAN's
      generator and discriminator); a subclassed model's own outputs are not
      known without running it;
    * a softmax, log-softmax or sigmoid computed in 16 bits, anywhere in
      `model`. For one inside a layer the user created (the softmax of a
      `MultiHeadAttention` with dropout), the fix names that layer and the
      `keep_float32` pattern that keeps just the softmax in float32. A
      `MultiHeadAttention` without dropout is not flagged: Keras then
      computes its softmax in float32 (`keras.ops.dot_product_attention`).

    Only dtypes are read: nothing runs, and no global state changes.

    Args:
        model: A `keras.Model` (functional, sequential or subclassed) or layer.

    Returns:
        The findings, the layers' first, each with its fix; empty when all is float32.
    """
    paths = layer_paths(model)
    layers = dict(paths)
    # Softmax layers Keras builds but does not call (`_attention_runs_its_softmax`).
    unused = {
        f"{path}/{sub.name}"
        for path, layer in paths
        if isinstance(layer, keras.layers.MultiHeadAttention) and layer.built and not _attention_runs_its_softmax(layer)
        for sub in _compat.child_layers(layer)
        if isinstance(sub, keras.layers.Softmax)
    }
    findings = []
    seen = set()  # a layer shared by two nested models is reported once
    for path, layer in paths:
        activation = _squashing_activation(layer)
        if activation and layer.compute_dtype in _LOW_PRECISION and path not in unused and id(layer) not in seen:
            seen.add(id(layer))
            findings.append(OutputFinding(path, activation, layer.compute_dtype, _layer_fix(path, layers)))
    for network in _graph_networks(model):
        for i, tensor in enumerate(network.outputs):
            dtype = keras.backend.standardize_dtype(tensor.dtype)
            if dtype in _LOW_PRECISION:
                findings.append(OutputFinding(f"{network.name} output {i}", "model output", dtype, _OUTPUT_FIX))
    return findings


def check_outputs(*models: keras.layers.Layer) -> list[OutputFinding]:
    """Warns when a model computes in 16 bits what should stay float32: its outputs, softmax and sigmoid.

    One call before the first step, or at the top of your own
    `train_step` (it reads dtypes only, so in a traced step it runs once, at
    tracing): a float16 output that meets float32 data fails there with a
    `TypeError` ("Input 'y' of 'Sub' Op has type float32 that does not match
    type float16"; a WGAN-GP's fake minus real images, a float16 loss plus a
    float32 gradient penalty), and a 16-bit softmax or sigmoid loses
    precision in the loss. The warning names each model, output or layer and
    its fix. `tfmp.LogLossScale` runs it at `on_train_begin`.

    ```python
    class GAN(keras.Model):  # holds self.generator and self.discriminator
        def train_step(self, real_images):
            tfmp.float32_layers.check_outputs(self)
            ...
    ```

    Args:
        *models: Keras models (functional, sequential or subclassed: a
            subclassed model's functional sub-models are checked) or layers.

    Returns:
        The findings of `output_findings`, each once; empty (and no
        warning) when everything that should be float32 is.

    Raises:
        TypeError: for an argument that is not a Keras model or layer.

    Warns:
        RuntimeWarning: listing the findings.
    """
    for model in models:
        if not isinstance(model, keras.layers.Layer):
            raise TypeError(f"check_outputs takes Keras models or layers. Received: {type(model).__name__} {model!r}")
    findings = list(dict.fromkeys(f for model in models for f in output_findings(model)))
    if findings:
        names = ("Models " if len(models) > 1 else "Model ") + ", ".join(repr(model.name) for model in models)
        lines = "\n".join(f"  {f.where}: {f.what} in {f.dtype}; fix: {f.fix}" for f in findings)
        warnings.warn(
            f"{names}: what should stay float32 is computed in 16 bits. A float16 output that meets float32 data "
            "fails with a TypeError at the first step (a generated batch minus a real one, a loss plus a "
            "float32 penalty), and a 16-bit softmax or sigmoid loses precision in the loss:\n" + lines,
            RuntimeWarning,
            stacklevel=2,
        )
    return findings

"""Float32 outputs: model outputs, softmax/sigmoid layers and losses computed in 16 bits.

`float32_output_report(model)` finds what must stay float32 (model outputs,
softmax/sigmoid and the loss's inputs) but is computed in float16 or
bfloat16, and says how to keep it in float32.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import keras

from tfmp import trainers as trainers_lib
from tfmp.float32_layers import layer_paths
from tfmp.run import _private_apis
from tfmp.run.diagnostics import _report
from tfmp.run.diagnostics._report import Source, is_graph_model, networks, table

__all__ = ["OutputFinding", "OutputReport", "float32_output_report"]

_LOW_PRECISION = ("float16", "bfloat16")


@dataclasses.dataclass(frozen=True)
class OutputFinding:
    """A model output, squashing activation or loss in 16-bit precision.

    Attributes:
        where: `<model>/<layer>` or `<model> output <i>`.
        what: What is computed in low precision.
        dtype: `float16` or `bfloat16`.
        fix: How to keep it in float32.
    """

    where: str
    what: str
    dtype: str
    fix: str


@dataclasses.dataclass
class OutputReport:
    """The findings of `float32_output_report`."""

    findings: list[OutputFinding]

    def __str__(self) -> str:
        title = "Float32 outputs (outputs, softmax/sigmoid and the loss should stay float32):"
        if not self.findings:
            return f"{title}\n  every output, softmax/sigmoid and loss input is float32."
        rows = [(f.where, f.what, f.dtype, f.fix) for f in self.findings]
        return "\n".join([title, table(("where", "computed in low precision", "dtype", "fix"), rows)])


_SQUASHING = ("softmax", "log_softmax", "sigmoid", "hard_sigmoid", "log_sigmoid")


def _squashing_activation(layer: keras.layers.Layer) -> str | None:
    if isinstance(layer, keras.layers.Softmax):
        return "softmax"
    name = getattr(getattr(layer, "activation", None), "__name__", None)
    return name if name in _SQUASHING else None


def _attention_runs_its_softmax(layer: keras.layers.MultiHeadAttention) -> bool:
    """Whether a `MultiHeadAttention` calls its own softmax layer.

    Keras calls it only with attention dropout, over more than one attention
    axis, or when the attention scores are returned. Otherwise it calls
    `keras.ops.dot_product_attention`, whose TensorFlow kernel computes the
    softmax in float32 whatever the inputs' dtype. Only calls recorded in a
    functional graph are known; a subclassed model's are assumed to return
    no scores.
    """
    if layer.dropout > 0 or len(layer.query_dense.equation.split("->")[1]) != 4:
        return True
    for node in _private_apis.inbound_nodes(layer):
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


def _output_dtypes(model: keras.Model) -> list[str]:
    if is_graph_model(model):
        return [keras.backend.standardize_dtype(t.dtype) for t in model.outputs]
    return []  # subclassed: unknown without running it


def float32_output_report(source: Source, loss: Any = None, print_fn: Any = _report.UNSET) -> OutputReport:
    """Finds what should be float32 but is computed in float16 or bfloat16.

    * a model output in 16 bits (add a float32 `Activation("linear")`);
    * a softmax, log-softmax or sigmoid computed in 16 bits, anywhere. For
      one inside a layer the user created (the softmax of a
      `MultiHeadAttention` with dropout), the fix names that layer and the
      `tfmp.float32_layers.keep_float32` pattern that keeps just the softmax in
      float32. A `MultiHeadAttention` without dropout is not flagged: Keras
      then computes its softmax in float32 (`keras.ops.dot_product_attention`);
    * a loss computed on 16-bit outputs: a compiled (or given) loss, or, for
      a trainer, the networks its losses read (`trainer.loss_networks`).

    Args:
        source: A `keras.Model` or a trainer.
        loss: The loss applied to a model's outputs, if it is not compiled.
        print_fn: Deprecated (tfmp 0.1 printed the report with it): warns, and still prints.

    Returns:
        The `OutputReport`; its `str()` is the table.
    """
    findings: list[OutputFinding] = []
    if isinstance(source, trainers_lib.MixedPrecisionTrainer):
        loss_networks = set(source.loss_networks)
    else:
        has_loss = loss is not None or getattr(source, "loss", None) is not None
        loss_networks = set(networks(source)) if has_loss else set()
    for name, model in networks(source).items():
        paths = layer_paths(model)
        layers = dict(paths)
        # Softmax layers Keras builds but does not call (`_attention_runs_its_softmax`).
        unused = {
            f"{path}/{sub.name}"
            for path, layer in paths
            if isinstance(layer, keras.layers.MultiHeadAttention) and not _attention_runs_its_softmax(layer)
            for sub in _private_apis.child_layers(layer)
            if isinstance(sub, keras.layers.Softmax)
        }
        for path, layer in paths:
            activation = _squashing_activation(layer)
            if activation and layer.compute_dtype in _LOW_PRECISION and path not in unused:
                findings.append(OutputFinding(path, activation, layer.compute_dtype, _layer_fix(path, layers)))
        for i, dtype in enumerate(_output_dtypes(model)):
            if dtype not in _LOW_PRECISION:
                continue
            findings.append(
                OutputFinding(
                    f"{model.name} output {i}",
                    "model output",
                    dtype,
                    "end with keras.layers.Activation('linear', dtype='float32')",
                )
            )
            if name in loss_networks:
                findings.append(
                    OutputFinding(
                        f"{model.name} output {i}",
                        "loss input (logits/probabilities)",
                        dtype,
                        "compute the loss on float32 outputs (the same fix)",
                    )
                )
    report = OutputReport(findings)
    _report.removed_print_fn("float32_output_report", print_fn, report)
    return report

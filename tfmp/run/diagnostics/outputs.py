"""Float32 outputs: model outputs, softmax/sigmoid layers and losses computed in 16 bits.

`float32_output_report(model)` finds what seed 002 says must stay float32
but is computed in float16 or bfloat16.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import keras

from tfmp import trainers as trainers_lib
from tfmp.precision import layer_paths
from tfmp.run.diagnostics._common import Source, is_graph_model, networks, table

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
        title = "Float32 outputs (seed 002: outputs, softmax/sigmoid and the loss stay float32):"
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


def _output_dtypes(model: keras.Model) -> list[str]:
    if is_graph_model(model):
        return [keras.backend.standardize_dtype(t.dtype) for t in model.outputs]
    return []  # subclassed: unknown without running it


def float32_output_report(
    source: Source, loss: Any = None, print_fn: Callable[[str], None] | None = print
) -> OutputReport:
    """Finds what should be float32 but is computed in float16 or bfloat16.

    * a model output in 16 bits (add a float32 `Activation("linear")`);
    * a softmax, log-softmax or sigmoid computed in 16 bits, anywhere;
    * a loss computed on 16-bit outputs: a compiled (or given) loss, or, for
      a trainer, the networks its losses read (`trainer.loss_networks`).

    Args:
        source: A `keras.Model` or a trainer.
        loss: The loss applied to a model's outputs, if it is not compiled.
        print_fn: Prints the report; None to stay quiet.
    """
    findings: list[OutputFinding] = []
    if isinstance(source, trainers_lib.MixedPrecisionTrainer):
        loss_networks = set(source.loss_networks)
    else:
        has_loss = loss is not None or getattr(source, "loss", None) is not None
        loss_networks = set(networks(source)) if has_loss else set()
    for name, model in networks(source).items():
        for path, layer in layer_paths(model):
            activation = _squashing_activation(layer)
            if activation and layer.compute_dtype in _LOW_PRECISION:
                findings.append(OutputFinding(path, activation, layer.compute_dtype, "give this layer dtype='float32'"))
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
    if print_fn is not None:
        print_fn(str(report))
    return report

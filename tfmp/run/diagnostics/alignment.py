"""Tensor Core alignment: the sizes that keep float16/bfloat16 math off Tensor Cores.

`tensor_core_report(model, batch_size)` lists every dimension that feeds
Tensor Core math (Dense units and input features, convolution filters and
input channels, RNN units and inputs, the batch size) and is not a multiple
of 8 (seed 000's pitfall: the generator widths 63/31/7 and batch 4090;
about 2% on an H100 with current cuDNN, see `MISALIGNMENT_COST`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import keras

from tfmp import _compat
from tfmp.precision import layer_paths
from tfmp.run.diagnostics._common import Source, is_graph_model, networks, table

__all__ = ["ALIGNMENT", "MISALIGNMENT_COST", "AlignmentFinding", "AlignmentReport", "tensor_core_report"]

ALIGNMENT = 8
"""Tensor Cores want float16/bfloat16 GEMM dimensions in multiples of 8."""

MISALIGNMENT_COST = (
    "What it costs on current hardware: seed 000's GAN with generator widths 63/31/7 at batch 4090 trained "
    "about 2% slower than the aligned one in float16 on an H100 with current cuDNN (PyTorch AMP, one run), "
    "not the large slowdown the seed showed on an A100 in 2021."
)
"""The measured cost of misaligned sizes, printed under the alignment warnings."""


@dataclasses.dataclass(frozen=True)
class AlignmentFinding:
    """A Tensor Core dimension that is not a multiple of `ALIGNMENT`.

    Attributes:
        severity: `"warn"` for a dimension the model's author chose (an
            inner layer, the batch size); `"info"` for one the data or the
            task sets (an input's channels or features, an output's classes).
        layer: `<model>/<layer>`, or `"(batch)"`.
        dimension: e.g. `"units"`, `"input channels"`, `"batch size"`.
        value: The dimension's size.
        aligned: The nearest multiple of `ALIGNMENT` (at least `ALIGNMENT`).
        reason: Why an info finding is left alone.
    """

    severity: str
    layer: str
    dimension: str
    value: int
    aligned: int
    reason: str = ""


@dataclasses.dataclass
class AlignmentReport:
    """The findings of `tensor_core_report`."""

    findings: list[AlignmentFinding]
    batch_size: int | None
    multiple: int = ALIGNMENT

    @property
    def warnings(self) -> list[AlignmentFinding]:
        return [f for f in self.findings if f.severity == "warn"]

    def __str__(self) -> str:
        title = f"Tensor Core alignment (multiples of {self.multiple}"
        title += f", batch size {self.batch_size}):" if self.batch_size is not None else "):"
        if not self.findings:
            return f"{title}\n  every Tensor Core dimension is aligned."
        rows = [(f.severity, f.layer, f.dimension, f.value, f.aligned, f.reason) for f in self.findings]
        notes = len(self.findings) - len(self.warnings)
        summary = (
            f"  {len(self.warnings)} warning(s): sizes you chose that keep float16/bfloat16 math off "
            f"Tensor Cores or pad it; use the aligned value. {notes} info: sizes set by the data or the "
            "task, usually left alone."
        )
        if self.warnings:
            summary += f"\n  {MISALIGNMENT_COST}"
        return "\n".join([title, table(("severity", "layer", "dimension", "value", "aligned", "note"), rows), summary])


def _aligned(value: int, multiple: int) -> int:
    """The nearest multiple (ties round up), never below `multiple`."""
    return max(multiple, multiple * math.floor(value / multiple + 0.5))


_CONV = (keras.layers.Conv1D, keras.layers.Conv2D, keras.layers.Conv3D)
_CONV_TRANSPOSE = (keras.layers.Conv1DTranspose, keras.layers.Conv2DTranspose, keras.layers.Conv3DTranspose)
_SEPARABLE = (keras.layers.SeparableConv1D, keras.layers.SeparableConv2D)


def _gemm_dimensions(layer: keras.layers.Layer) -> list[tuple[str, int, str]]:
    """`(dimension, size, side)` of a layer's matrix math; side is "in" or "out"."""
    if isinstance(layer, keras.layers.Dense):
        return [("units", layer.units, "out"), ("input features", int(layer.kernel.shape[0]), "in")]
    if isinstance(layer, _SEPARABLE):  # the pointwise convolution is the GEMM
        return [
            ("filters", layer.filters, "out"),
            ("pointwise input channels", int(layer.pointwise_kernel.shape[-2]), "in"),
        ]
    if isinstance(layer, _CONV_TRANSPOSE):
        return [("filters", layer.filters, "out"), ("input channels", int(layer.kernel.shape[-1]), "in")]
    if isinstance(layer, _CONV):
        return [("filters", layer.filters, "out"), ("input channels", int(layer.kernel.shape[-2]) * layer.groups, "in")]
    if isinstance(layer, keras.layers.EinsumDense):
        return [(f"kernel dim {i}", int(d), "inner") for i, d in enumerate(layer.kernel.shape)]
    if isinstance(layer, keras.layers.RNN) and hasattr(layer.cell, "units"):
        return [("units", layer.cell.units, "out"), ("input features", int(layer.cell.kernel.shape[0]), "in")]
    return []  # depthwise convolutions, normalisation, pooling...: no Tensor Core GEMM


def _boundary_layers(
    model: keras.Model,
    inputs_are_data: bool,
    outputs_are_outputs: bool,
    fed_by_input: set[int],
    feeds_output: set[int],
) -> None:
    """Marks layers fed by a model input / feeding a model output.

    Walks the functional graph; weightless layers (reshapes, dropout,
    activations, casts) pass the mark on. Nested functional models are
    walked with what the outer graph says about their inputs and outputs.
    """
    layers = model.layers
    nested_in: dict[int, bool] = {}
    nested_out: dict[int, bool] = {}
    data = {id(t) for t in model.inputs} if inputs_are_data else set()
    for layer in layers:
        for node in _compat.inbound_nodes(layer):
            inputs = node.input_tensors
            if inputs and all(id(t) in data for t in inputs):
                fed_by_input.add(id(layer))
                nested_in[id(layer)] = True
                if not layer.trainable_weights:
                    data.update(id(t) for t in node.output_tensors)
    targets = {id(t) for t in model.outputs} if outputs_are_outputs else set()
    for layer in reversed(layers):
        for node in _compat.inbound_nodes(layer):
            if any(id(t) in targets for t in node.output_tensors):
                feeds_output.add(id(layer))
                nested_out[id(layer)] = True
                if not layer.trainable_weights:
                    targets.update(id(t) for t in node.input_tensors)
    for layer in layers:
        if is_graph_model(layer):
            _boundary_layers(
                layer, nested_in.get(id(layer), False), nested_out.get(id(layer), False), fed_by_input, feeds_output
            )


def tensor_core_report(
    source: Source,
    batch_size: int | None = None,
    multiple: int = ALIGNMENT,
    print_fn: Callable[[str], None] | None = print,
) -> AlignmentReport:
    """Finds the dimensions of `source` that keep its math off Tensor Cores.

    float16 and bfloat16 matrix math runs on Tensor Cores when the GEMM's
    dimensions are multiples of 8 (NVIDIA's guidance). Seed 000 showed its
    generator slowed by widths 63/31/7 and batch 4090 on an A100 in 2021;
    on current hardware the cost is small (`MISALIGNMENT_COST`, printed
    with the warnings), so aligning is cheap insurance rather than a big
    speed-up. For every Dense,
    EinsumDense, convolution (not depthwise) and RNN layer this checks the
    output size (units, filters) and the input size (features, channels),
    and checks the batch size.

    A dimension set by the data (the channels or features of a model input,
    e.g. 3 colour channels or 100 noise values) or by the task (the units of
    a layer that produces a model output, e.g. 10 classes or 1 logit) is
    reported as `"info"`; everything else as `"warn"`. The roles are read
    from the functional graph; for a subclassed model the first layer's
    input and the last layer's output are assumed to be the data's and the
    task's.

    Args:
        source: A built `keras.Model`, or a trainer (all its networks).
        batch_size: The training batch size, or None to skip that check.
        multiple: The alignment to check (8 for float16/bfloat16).
        print_fn: Prints the report; None to stay quiet.

    Returns:
        The `AlignmentReport`; `.warnings` are the findings to act on.
    """
    if not isinstance(multiple, int) or multiple < 1:
        raise ValueError(f"multiple must be an integer >= 1. Received: multiple={multiple!r}")
    findings: list[AlignmentFinding] = []
    if batch_size is not None and batch_size % multiple:
        findings.append(AlignmentFinding("warn", "(batch)", "batch size", batch_size, _aligned(batch_size, multiple)))
    for model in networks(source).values():
        if not model.built:
            raise ValueError(f"Build the model first (call it on a batch). Received an unbuilt model: {model.name!r}")
        fed_by_input: set[int] = set()
        feeds_output: set[int] = set()
        layers = layer_paths(model)
        if is_graph_model(model):
            _boundary_layers(model, True, True, fed_by_input, feeds_output)
        else:
            gemm = [layer for _, layer in layers if _gemm_dimensions(layer)]
            if gemm:
                fed_by_input.add(id(gemm[0]))
                feeds_output.add(id(gemm[-1]))
        for path, layer in layers:
            for dimension, value, side in _gemm_dimensions(layer):
                if value % multiple == 0:
                    continue
                reason = ""
                if side == "in" and id(layer) in fed_by_input:
                    reason = "set by the model input"
                elif side == "out" and id(layer) in feeds_output:
                    reason = "set by the model output"
                findings.append(
                    AlignmentFinding(
                        "info" if reason else "warn", path, dimension, value, _aligned(value, multiple), reason
                    )
                )
    report = AlignmentReport(findings, batch_size, multiple)
    if print_fn is not None:
        print_fn(str(report))
    return report

"""Tensor Core alignment: the sizes that keep float16/bfloat16 math off Tensor Cores.

`tensor_core_report(model, batch_size)` lists every dimension that feeds
Tensor Core math (Dense units and input features, convolution filters and
input channels, RNN units and inputs, attention heads x key_dim, the batch
size) and is not a multiple of 8 (the GAN tutorial's pitfall: the generator
widths 63/31/7 and batch 4090; what it measured to cost is printed with the
report, `MISALIGNMENT_COST`).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import keras

from tfmp.float32_layers import layer_paths
from tfmp.run import _private_apis
from tfmp.run.diagnostics import _report
from tfmp.run.diagnostics._report import Source, is_graph_model, networks, table

__all__ = ["ALIGNMENT", "MISALIGNMENT_COST", "AlignmentFinding", "AlignmentReport", "tensor_core_report"]

ALIGNMENT = 8
"""Tensor Cores want float16/bfloat16 GEMM dimensions in multiples of 8."""

MISALIGNMENT_COST = (
    "What it costs on current hardware: the original tutorial's GAN with generator widths 63/31/7 at batch 4090 "
    "trained about 2% slower than the aligned one in float16 on an H100 with current cuDNN (PyTorch AMP, one "
    "run), not the large slowdown the tutorial showed on an A100 in 2021."
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


def _einsum_sizes(layer: keras.layers.EinsumDense) -> tuple[int | None, int | None]:
    """The GEMM sizes of an `EinsumDense`: (contracted input features, output features).

    Read from the equation, not from the kernel's axes one by one: the kernel
    of `"abc,cde->abde"` (a `MultiHeadAttention` projection) has shape
    `(features, heads, key_dim)`, and the matrix product it stands for
    contracts `c` and produces `d x e` = heads x key_dim values. Kernel axes
    the input and the output both carry are batched over, not multiplied.
    None for a side the equation has no axis on.
    """
    operands, output = layer.equation.split("->")
    inputs, kernel = operands.split(",")
    shape = [int(d) for d in layer.kernel.shape]
    contracted = [d for axis, d in zip(kernel, shape) if axis in inputs and axis not in output]
    produced = [d for axis, d in zip(kernel, shape) if axis in output and axis not in inputs]
    return (math.prod(contracted) if contracted else None, math.prod(produced) if produced else None)


def _merged(sizes: list[tuple[str, int]], suffix: str, side: str) -> list[tuple[str, int, str]]:
    """One dimension per distinct size, naming all that share it (`"query/key/value input features"`)."""
    names: dict[int, list[str]] = {}
    for name, size in sizes:
        names.setdefault(size, []).append(name)
    return [("/".join(group) + suffix, size, side) for size, group in names.items()]


def _attention_dimensions(layer: keras.layers.MultiHeadAttention) -> list[tuple[str, int, str]]:
    """The GEMM sizes of a `MultiHeadAttention`, named by its arguments.

    Its projections are `EinsumDense` layers whose kernels have a heads axis;
    the matrix products multiply heads x key_dim (query, key) and heads x
    value_dim (value, output) values, and the attention itself multiplies
    key_dim and value_dim per head. The head count alone is not a GEMM size.
    """
    query_in, _ = _einsum_sizes(layer.query_dense)
    key_in, _ = _einsum_sizes(layer.key_dense)
    value_in, _ = _einsum_sizes(layer.value_dense)
    _, output = _einsum_sizes(layer.output_dense)
    heads = layer.num_heads
    return [
        *_merged([("query", query_in), ("key", key_in), ("value", value_in)], " input features", "in"),
        *_merged([("heads x key_dim", heads * layer.key_dim), ("heads x value_dim", heads * layer.value_dim)], "", ""),
        *_merged([("key_dim", layer.key_dim), ("value_dim", layer.value_dim)], " (per head)", ""),
        ("output features", output, "out"),
    ]


def _gemm_dimensions(layer: keras.layers.Layer) -> list[tuple[str, int, str]]:
    """`(dimension, size, side)` of a layer's matrix math; side is "in", "out" or "" (inside the layer)."""
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
    if isinstance(layer, keras.layers.MultiHeadAttention):
        return _attention_dimensions(layer)
    if isinstance(layer, keras.layers.EinsumDense):
        contracted, produced = _einsum_sizes(layer)
        sizes = [("output features", produced, "out"), ("input features", contracted, "in")]
        return [size for size in sizes if size[1] is not None]
    if isinstance(layer, keras.layers.RNN) and hasattr(layer.cell, "units"):
        return [("units", layer.cell.units, "out"), ("input features", int(layer.cell.kernel.shape[0]), "in")]
    return []  # depthwise convolutions, normalisation, pooling, embeddings...: no Tensor Core GEMM


def _reported_whole(layer: keras.layers.Layer) -> bool:
    """Whether `layer`'s sub-layers are checked through it (by its own arguments) rather than one by one."""
    return isinstance(layer, keras.layers.MultiHeadAttention)


def _last_dimension(tensor: keras.KerasTensor) -> int | None:
    return tensor.shape[-1] if tensor.shape else None


def _boundary_layers(
    model: keras.Model,
    inputs_are_data: bool,
    outputs_are_outputs: bool,
    fed_by_input: set[int],
    feeds_output: set[int],
) -> None:
    """Marks layers fed by a model input / feeding a model output.

    Walks the functional graph, operations included (the `Add` of `x + y`).
    Weightless layers and operations (reshapes, dropout, activations, casts,
    residual additions) pass the mark on: forwards when all their inputs are
    the data's, or when their output is as wide as a data input (`x +
    inputs` is as wide as the inputs, whatever `x` is); backwards to all
    their inputs. Nested functional models are walked with what the outer
    graph says about their inputs and outputs.
    """
    operations = getattr(model, "operations", None) or model.layers  # a Sequential has no operations
    nested_in: dict[int, bool] = {}
    nested_out: dict[int, bool] = {}
    data = {id(t) for t in model.inputs} if inputs_are_data else set()
    for operation in operations:
        weightless = not getattr(operation, "weights", None)  # frozen layers still have weights
        for node in _private_apis.inbound_nodes(operation):
            inputs = node.input_tensors
            if not inputs:
                continue
            from_data = [t for t in inputs if id(t) in data]
            if len(from_data) == len(inputs):
                fed_by_input.add(id(operation))
                nested_in[id(operation)] = True
            data_widths = {_last_dimension(t) for t in from_data}
            for output in node.output_tensors if weightless else ():
                if len(from_data) == len(inputs) or _last_dimension(output) in data_widths - {None}:
                    data.add(id(output))
    targets = {id(t) for t in model.outputs} if outputs_are_outputs else set()
    for operation in reversed(operations):
        weightless = not getattr(operation, "weights", None)  # frozen layers still have weights
        for node in _private_apis.inbound_nodes(operation):
            if any(id(t) in targets for t in node.output_tensors):
                feeds_output.add(id(operation))
                nested_out[id(operation)] = True
                if weightless:
                    targets.update(id(t) for t in node.input_tensors)
    for layer in model.layers:
        if is_graph_model(layer):
            _boundary_layers(
                layer, nested_in.get(id(layer), False), nested_out.get(id(layer), False), fed_by_input, feeds_output
            )


def tensor_core_report(
    source: Source,
    batch_size: int | None = None,
    multiple: int = ALIGNMENT,
    print_fn: Any = _report.UNSET,
) -> AlignmentReport:
    """Finds the dimensions of `source` that keep its math off Tensor Cores.

    float16 and bfloat16 matrix math runs on Tensor Cores when the GEMM's
    dimensions are multiples of 8 (NVIDIA's guidance). The GAN tutorial
    showed its generator slowed by widths 63/31/7 and batch 4090 on an A100
    in 2021; on current hardware the cost is small (`MISALIGNMENT_COST`,
    printed with the warnings), so aligning is cheap insurance rather than a
    big speed-up. For every Dense, EinsumDense, convolution (not depthwise) and
    RNN layer this checks the output size (units, filters) and the input
    size (features, channels), and checks the batch size. An EinsumDense is
    checked on the sizes its equation multiplies (all contracted axes
    together, all produced axes together), and a MultiHeadAttention on its
    arguments: the input features, heads x key_dim, heads x value_dim,
    key_dim and value_dim per head, and the output features; not on the head
    count, which is no GEMM size.

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
        print_fn: Deprecated (tfmp 0.1 printed the report with it): warns, and still prints.

    Returns:
        The `AlignmentReport` (its `str()` is the table); `.warnings` are
        the findings to act on.
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
        covered = [f"{path}/" for path, layer in layers if _reported_whole(layer)]
        for path, layer in layers:
            if any(path.startswith(prefix) for prefix in covered):
                continue
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
    _report.removed_print_fn("tensor_core_report", print_fn, report)
    return report

"""Why is a mixed-precision run slow or wrong? Four reports on a user's own model.

* `tensor_core_report(model, batch_size)`: every dimension that feeds
  Tensor Core math (Dense units and input features, convolution filters and
  input channels, RNN units and inputs, the batch size) and is not a multiple
  of 8 (seed 000's pitfall: the generator widths 63/31/7 and batch 4090;
  about 2% on an H100 with current cuDNN, see `MISALIGNMENT_COST`).
* `float32_output_report(model)`: model outputs, softmax/sigmoid layers and
  losses computed in float16 or bfloat16 (seed 002: outputs stay float32).
* `gradient_report(trainer, batch)`: per trainable variable, what float16
  would do to its gradient: the fractions that would flush to zero
  (|g| < 2^-24), become subnormal (|g| < 2^-14) or overflow (|g| > 65504),
  without scaling and at a loss scale, plus a suggested static loss scale
  (seeds 001 and 003).
* `first_nonfinite(trainer, batch)`: when a loss or gradient is NaN or Inf,
  the first layer whose activation or gradient went non-finite.

Each function accepts a `keras.Model` or a `tfmp.trainers` trainer, returns a
report object whose `str()` is a readable table, and changes no global
state. `diagnose` runs all four.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
from typing import Any, Callable, Iterable, Sequence

import keras
import numpy as np
import tensorflow as tf

from tfmp import _compat
from tfmp import trainers as trainers_lib
from tfmp.precision import float32_copy
from tfmp.precision import layer_paths

__all__ = [
    "ALIGNMENT",
    "FLOAT16_MAX",
    "FLOAT16_MIN_NORMAL",
    "FLOAT16_MIN_SUBNORMAL",
    "MISALIGNMENT_COST",
    "SCALE_MARGIN",
    "AlignmentFinding",
    "AlignmentReport",
    "Diagnosis",
    "GradientReport",
    "NonFiniteReport",
    "ObjectiveGradients",
    "OutputFinding",
    "OutputReport",
    "VariableGradients",
    "diagnose",
    "first_nonfinite",
    "float32_copy",
    "float32_output_report",
    "gradient_report",
    "startup_warnings",
    "tensor_core_report",
    "write_gradient_summaries",
]

ALIGNMENT = 8
"""Tensor Cores want float16/bfloat16 GEMM dimensions in multiples of 8."""

MISALIGNMENT_COST = (
    "What it costs on current hardware: seed 000's GAN with generator widths 63/31/7 at batch 4090 trained "
    "about 2% slower than the aligned one in float16 on an H100 with current cuDNN (PyTorch AMP, one run), "
    "not the large slowdown the seed showed on an A100 in 2021."
)
"""The measured cost of misaligned sizes, printed under the alignment warnings."""

FLOAT16_MAX = 65504.0
FLOAT16_MIN_NORMAL = 2.0**-14
FLOAT16_MIN_SUBNORMAL = 2.0**-24

SCALE_MARGIN = 8.0
"""Headroom of the suggested static loss scale: max|g| x scale x 8 <= 65504.

Three binades, because the largest gradient of one batch is not the largest
of the run (it grows when the loss spikes or the learning rate warms up).
"""

_LOW_PRECISION = ("float16", "bfloat16")
Source = Any  # a keras.Model or a tfmp.trainers.MixedPrecisionTrainer


def _networks(source: Source) -> dict[str, keras.Model]:
    if isinstance(source, trainers_lib.MixedPrecisionTrainer):
        return source.networks
    if isinstance(source, keras.Model):
        return {source.name: source}
    raise TypeError(
        f"Expected a keras.Model or a tfmp.trainers trainer. Received: {type(source).__name__} {source!r}"
    )


def _table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """Left-aligned text columns."""
    rows = [[str(c) for c in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    lines = [fmt.format(*header), fmt.format(*("-" * w for w in widths))]
    lines += [fmt.format(*row) for row in rows]
    return "\n".join("  " + line.rstrip() for line in lines)


# --------------------------------------------------------------------------
# Tensor Core alignment
# --------------------------------------------------------------------------


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
        return "\n".join([title, _table(("severity", "layer", "dimension", "value", "aligned", "note"), rows), summary])


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
        return [("filters", layer.filters, "out"),
                ("pointwise input channels", int(layer.pointwise_kernel.shape[-2]), "in")]
    if isinstance(layer, _CONV_TRANSPOSE):
        return [("filters", layer.filters, "out"), ("input channels", int(layer.kernel.shape[-1]), "in")]
    if isinstance(layer, _CONV):
        return [("filters", layer.filters, "out"),
                ("input channels", int(layer.kernel.shape[-2]) * layer.groups, "in")]
    if isinstance(layer, keras.layers.EinsumDense):
        return [(f"kernel dim {i}", int(d), "inner") for i, d in enumerate(layer.kernel.shape)]
    if isinstance(layer, keras.layers.RNN) and hasattr(layer.cell, "units"):
        return [("units", layer.cell.units, "out"), ("input features", int(layer.cell.kernel.shape[0]), "in")]
    return []  # depthwise convolutions, normalisation, pooling...: no Tensor Core GEMM


def _is_graph_model(model: keras.layers.Layer) -> bool:
    try:
        return isinstance(model, keras.Model) and bool(model.inputs) and bool(model.outputs)
    except (AttributeError, ValueError):
        return False


def _boundary_layers(
    model: keras.Model, inputs_are_data: bool, outputs_are_outputs: bool,
    fed_by_input: set[int], feeds_output: set[int],
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
        if _is_graph_model(layer):
            _boundary_layers(layer, nested_in.get(id(layer), False), nested_out.get(id(layer), False),
                             fed_by_input, feeds_output)


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
    for model in _networks(source).values():
        if not model.built:
            raise ValueError(f"Build the model first (call it on a batch). Received an unbuilt model: {model.name!r}")
        fed_by_input: set[int] = set()
        feeds_output: set[int] = set()
        layers = layer_paths(model)
        if _is_graph_model(model):
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
                findings.append(AlignmentFinding(
                    "info" if reason else "warn", path, dimension, value, _aligned(value, multiple), reason))
    report = AlignmentReport(findings, batch_size, multiple)
    if print_fn is not None:
        print_fn(str(report))
    return report


# --------------------------------------------------------------------------
# float32 outputs
# --------------------------------------------------------------------------


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
        return "\n".join([title, _table(("where", "computed in low precision", "dtype", "fix"), rows)])


_SQUASHING = ("softmax", "log_softmax", "sigmoid", "hard_sigmoid", "log_sigmoid")


def _squashing_activation(layer: keras.layers.Layer) -> str | None:
    if isinstance(layer, keras.layers.Softmax):
        return "softmax"
    name = getattr(getattr(layer, "activation", None), "__name__", None)
    return name if name in _SQUASHING else None


def _output_dtypes(model: keras.Model) -> list[str]:
    if _is_graph_model(model):
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
        loss_networks = set(_networks(source)) if has_loss else set()
    for name, model in _networks(source).items():
        for path, layer in layer_paths(model):
            activation = _squashing_activation(layer)
            if activation and layer.compute_dtype in _LOW_PRECISION:
                findings.append(OutputFinding(
                    path, activation, layer.compute_dtype, "give this layer dtype='float32'"))
        for i, dtype in enumerate(_output_dtypes(model)):
            if dtype not in _LOW_PRECISION:
                continue
            findings.append(OutputFinding(
                f"{model.name} output {i}", "model output", dtype,
                "end with keras.layers.Activation('linear', dtype='float32')"))
            if name in loss_networks:
                findings.append(OutputFinding(
                    f"{model.name} output {i}", "loss input (logits/probabilities)", dtype,
                    "compute the loss on float32 outputs (the same fix)"))
    report = OutputReport(findings)
    if print_fn is not None:
        print_fn(str(report))
    return report


# --------------------------------------------------------------------------
# Gradient numerics
# --------------------------------------------------------------------------


@dataclasses.dataclass
class VariableGradients:
    """What float16 would do to one variable's gradient.

    Fractions are of all `count` values. `underflow` counts values that are
    non-zero in float32 but below 2^-24 (zero in float16), `subnormal`
    values in [2^-24, 2^-14) (kept with fewer than 10 mantissa bits) and
    `overflow` values above 65504 (infinite in float16). The `scaled_`
    fields are the same after multiplying by the report's loss scale.
    """

    name: str
    count: int
    max_abs: float
    nonfinite: int
    underflow: float
    subnormal: float
    overflow: float
    scaled_underflow: float | None = None
    scaled_subnormal: float | None = None
    scaled_overflow: float | None = None
    log2_abs: np.ndarray = dataclasses.field(default=None, repr=False)


def _fractions(values: np.ndarray) -> tuple[float, float, float]:
    """(underflow, subnormal, overflow) fractions of float16's range."""
    a = np.abs(values)
    n = max(a.size, 1)
    return (
        np.count_nonzero((a > 0) & (a < FLOAT16_MIN_SUBNORMAL)) / n,
        np.count_nonzero((a >= FLOAT16_MIN_SUBNORMAL) & (a < FLOAT16_MIN_NORMAL)) / n,
        np.count_nonzero(a > FLOAT16_MAX) / n,
    )


def _variable_gradients(name: str, grad: np.ndarray, loss_scale: float | None) -> VariableGradients:
    g = np.asarray(grad, np.float64).ravel()
    finite = np.isfinite(g)
    g_finite = np.where(finite, g, 0.0)
    a = np.abs(g_finite)
    stats = VariableGradients(name, g.size, float(a.max()) if a.size else 0.0, int(np.count_nonzero(~finite)),
                              *_fractions(g_finite))
    if loss_scale is not None:
        stats.scaled_underflow, stats.scaled_subnormal, stats.scaled_overflow = _fractions(g_finite * loss_scale)
    stats.log2_abs = np.log2(a[a > 0]).astype(np.float32)
    return stats


def _suggest_scale(max_abs: float, margin: float) -> float | None:
    """The largest power of two S with max_abs * S * margin <= 65504."""
    if not max_abs > 0 or not math.isfinite(max_abs):
        return None
    exponent = math.floor(math.log2(FLOAT16_MAX / (margin * max_abs)))
    while max_abs * 2.0**exponent * margin > FLOAT16_MAX:  # guard against log2 rounding
        exponent -= 1
    return 2.0**exponent


@dataclasses.dataclass
class ObjectiveGradients:
    """The gradient numerics of one objective (one loss and its variables)."""

    name: str
    variables: list[VariableGradients]
    loss_scale: float | None
    suggested_scale: float | None
    margin: float

    def _total(self, field: str) -> float:
        count = sum(v.count for v in self.variables)
        return sum(getattr(v, field) * v.count for v in self.variables) / max(count, 1)

    @property
    def max_abs(self) -> float:
        return max((v.max_abs for v in self.variables), default=0.0)

    @property
    def underflow(self) -> float:
        return self._total("underflow")

    @property
    def subnormal(self) -> float:
        return self._total("subnormal")

    @property
    def overflow(self) -> float:
        return self._total("overflow")

    @property
    def scaled(self) -> tuple[float, float, float] | None:
        """(underflow, subnormal, overflow) at the loss scale, if one was given."""
        if self.loss_scale is None:
            return None
        return tuple(self._total(f"scaled_{f}") for f in ("underflow", "subnormal", "overflow"))


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.3g}%"


def _power_of_two(x: float | None) -> str:
    if x is None:
        return "none"
    exponent = math.log2(x)
    return f"2^{int(exponent)} ({x:g})" if exponent == int(exponent) else f"{x:g}"


@dataclasses.dataclass
class GradientReport:
    """The findings of `gradient_report`, one section per objective."""

    objectives: list[ObjectiveGradients]
    batch_size: int
    compute_dtype: str = "float16"

    def __str__(self) -> str:
        out = [
            "Gradient numerics in float16 (float32 gradients of a float32 copy of the model with the "
            f"same weights, one batch of {self.batch_size}; fractions of all values):"
        ]
        if self.compute_dtype != "float16":
            out.append(
                f"  (this model computes in {self.compute_dtype}, which has float32's range: nothing here "
                "underflows or overflows in it; the fractions are what float16 would lose)"
            )
        for obj in self.objectives:
            scale = obj.loss_scale
            header = ["variable", "count", "max |g|", "zero <2^-24", "subnormal <2^-14", "overflow >65504"]
            if scale is not None:
                header += [f"x{scale:g}: zero", "subnormal", "overflow"]
            rows = []
            for v in obj.variables:
                row = [v.name, v.count, f"{v.max_abs:.3g}", _pct(v.underflow), _pct(v.subnormal), _pct(v.overflow)]
                if scale is not None:
                    row += [_pct(v.scaled_underflow), _pct(v.scaled_subnormal), _pct(v.scaled_overflow)]
                rows.append(row)
            total = ["(all)", sum(v.count for v in obj.variables), f"{obj.max_abs:.3g}",
                     _pct(obj.underflow), _pct(obj.subnormal), _pct(obj.overflow)]
            if scale is not None:
                total += [_pct(x) for x in obj.scaled]
            rows.append(total)
            out.append(f"{obj.name}:")
            out.append(_table(header, rows))
            nonfinite = sum(v.nonfinite for v in obj.variables)
            if nonfinite:
                out.append(f"  {nonfinite} gradient value(s) are already NaN/Inf in float32; see first_nonfinite.")
            out.append(
                f"  suggested static loss scale: {_power_of_two(obj.suggested_scale)}, the largest power of two "
                f"with max|g| x scale x {obj.margin:g} <= 65504 (a {obj.margin:g}x margin for larger gradients "
                "in later steps). Dynamic scaling finds it by itself."
            )
        return "\n".join(out)


def _float32_gradients(
    trainer: trainers_lib.MixedPrecisionTrainer, data: Any, reference: trainers_lib.MixedPrecisionTrainer | None
) -> list[tuple[str, list, list]]:
    """(objective, variable names, float32 gradients) per objective, from a float32 copy."""
    if reference is None:
        reference = trainer.float32_copy()
    else:
        for name, network in trainer.networks.items():
            reference.networks[name].set_weights(network.get_weights())
    results = []
    for objective in reference.objectives(data):
        with tf.GradientTape() as tape:
            loss = objective.loss_fn()
        grads = tape.gradient(loss, objective.variables)
        names = [v.path for v in objective.variables]
        results.append((objective.name, names, [np.zeros(v.shape) if g is None else np.asarray(g)
                                                 for v, g in zip(objective.variables, grads)]))
    return results


def _scale_of(objective: trainers_lib.Objective) -> float | None:
    """The objective's optimizer's current loss scale, if it scales."""
    from tfmp import loss_scale as loss_scale_lib

    opt = objective.optimizer
    return float(opt.loss_scale) if isinstance(opt, loss_scale_lib.LossScaleOptimizer) else None


def _compute_dtype(trainer: trainers_lib.MixedPrecisionTrainer) -> str:
    """float16 if any layer computes in it, else bfloat16 if any does, else float32."""
    dtypes = {layer.compute_dtype for model in trainer.networks.values() for _, layer in layer_paths(model)}
    return next((d for d in ("float16", "bfloat16") if d in dtypes), "float32")


@contextlib.contextmanager
def _state_preserved(trainer: trainers_lib.MixedPrecisionTrainer):
    """Restores the non-trainable state a diagnostic forward pass advances.

    Training-mode passes update BatchNorm moving statistics and advance the
    noise and dropout seed generators; diagnostics must leave the run as it
    was, so these are put back.
    """
    variables = trainer.non_trainable_variables
    values = [v.numpy() for v in variables]
    try:
        yield
    finally:
        for variable, value in zip(variables, values):
            variable.assign(value)


def _as_trainer(source: Source, loss: Any) -> trainers_lib.MixedPrecisionTrainer:
    if isinstance(source, trainers_lib.MixedPrecisionTrainer):
        return source
    model = next(iter(_networks(source).values()))
    loss = loss if loss is not None else getattr(model, "loss", None)
    if loss is None:
        raise ValueError(
            f"A plain model needs its loss: pass loss=... or compile the model. Received: loss=None for {model.name!r}"
        )
    trainer = trainers_lib.ClassifierTrainer(model)
    trainer.compile(keras.optimizers.SGD(), loss=loss, loss_scale="none")
    return trainer


def gradient_report(
    source: Source,
    data: Any,
    loss: Any = None,
    loss_scale: float | str | None = "current",
    margin: float = SCALE_MARGIN,
    print_fn: Callable[[str], None] | None = print,
    reference: trainers_lib.MixedPrecisionTrainer | None = None,
) -> GradientReport:
    """What float16 would lose of each variable's gradient on one batch.

    The gradients are computed in float32, on a float32 copy of the
    networks with the same weights (`float32_copy`), so they are the values
    a float16 run tries to represent; the fractions say how many it cannot:
    below 2^-24 they flush to zero, below 2^-14 they are subnormal, above
    65504 they overflow. The same fractions are given after multiplying by
    `loss_scale`, and a static loss scale is suggested per objective.

    Args:
        source: A trainer (each objective: e.g. the GAN's generator and
            discriminator) or a `keras.Model` with `loss`.
        data: One batch, as `fit()` would receive it.
        loss: The loss of a plain model (default: its compiled loss).
        loss_scale: A scale, `"current"` (each objective's optimizer's scale
            when it is a `tfmp.LossScaleOptimizer`, else none), or None.
        margin: The suggested scale keeps max|g| x scale x margin <= 65504.
        print_fn: Prints the report; None to stay quiet.
        reference: A float32 copy made earlier by `trainer.float32_copy()`,
            to reuse across calls; its weights are refreshed from `source`.
    """
    if not margin >= 1:
        raise ValueError(f"margin must be >= 1. Received: margin={margin!r}")
    if loss_scale is not None and loss_scale != "current" and not (
        isinstance(loss_scale, (int, float)) and loss_scale > 0
    ):
        raise ValueError(f"loss_scale must be a positive number, 'current' or None. Received: loss_scale={loss_scale!r}")
    trainer = _as_trainer(source, loss)
    if loss_scale == "current":
        with _state_preserved(trainer):
            scales = {o.name: _scale_of(o) for o in trainer.objectives(data)}
    else:
        scales = {}
    batch_size = int(tf.shape(tf.nest.flatten(data)[0])[0])
    objectives = []
    for name, names, grads in _float32_gradients(trainer, data, reference):
        scale = scales.get(name) if loss_scale == "current" else loss_scale
        scale = None if scale is None else float(scale)
        stats = [_variable_gradients(n, g, scale) for n, g in zip(names, grads)]
        max_abs = max((s.max_abs for s in stats), default=0.0)
        objectives.append(ObjectiveGradients(name, stats, scale, _suggest_scale(max_abs, margin), margin))
    report = GradientReport(objectives, batch_size, _compute_dtype(trainer))
    if print_fn is not None:
        print_fn(str(report))
    return report


def write_gradient_summaries(report: GradientReport, logdir: str, step: int) -> None:
    """Writes a report's fractions as scalars and log2|g| as histograms.

    Everything goes to the `diagnostics` sub-run of `logdir`:
    `<objective>/underflow_fraction`, `.../subnormal_fraction`,
    `.../overflow_fraction` (and `..._at_loss_scale` when scaled),
    `<objective>/suggested_loss_scale_log2`, and histograms
    `<objective>/log2_abs_grad` (all variables) and
    `<objective>/log2_abs_grad/<variable>`.
    """
    writer = tf.summary.create_file_writer(os.path.join(logdir, "diagnostics"))
    with writer.as_default(step=step):
        for obj in report.objectives:
            for field in ("underflow", "subnormal", "overflow"):
                tf.summary.scalar(f"{obj.name}/{field}_fraction", getattr(obj, field))
            if obj.scaled is not None:
                for field, value in zip(("underflow", "subnormal", "overflow"), obj.scaled):
                    tf.summary.scalar(f"{obj.name}/{field}_fraction_at_loss_scale", value)
            if obj.suggested_scale is not None:
                tf.summary.scalar(f"{obj.name}/suggested_loss_scale_log2", math.log2(obj.suggested_scale))
            tf.summary.histogram(f"{obj.name}/log2_abs_grad", np.concatenate([v.log2_abs for v in obj.variables]))
            for v in obj.variables:
                if v.log2_abs.size:
                    tf.summary.histogram(f"{obj.name}/log2_abs_grad/{v.name}", v.log2_abs)
    writer.flush()
    writer.close()


# --------------------------------------------------------------------------
# First non-finite layer
# --------------------------------------------------------------------------


@dataclasses.dataclass
class NonFiniteReport:
    """Where non-finite values first appear in one training step.

    Attributes:
        objective: The trainer objective (e.g. `"generator"`).
        layer: `<model>/<layer>`, `"(input batch)"` or `"(loss)"`; None when
            everything is finite.
        tensor: Which tensor: `"input batch"`, `"output"` (forward pass),
            `"loss"`, `"gradient w.r.t. output"`, `"gradient w.r.t. input"`
            (the layer's own backward pass) or `"gradient of <variable>"`.
        dtype: The tensor's dtype.
        shape: The tensor's shape.
        nan: NaN count.
        inf: Inf count.
        loss_scale: The scale the loss was multiplied by before the backward pass.
    """

    objective: str | None = None
    layer: str | None = None
    tensor: str | None = None
    dtype: str | None = None
    shape: tuple[int, ...] | None = None
    nan: int = 0
    inf: int = 0
    loss_scale: float | None = None

    @property
    def found(self) -> bool:
        return self.layer is not None

    def __str__(self) -> str:
        scale = f" at loss scale {self.loss_scale:g}" if self.loss_scale else ""
        if not self.found:
            return f"First non-finite layer: none; the loss, every activation and every gradient are finite{scale}."
        return (
            f"First non-finite layer: {self.layer} ({self.objective}), its {self.tensor}: {self.dtype} "
            f"{list(self.shape)}, {self.nan} NaN and {self.inf} Inf{scale}."
        )


def _nonfinite_counts(value: Any) -> tuple[int, int]:
    """(NaN count, Inf count) of a floating tensor; (0, 0) for other dtypes."""
    value = tf.convert_to_tensor(value)
    if not value.dtype.is_floating:
        return 0, 0
    a = tf.cast(value, tf.float32).numpy()
    return int(np.count_nonzero(np.isnan(a))), int(np.count_nonzero(np.isinf(a)))


class _LayerRecorder:
    """Records each layer call's inputs and output during one forward pass.

    A hook on the instances' `call` (restored on exit), like PyTorch's
    forward hooks: Keras 3 has none. Inputs are watched by `tape`, so the
    gradients reaching each layer and leaving it can be asked for.
    """

    def __init__(self, models: dict[str, keras.Model], tape: tf.GradientTape):
        self.tape = tape
        self.calls: list[tuple[str, keras.layers.Layer, list[tf.Tensor], list[tf.Tensor]]] = []
        self._layers = [(f"{path}", layer) for model in models.values() for path, layer in layer_paths(model)]

    def __enter__(self) -> "_LayerRecorder":
        for path, layer in self._layers:
            if "call" in layer.__dict__:
                raise ValueError(f"Layer {path!r} already has a patched call; cannot record it.")
            layer.call = self._hook(path, layer, layer.call)
        return self

    def __exit__(self, *exc: Any) -> None:
        for _, layer in self._layers:
            layer.__dict__.pop("call", None)

    def _hook(self, path: str, layer: keras.layers.Layer, call: Callable) -> Callable:
        def recorded(*args, **kwargs):
            inputs = [t for t in tf.nest.flatten((args, kwargs)) if tf.is_tensor(t) and t.dtype.is_floating]
            for t in inputs:
                self.tape.watch(t)
            outputs = call(*args, **kwargs)
            floats = [t for t in tf.nest.flatten(outputs) if tf.is_tensor(t) and t.dtype.is_floating]
            self.calls.append((path, layer, inputs, floats))
            return outputs

        return recorded


def first_nonfinite(
    source: Source,
    data: Any,
    loss: Any = None,
    loss_scale: float | str | None = "current",
) -> NonFiniteReport:
    """Finds where a training step first produces NaN or Inf.

    Runs each objective's forward pass in the model's own precision with a
    recorder on every layer, then its backward pass. In order:

    1. the input batch;
    2. forward: the first layer, in execution order, whose output is
       non-finite;
    3. the loss;
    4. backward, from the loss towards the inputs: per layer, the gradient
       arriving at its output, the gradients of its variables, and the
       gradient its backward pass sends to its input.

    Under float16 the loss is multiplied by `loss_scale` first, as the step
    does; a non-finite gradient there is what dynamic loss scaling skips,
    and the report names the layer that overflowed.

    Nothing changes: BatchNorm statistics and seed-generator states are
    restored afterwards.

    Args:
        source: A trainer or a `keras.Model` (with `loss`, or compiled).
        data: One batch, as `fit()` would receive it.
        loss: The loss of a plain model.
        loss_scale: A scale, `"current"` (the objective's optimizer's) or None.

    Returns:
        The first non-finite tensor, or a report with `found == False`.
    """
    trainer = _as_trainer(source, loss)
    with _state_preserved(trainer):
        return _first_nonfinite(trainer, data, loss_scale)


def _first_nonfinite(
    trainer: trainers_lib.MixedPrecisionTrainer, data: Any, loss_scale: float | str | None
) -> NonFiniteReport:
    for tensor in tf.nest.flatten(data):
        nan, inf = _nonfinite_counts(tensor)
        if nan or inf:
            tensor = tf.convert_to_tensor(tensor)
            return NonFiniteReport(None, "(input batch)", "input batch", tensor.dtype.name,
                                   tuple(tensor.shape), nan, inf)
    last_scale = None
    for objective in trainer.objectives(data):
        scale = _scale_of(objective) if loss_scale == "current" else loss_scale
        last_scale = scale
        with tf.GradientTape() as tape:
            with _LayerRecorder(trainer.networks, tape) as recorder:
                value = objective.loss_fn()
            scaled = value * scale if scale else value

        def report(layer, tensor_name, tensor, nan, inf):
            return NonFiniteReport(objective.name, layer, tensor_name, tensor.dtype.name, tuple(tensor.shape),
                                   nan, inf, scale)

        for path, _, _, outputs in recorder.calls:
            for out in outputs:
                nan, inf = _nonfinite_counts(out)
                if nan or inf:
                    return report(path, "output", out, nan, inf)
        nan, inf = _nonfinite_counts(scaled)
        if nan or inf:
            return report("(loss)", "loss", scaled, nan, inf)
        # Backward order: from the loss towards the inputs. One gradient call.
        checks = []
        for path, layer, inputs, outputs in reversed(recorder.calls):
            checks += [(path, "gradient w.r.t. output", t) for t in outputs]
            checks += [(path, f"gradient of {v.path}", v) for v in layer.trainable_variables]
            checks += [(path, "gradient w.r.t. input", t) for t in inputs]
        grads = tape.gradient(scaled, [t for _, _, t in checks])
        for (path, what, _), g in zip(checks, grads):
            if g is not None:
                nan, inf = _nonfinite_counts(g)
                if nan or inf:
                    return report(path, what, g, nan, inf)
    return NonFiniteReport(loss_scale=last_scale)


# --------------------------------------------------------------------------
# All together
# --------------------------------------------------------------------------


def startup_warnings(source: Source, batch_size: int | None) -> str:
    """A short warning block for the start of a training run, or "" when all is well.

    Runs the alignment and float32-output checks and keeps what needs action:
    alignment warnings (not info) and every float32-output finding.
    """
    alignment = tensor_core_report(source, batch_size, print_fn=None)
    outputs = float32_output_report(source, print_fn=None)
    lines = [f"  {f.layer}: {f.dimension} {f.value} is not a multiple of {alignment.multiple} (use {f.aligned})"
             for f in alignment.warnings]
    lines += [f"  {f.where}: {f.what} in {f.dtype}; {f.fix}" for f in outputs.findings]
    if not lines:
        return ""
    return "\n".join(["warning: mixed-precision pitfalls found (details: tfmp.run.training.diagnose_run):", *lines])


@dataclasses.dataclass
class Diagnosis:
    """All four reports for one model, precision and batch."""

    alignment: AlignmentReport
    outputs: OutputReport
    gradients: GradientReport
    nonfinite: NonFiniteReport

    def __str__(self) -> str:
        return "\n\n".join(str(r) for r in (self.alignment, self.outputs, self.gradients, self.nonfinite))


def diagnose(
    source: Source, data: Any, loss: Any = None, loss_scale: float | str | None = "current",
    batch_size: int | None = None, print_fn: Callable[[str], None] | None = print,
) -> Diagnosis:
    """Runs all four reports on `source` with one batch `data`.

    `batch_size` is the training batch size the alignment report checks
    (default: the size of `data`).
    """
    if batch_size is None:
        batch_size = int(tf.shape(tf.nest.flatten(data)[0])[0])
    diagnosis = Diagnosis(
        tensor_core_report(source, batch_size, print_fn=None),
        float32_output_report(source, loss, print_fn=None),
        gradient_report(source, data, loss, loss_scale, print_fn=None),
        first_nonfinite(source, data, loss, loss_scale),
    )
    if print_fn is not None:
        print_fn(str(diagnosis))
    return diagnosis

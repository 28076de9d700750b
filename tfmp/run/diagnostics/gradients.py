"""Gradient numerics: what float16 would lose of each variable's gradient.

`gradient_report(trainer, batch)` gives, per trainable variable, the
fractions that would flush to zero (|g| < 2^-24), become subnormal
(|g| < 2^-14) or overflow (|g| > 65504), without scaling and at a loss
scale, plus a suggested static loss scale; `write_gradient_summaries`
writes a report to TensorBoard.
"""

from __future__ import annotations

import dataclasses
import math
import os
from typing import Any

import numpy as np
import tensorflow as tf

from tfmp import _deprecated
from tfmp import trainers as trainers_lib
from tfmp.float32_layers import layer_paths
from tfmp.run.diagnostics import _report
from tfmp.run.diagnostics._report import Source, as_trainer, scale_of, state_preserved, table

__all__ = [
    "FLOAT16_MAX",
    "FLOAT16_MIN_NORMAL",
    "FLOAT16_MIN_SUBNORMAL",
    "SCALE_MARGIN",
    "GradientReport",
    "ObjectiveGradients",
    "VariableGradients",
    "gradient_report",
    "write_gradient_summaries",
]

FLOAT16_MAX = 65504.0
FLOAT16_MIN_NORMAL = 2.0**-14
FLOAT16_MIN_SUBNORMAL = 2.0**-24

SCALE_MARGIN = 8.0
"""Headroom of the suggested static loss scale: max|g| x scale x 8 <= 65504.

Three binades, because the largest gradient of one batch is not the largest
of the run (it grows when the loss spikes or the learning rate warms up).
"""


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
    stats = VariableGradients(
        name, g.size, float(a.max()) if a.size else 0.0, int(np.count_nonzero(~finite)), *_fractions(g_finite)
    )
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
            total = [
                "(all)",
                sum(v.count for v in obj.variables),
                f"{obj.max_abs:.3g}",
                _pct(obj.underflow),
                _pct(obj.subnormal),
                _pct(obj.overflow),
            ]
            if scale is not None:
                total += [_pct(x) for x in obj.scaled]
            rows.append(total)
            out.append(f"{obj.name}:")
            out.append(table(header, rows))
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
        # An Embedding's gradient is IndexedSlices (the rows the batch looked up); as a dense
        # array, the rows it did not look up are zeros, which the fractions do not count as lost.
        dense = [
            np.zeros(v.shape) if g is None else np.asarray(tf.convert_to_tensor(g))
            for v, g in zip(objective.variables, grads)
        ]
        results.append((objective.name, names, dense))
    return results


def _compute_dtype(trainer: trainers_lib.MixedPrecisionTrainer) -> str:
    """float16 if any layer computes in it, else bfloat16 if any does, else float32."""
    dtypes = {layer.compute_dtype for model in trainer.networks.values() for _, layer in layer_paths(model)}
    return next((d for d in ("float16", "bfloat16") if d in dtypes), "float32")


def gradient_report(
    source: Source,
    data: Any,
    loss: Any = None,
    loss_scale: float | str | None = "current",
    margin: float = SCALE_MARGIN,
    reference: trainers_lib.MixedPrecisionTrainer | None = None,
    *,
    print_fn: Any = _report.UNSET,
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
        reference: A float32 copy made earlier by `trainer.float32_copy()`,
            to reuse across calls; its weights are refreshed from `source`.
        print_fn: Deprecated (tfmp 0.1 printed the report with it): warns, and still prints.

    Returns:
        The `GradientReport`; its `str()` is the table.
    """
    if not margin >= 1:
        raise ValueError(f"margin must be >= 1. Received: margin={margin!r}")
    if (
        loss_scale is not None
        and loss_scale != "current"
        and not (isinstance(loss_scale, (int, float)) and loss_scale > 0)
    ):
        raise ValueError(
            f"loss_scale must be a positive number, 'current' or None. Received: loss_scale={loss_scale!r}"
        )
    trainer = as_trainer(source, loss)
    with state_preserved(trainer):
        originals = {o.name: o for o in trainer.objectives(data)}
    batch_size = int(tf.shape(tf.nest.flatten(data)[0])[0])
    objectives = []
    for name, names, grads in _float32_gradients(trainer, data, reference):
        original = originals.get(name)
        if original is not None and len(original.variables) == len(names):
            # The user's variable paths: a copy's can differ (a cloned Bidirectional's layers lose its prefix).
            names = [v.path for v in original.variables]
        if loss_scale == "current":
            scale = scale_of(original) if original is not None else None
        else:
            scale = loss_scale
        scale = None if scale is None else float(scale)
        stats = [_variable_gradients(n, g, scale) for n, g in zip(names, grads)]
        max_abs = max((s.max_abs for s in stats), default=0.0)
        objectives.append(ObjectiveGradients(name, stats, scale, _suggest_scale(max_abs, margin), margin))
    report = GradientReport(objectives, batch_size, _compute_dtype(trainer))
    _report.removed_print_fn("gradient_report", print_fn, report)
    return report


@_deprecated.renamed_argument("write_gradient_summaries(logdir)")
def write_gradient_summaries(report: GradientReport, tensorboard_dir: str, step: int) -> None:
    """Writes a report's fractions as scalars and log2|g| as histograms.

    Everything goes to the `diagnostics` sub-run of `tensorboard_dir` (the
    run's TensorBoard directory; `logdir=` is its deprecated name):
    `<objective>/underflow_fraction`, `.../subnormal_fraction`,
    `.../overflow_fraction` (and `..._at_loss_scale` when scaled),
    `<objective>/suggested_loss_scale_log2`, and histograms
    `<objective>/log2_abs_grad` (all variables) and
    `<objective>/log2_abs_grad/<variable>`.
    """
    writer = tf.summary.create_file_writer(os.path.join(tensorboard_dir, "diagnostics"))
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

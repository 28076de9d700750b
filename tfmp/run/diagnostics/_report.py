"""What the four reports share: the source they accept, its trainer form, the table layout.

Private to `tfmp.run.diagnostics`: the reports import these; users import
the reports.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Sequence
from typing import Any

import keras

from tfmp import _deprecated
from tfmp import trainers as trainers_lib
from tfmp.float32_layers import is_graph_model

__all__ = ["Source", "as_trainer", "is_graph_model", "networks", "scale_of", "state_preserved", "table"]

Source = Any  # a keras.Model or a tfmp.trainers.MixedPrecisionTrainer


def networks(source: Source) -> dict[str, keras.Model]:
    """The networks of a trainer, or `{name: model}` for a model."""
    if isinstance(source, trainers_lib.MixedPrecisionTrainer):
        return source.networks
    if isinstance(source, keras.Model):
        return {source.name: source}
    raise TypeError(f"Expected a keras.Model or a tfmp.trainers trainer. Received: {type(source).__name__} {source!r}")


def table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """Left-aligned text columns."""
    rows = [[str(c) for c in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    lines = [fmt.format(*header), fmt.format(*("-" * w for w in widths))]
    lines += [fmt.format(*row) for row in rows]
    return "\n".join("  " + line.rstrip() for line in lines)


def scale_of(objective: trainers_lib.Objective) -> float | None:
    """The objective's optimizer's current loss scale, if it scales."""
    from tfmp import loss_scale as loss_scale_lib

    opt = objective.optimizer
    return float(opt.loss_scale) if isinstance(opt, loss_scale_lib.LossScaleOptimizer) else None


@contextlib.contextmanager
def state_preserved(trainer: trainers_lib.MixedPrecisionTrainer):
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


def as_trainer(source: Source, loss: Any) -> trainers_lib.MixedPrecisionTrainer:
    """`source` if it is a trainer, else a `tfmp.Trainer` of the model with `loss` and no loss scaling."""
    if isinstance(source, trainers_lib.MixedPrecisionTrainer):
        return source
    model = next(iter(networks(source).values()))
    loss = loss if loss is not None else getattr(model, "loss", None)
    if loss is None:
        raise ValueError(
            f"A plain model needs its loss: pass loss=... or compile the model. Received: loss=None for {model.name!r}"
        )
    trainer = trainers_lib.Trainer(model)
    trainer.compile(keras.optimizers.SGD(), loss=loss, loss_scale="none")
    return trainer


# `print_fn` not given: the default of the reports since tfmp 0.2, which print nothing themselves.
UNSET: Any = object()


def removed_print_fn(function: str, print_fn: Any, report: Any) -> None:
    """tfmp 0.1's `print_fn` argument of a report: warns that it goes in tfmp 0.3, and prints `report` with it.

    The reports return their result (its `str()` is the table) and log
    nothing themselves since tfmp 0.2; code written for 0.1 that passes
    `print_fn` keeps working, with a `DeprecationWarning`, for one release.
    """
    if print_fn is UNSET:
        return
    _deprecated.warn(f"{function}(print_fn)", received=f"print_fn={print_fn!r}", stacklevel=4)
    if print_fn is not None:
        print_fn(str(report))

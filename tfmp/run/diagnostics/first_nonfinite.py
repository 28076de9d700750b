"""First non-finite layer: where a training step first produces NaN or Inf.

`first_nonfinite(trainer, batch)` checks the input batch, each layer's
output, the loss and, backwards, each layer's gradients, and names the
first tensor holding NaN or Inf.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from tfmp import trainers as trainers_lib
from tfmp.float32_layers import layer_paths
from tfmp.run.diagnostics._report import Source, as_trainer, scale_of, state_preserved

__all__ = ["NonFiniteReport", "first_nonfinite"]


_INPUT_BATCH, _LOSS = "(input batch)", "(loss)"
# The parts of a batch as Keras's fit() unpacks a tuple of one to three (`unpack_x_y_sample_weight`).
_BATCH_PARTS = ("x", "y", "sample_weight")


@dataclasses.dataclass
class NonFiniteReport:
    """Where non-finite values first appear in one training step.

    Attributes:
        objective: The trainer objective (e.g. `"generator"`); None for the input batch.
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
        input: For the input batch, which of its tensors: a named input by its
            key (`'length'`), else by its place in Keras's `(x, y,
            sample_weight)` (`x`, `y`, `x[1]`, `y['label']`).

    `str(report)` is the diagnosis's section; `where()` is the same finding
    as a clause, for a sentence of its own (the non-finite stop's message).
    """

    objective: str | None = None
    layer: str | None = None
    tensor: str | None = None
    dtype: str | None = None
    shape: tuple[int, ...] | None = None
    nan: int = 0
    inf: int = 0
    loss_scale: float | None = None
    input: str | None = None

    @property
    def found(self) -> bool:
        return self.layer is not None

    def where(self) -> str:
        """The finding as a clause, without a full stop.

        E.g. `"the input batch's 'length' (float32 [32, 1]): 1 NaN and 0 Inf"`
        or `"layer chain/dense (model), its output (float16 [2, 4]): 2 NaN and
        0 Inf at loss scale 32768"`; `"no tensor"` when everything is finite.
        """
        if not self.found:
            return "no tensor"
        counts = f"{self.dtype} {list(self.shape)}): {self.nan} NaN and {self.inf} Inf"
        if self.layer == _INPUT_BATCH:
            return f"the input batch's {self.input or 'x'} ({counts}"
        scale = f" at loss scale {self.loss_scale:g}" if self.loss_scale else ""
        objective = f" ({self.objective})" if self.objective else ""
        if self.layer == _LOSS:
            return f"the loss{objective} ({counts}{scale}"
        return f"layer {self.layer}{objective}, its {self.tensor} ({counts}{scale}"

    def __str__(self) -> str:
        if not self.found:
            scale = f" at loss scale {self.loss_scale:g}" if self.loss_scale else ""
            return f"First non-finite layer: none; the loss, every activation and every gradient are finite{scale}."
        if self.layer == _INPUT_BATCH:
            return f"First non-finite layer: none; before any layer, {self.where()}."
        return f"First non-finite layer: {self.where()}."


def _input_name(part: str, path: tuple[Any, ...]) -> str:
    """A batch tensor's name: `part` (`x`, `y`, `sample_weight`) and its `path` inside it.

    A named input of `x` (a dict's key) goes by its key alone, as the model's
    inputs are named: `'length'`; otherwise `x[1]`, `y['label']`.
    """
    if part == "x" and path and isinstance(path[0], str):
        return repr(path[0]) + "".join(f"[{key!r}]" for key in path[1:])
    return part + "".join(f"[{key!r}]" for key in path)


def _named_inputs(data: Any) -> list[tuple[str, Any]]:
    """Every tensor of a batch with its name (`_input_name`), in `tf.nest` order (a dict's keys sorted)."""
    parts = tuple(data) if isinstance(data, list) else data
    # A plain tuple is (x, y, sample_weight); a namedtuple, like any other structure, is all x.
    if not (type(parts) is tuple and 1 <= len(parts) <= 3):
        parts = (data,)
    return [
        (_input_name(part, tuple(path)), tensor)
        for part, structure in zip(_BATCH_PARTS, parts)
        for path, tensor in keras.tree.flatten_with_path(structure)
    ]


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

    def __enter__(self) -> _LayerRecorder:
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
    trainer = as_trainer(source, loss)
    with state_preserved(trainer):
        return _first_nonfinite(trainer, data, loss_scale)


def _first_nonfinite(
    trainer: trainers_lib.MixedPrecisionTrainer, data: Any, loss_scale: float | str | None
) -> NonFiniteReport:
    for name, tensor in _named_inputs(data):
        nan, inf = _nonfinite_counts(tensor)
        if nan or inf:
            tensor = tf.convert_to_tensor(tensor)
            return NonFiniteReport(
                None, _INPUT_BATCH, "input batch", tensor.dtype.name, tuple(tensor.shape), nan, inf, input=name
            )
    last_scale = None
    for objective in trainer.objectives(data):
        scale = scale_of(objective) if loss_scale == "current" else loss_scale
        last_scale = scale
        with tf.GradientTape() as tape:
            with _LayerRecorder(trainer.networks, tape) as recorder:
                value = objective.loss_fn()
            scaled = value * scale if scale else value

        def report(layer, tensor_name, tensor, nan, inf):
            return NonFiniteReport(
                objective.name, layer, tensor_name, tensor.dtype.name, tuple(tensor.shape), nan, inf, scale
            )

        for path, _, _, outputs in recorder.calls:
            for out in outputs:
                nan, inf = _nonfinite_counts(out)
                if nan or inf:
                    return report(path, "output", out, nan, inf)
        nan, inf = _nonfinite_counts(scaled)
        if nan or inf:
            return report(_LOSS, "loss", scaled, nan, inf)
        # Backward order: from the loss towards the inputs. One gradient call.
        checks = []
        for path, layer, inputs, outputs in reversed(recorder.calls):
            checks += [(path, "gradient w.r.t. output", t) for t in outputs]
            checks += [(path, f"gradient of {v.path}", v) for v in layer.trainable_variables]
            checks += [(path, "gradient w.r.t. input", t) for t in inputs]
        with trainer.gradient_scope():
            grads = tape.gradient(scaled, [t for _, _, t in checks])
        for (path, what, _), g in zip(checks, grads):
            if g is not None:
                nan, inf = _nonfinite_counts(g)
                if nan or inf:
                    return report(path, what, g, nan, inf)
    return NonFiniteReport(loss_scale=last_scale)

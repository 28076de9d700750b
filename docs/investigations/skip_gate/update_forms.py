"""Four more forms of the skipped update, timed in the trainer against the bare step (issue 23, 2026-11-26).

Each form is bit-identical to Keras's Adam (checked at the end of every run:
all variants' weights and optimizer variables after the timed steps, and a
NaN batch afterwards changes nothing). Timed as `attribution.py` times its
variants: trainers of the same weights, driven as the benchmark drives them,
one-step rounds interleaved with the bare hand-written step, geometric mean of
the paired ratios with a 95% bootstrap interval.

* `gated`: the trainer as built (the update waits for the finite check in a cond);
* `grouped`: `gated`, with Adam's update of the variables of up to 16,384
  values done once on their concatenation (a multi-tensor update, as Keras's
  PyTorch backend does with `torch._foreach_*`): 4,430 update ops become 1,671
  for MobileNetV2, and the update alone takes about 10% less CPU (`update_cost.py`);
* `deferred`: the update's new values (variables, moments, iteration count)
  computed outside the cond as the gradients arrive, without writing; the cond
  only commits them (an assignment adopts the new buffer);
* `deferred_grouped`: `deferred`, with the small variables grouped as in `grouped`;
* `delta`: the moments' increments computed outside the cond, the in-place
  `assign_add`s and the step inside it (7 of Adam's 12 passes over a large
  variable left after the check, instead of all 12);
* `noskip`: the bare inner optimizer, no gate (the trainer without the safety net).

    python3 docs/investigations/skip_gate/update_forms.py float32 200 gated,grouped,deferred_grouped,delta
"""

import contextlib
import math
import sys

import attribution
import numpy as np
import tensorflow as tf
from keras import ops

from tfmp import loss_scale as loss_scale_lib
from tfmp.run.benchmark import timing
from tfmp.run.benchmark import workload as workload_lib

FORMS = ("gated", "grouped", "deferred", "deferred_grouped", "delta", "noskip")
GROUP_MAX_SIZE = 16384


def _flat(tensors):
    return tf.concat([t if t.shape.rank == 1 else tf.reshape(t, [-1]) for t in tensors], axis=0)


def _split(flat, variables):
    pieces = tf.split(flat, [math.prod(v.shape) for v in variables])
    return [p if len(v.shape) == 1 else tf.reshape(p, v.shape) for p, v in zip(pieces, variables)]


def _alpha(optimizer, learning_rate):
    # Keras's Adam.update_step's bias correction, as it computes it for a float32 variable.
    dtype = "float32"
    local_step = ops.cast(optimizer.iterations + 1, dtype)
    beta_1_power = ops.power(ops.cast(optimizer.beta_1, dtype), local_step)
    beta_2_power = ops.power(ops.cast(optimizer.beta_2, dtype), local_step)
    return ops.cast(learning_rate, dtype) * ops.sqrt(1 - beta_2_power) / (1 - beta_1_power)


def _adam_new_values(optimizer, gradient, m, v, value, alpha):
    """Keras's Adam.update_step (keras/src/optimizers/adam.py) as pure arithmetic: the same ops per element."""
    m = ops.add(m, ops.multiply(ops.subtract(gradient, m), 1 - optimizer.beta_1))
    v = ops.add(v, ops.multiply(ops.subtract(ops.square(gradient), v), 1 - optimizer.beta_2))
    value = ops.subtract(value, ops.divide(ops.multiply(m, alpha), ops.add(ops.sqrt(v), optimizer.epsilon)))
    return m, v, value


def _slots(optimizer, variable):
    index = optimizer._get_variable_index(variable)
    return optimizer._momentums[index], optimizer._velocities[index]


def _small(variable):
    return math.prod(variable.shape) <= GROUP_MAX_SIZE


def _grouped_new_values(optimizer, grads, variables, alpha):
    """[(variable, new value)] for the moments and values of `variables`, updated as one concatenation."""
    slots = [_slots(optimizer, v) for v in variables]
    momentums, velocities = [s[0] for s in slots], [s[1] for s in slots]
    m, v, value = _adam_new_values(
        optimizer,
        _flat(grads),
        _flat([s.value for s in momentums]),
        _flat([s.value for s in velocities]),
        _flat([x.value for x in variables]),
        alpha,
    )
    return [
        (variable, new)
        for group, flat in ((momentums, m), (velocities, v), (variables, value))
        for variable, new in zip(group, _split(flat, group))
    ]


@contextlib.contextmanager
def grouped_adam(optimizer):
    """Within, `optimizer.apply` updates its small variables as one concatenation (Keras's Adam only)."""
    per_variable = optimizer._backend_update_step

    def backend_update_step(grads, variables, learning_rate):
        small = [(g, v) for g, v in zip(grads, variables) if _small(v)]
        rest = [(g, v) for g, v in zip(grads, variables) if not _small(v)]
        per_variable([g for g, _ in rest], [v for _, v in rest], learning_rate)
        alpha = _alpha(optimizer, learning_rate)
        for variable, new in _grouped_new_values(optimizer, [g for g, _ in small], [v for _, v in small], alpha):
            optimizer.assign(variable, new)

    optimizer._backend_update_step = backend_update_step
    try:
        yield
    finally:
        del optimizer._backend_update_step


def _deferred(optimizer, grads, variables, finite, group):
    alpha = _alpha(optimizer, optimizer._get_current_learning_rate())
    pending = []
    if group:
        small = [(g, v) for g, v in zip(grads, variables) if _small(v)]
        pending += _grouped_new_values(optimizer, [g for g, _ in small], [v for _, v in small], alpha)
        grads, variables = zip(*[(g, v) for g, v in zip(grads, variables) if not _small(v)])
    for gradient, variable in zip(grads, variables):
        m_var, v_var = _slots(optimizer, variable)
        m, v, value = _adam_new_values(optimizer, gradient, m_var.value, v_var.value, variable.value, alpha)
        pending += [(m_var, m), (v_var, v), (variable, value)]
    pending.append((optimizer.iterations, optimizer.iterations + 1))

    def commit():
        for variable, value in pending:
            optimizer.assign(variable, value)
        return tf.constant(True)

    tf.cond(finite, commit, lambda: tf.constant(False))


def _delta(optimizer, grads, variables, finite):
    learning_rate = optimizer._get_current_learning_rate()
    increments = []
    for gradient, variable in zip(grads, variables):
        m, v = _slots(optimizer, variable)
        dm = ops.multiply(ops.subtract(gradient, m), 1 - optimizer.beta_1)
        dv = ops.multiply(ops.subtract(ops.square(gradient), v), 1 - optimizer.beta_2)
        increments.append((variable, m, v, dm, dv))

    def commit():
        alpha = _alpha(optimizer, learning_rate)
        for variable, m, v, dm, dv in increments:
            optimizer.assign_add(m, dm)
            optimizer.assign_add(v, dv)
            optimizer.assign_sub(variable, ops.divide(ops.multiply(m, alpha), ops.add(ops.sqrt(v), optimizer.epsilon)))
        optimizer.iterations.assign_add(1)
        return tf.constant(True)

    tf.cond(finite, commit, lambda: tf.constant(False))


_FORM = {"name": "gated"}
_apply_if_finite = loss_scale_lib.LossScaleOptimizer._apply_if_finite
_apply_inner = loss_scale_lib.LossScaleOptimizer._apply_inner


def _patched_apply_if_finite(self, grads, trainable_variables=None, unscale=True, keep=()):
    form = _FORM["name"]
    if form not in ("deferred", "deferred_grouped", "delta"):
        return _apply_if_finite(self, grads, trainable_variables, unscale, keep)
    finite = loss_scale_lib.all_finite(grads)
    if form == "delta":
        _delta(self.inner_optimizer, grads, trainable_variables, finite)
    else:
        _deferred(self.inner_optimizer, grads, trainable_variables, finite, group=form == "deferred_grouped")
    self._update_state(finite)


def _patched_apply_inner(self, grads, trainable_variables, unscale, keep):
    if _FORM["name"] == "grouped":
        with grouped_adam(self.inner_optimizer):
            return _apply_inner(self, grads, trainable_variables, unscale, keep)
    return _apply_inner(self, grads, trainable_variables, unscale, keep)


def _build(name, task, precision, weights, dataset, batch_size):
    """(driver, trainer) of one form: a trainer of `weights`, traced with the form's update, warmed up."""
    workload = workload_lib.build_workload(task, precision, False, steps=1000, hand_written=False)
    trainer = workload.trainer
    trainer.set_weights(weights)
    if name == "noskip":
        trainer.optimizer = trainer.optimizer.inner_optimizer
    _FORM["name"] = name  # read while the step is traced
    try:
        return timing.trainer_driver(workload, dataset, (batch_size,), 3, True), trainer
    finally:
        _FORM["name"] = "gated"


def _state(trainer):
    """The model's variables and the (inner) optimizer's, as numpy arrays."""
    optimizer = getattr(trainer.optimizer, "inner_optimizer", trainer.optimizer)
    return [v.numpy() for v in trainer.variables] + [v.numpy() for v in optimizer.variables]


def _same(a, b):
    return len(a) == len(b) and all(np.array_equal(np.atleast_1d(x).view(np.uint8), np.atleast_1d(y).view(np.uint8)) for x, y in zip(a, b))


def main():
    precision = sys.argv[1] if len(sys.argv) > 1 else "float32"
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 200
    names = sys.argv[3].split(",") if len(sys.argv) > 3 else ["gated", "grouped", "deferred_grouped", "delta"]
    unknown = sorted(set(names) - set(FORMS))
    if unknown:
        raise SystemExit(f"Unknown forms {unknown}; choose from {', '.join(FORMS)}.")
    loss_scale_lib.LossScaleOptimizer._apply_if_finite = _patched_apply_if_finite
    loss_scale_lib.LossScaleOptimizer._apply_inner = _patched_apply_inner
    task, workload, dataset, batch_size, drivers = attribution.setup(precision)
    weights = workload.trainer.get_weights()
    trainers = {}
    for name in names:
        drivers[name], trainers[name] = _build(name, task, precision, weights, dataset, batch_size)
    timing.interleave(list(drivers.values()), 1, rounds)
    rng = np.random.default_rng(0)
    for name in drivers:
        print(attribution.paired_to_hand(precision, name, drivers, rng, width=17), flush=True)
    # Every form ran the same steps on the same batch from the same weights.
    states = {name: _state(trainer) for name, trainer in trainers.items()}
    first = names[0]
    print("bit-identical to", first, "after", 3 + rounds, "steps:", {n: _same(states[first], s) for n, s in states.items()})
    x, y = workload.batch
    poisoned = iter(tf.data.Dataset.from_tensors((x * np.float32("nan"), y)).repeat())
    kept = {}
    for name, trainer in trainers.items():
        if name != "noskip":
            trainer.train_function(poisoned)
            kept[name] = _same(states[name], _state(trainer))
    print("a NaN batch changed nothing:", kept)


if __name__ == "__main__":
    main()

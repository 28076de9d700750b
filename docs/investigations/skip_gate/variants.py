"""Ways to gate an optimizer update on finite gradients, timed against the bare update.

Issue 23: the trainer's non-finite skip costs MobileNetV2 (batch 128, 2 CPU
cores) about 5% of its step. This times one hand-written float32 step in
six forms, on identical networks in one process, interleaved:

* `bare`: `optimizer.apply(grads)`, no skip (the benchmark's baseline);
* `gated`: `tf.cond(all_finite(grads), apply, no-op)` (what tfmp does);
* `gated_unlowered`: the same cond kept as one functional `If` op
  (not lowered to `Switch`/`Merge`);
* `deferred`: the update computed under `keras.StatelessScope` with the
  optimizer's `assign`/`assign_add`/`assign_sub` redirected into the scope,
  so the update's arithmetic can run during the backward pass, then one cond
  commits the new values (variables, slots, iteration count);
* `deferred_unlowered`: `deferred` with an unlowered commit;
* `speculative`: a snapshot of every variable and slot, the update applied at
  once, and a cond that restores the snapshot on a non-finite gradient.

`--check` first verifies that `deferred` is bit-identical to `bare` over three
steps, and that a NaN batch leaves its trainable and optimizer variables
unchanged.

    python3 docs/investigations/skip_gate/variants.py [--check] [--rounds=40] [--precision=float32]
"""

import argparse
import statistics
import time

import keras
import numpy as np
import tensorflow as tf
from tensorflow.python.ops import control_flow_util_v2

from tfmp import loss_scale as loss_scale_lib
from tfmp.run.benchmark import settings
from tfmp.run.benchmark import workload as workload_lib

VARIANTS = ("bare", "gated", "gated_unlowered", "deferred", "deferred_unlowered", "speculative")
STEPS_PER_ROUND = 6


def _cond(pred, true_fn, lowered):
    control_flow_util_v2._DISABLE_LOWER_USING_SWITCH_MERGE = not lowered
    try:
        return tf.cond(pred, true_fn, lambda: tf.constant(False))
    finally:
        control_flow_util_v2._DISABLE_LOWER_USING_SWITCH_MERGE = False


def deferred_apply(optimizer, grads, variables, finite, lowered=True):
    """Computes the update in a StatelessScope, then commits it if `finite`."""
    by_handle = {id(v.value): v for v in variables}

    def keras_variable(variable):
        return by_handle.get(id(variable), variable)

    def assign(variable, value):
        variable = keras_variable(variable)
        variable.assign(tf.cast(value, variable.dtype))

    def assign_add(variable, value):
        variable = keras_variable(variable)
        variable.assign(variable + tf.cast(value, variable.dtype))

    def assign_sub(variable, value):
        variable = keras_variable(variable)
        variable.assign(variable - tf.cast(value, variable.dtype))

    optimizer.assign, optimizer.assign_add, optimizer.assign_sub = assign, assign_add, assign_sub
    try:
        with keras.StatelessScope() as scope:
            optimizer.apply(grads, variables)
    finally:
        del optimizer.assign, optimizer.assign_add, optimizer.assign_sub
    pending = [(v, scope.get_current_value(v)) for v in [*variables, *optimizer.variables]]
    pending = [(v, value) for v, value in pending if value is not None]

    def commit():
        for variable, value in pending:
            variable.assign(value)
        return tf.constant(True)

    _cond(finite, commit, lowered)


def speculative_apply(optimizer, grads, variables, finite):
    everything = [*variables, *optimizer.variables]
    snapshot = [tf.identity(v) for v in everything]
    optimizer.apply(grads, variables)

    def restore():
        for variable, value in zip(everything, snapshot):
            variable.assign(value)
        return tf.constant(True)

    _cond(tf.logical_not(finite), restore, lowered=True)


def make_step(variant, network, optimizer, loss_fn):
    variables = network.trainable_variables

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, network(x, training=True))
        grads = tape.gradient(loss, variables)
        finite = loss_scale_lib.all_finite(grads)
        if variant == "bare":
            optimizer.apply(grads, variables)
        elif variant.startswith("gated"):
            _cond(finite, lambda: (optimizer.apply(grads, variables), tf.constant(True))[1], variant == "gated")
        elif variant.startswith("deferred"):
            deferred_apply(optimizer, grads, variables, finite, lowered=variant == "deferred")
        else:
            speculative_apply(optimizer, grads, variables, finite)
        return loss

    return step


def build(variants, precision):
    task = settings.default_specs()["mobilenet_v2"]
    built, reference = {}, None
    for variant in variants:
        workload = workload_lib.build_workload(task, precision, False, steps=1000, hand_written=False)
        (network,) = workload.trainer.networks.values()
        if reference is None:
            reference = network.get_weights()
        network.set_weights(reference)
        (optimizer,) = task.optimizers(1000)
        optimizer.build(network.trainable_variables)
        built[variant] = (make_step(variant, network, optimizer, task.loss()), network, optimizer)
    return built, workload.batch


def check(built, batch):
    x, y = batch
    (bare, net_b, opt_b), (deferred, net_d, opt_d) = built["bare"], built["deferred"]
    for _ in range(3):
        bare(x, y)
        deferred(x, y)
    same = all(np.array_equal(a, b) for a, b in zip(net_b.get_weights(), net_d.get_weights()))
    same &= all(np.array_equal(a.numpy(), b.numpy()) for a, b in zip(opt_b.variables, opt_d.variables))
    before = [v.numpy() for v in [*net_d.trainable_variables, *opt_d.variables]]
    poisoned = x.numpy()
    poisoned[0, 0, 0, 0] = np.nan
    deferred(tf.constant(poisoned), y)
    kept = all(np.array_equal(a, v.numpy()) for a, v in zip(before, [*net_d.trainable_variables, *opt_d.variables]))
    print(f"deferred == bare after 3 steps: {same}; a NaN step changed nothing: {kept}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--precision", default="float32")
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    keras.config.set_dtype_policy(args.precision)
    built, (x, y) = build(VARIANTS, args.precision)
    if args.check:
        check(built, (x, y))
    for step, _, _ in built.values():
        for _ in range(3):
            step(x, y).numpy()
    times = {v: [] for v in VARIANTS}
    for r in range(args.rounds):
        for variant in VARIANTS if r % 2 == 0 else VARIANTS[::-1]:
            step = built[variant][0]
            start = time.perf_counter()
            for _ in range(STEPS_PER_ROUND):
                out = step(x, y)
            out.numpy()
            times[variant].append(time.perf_counter() - start)
    for variant in VARIANTS:
        ratios = [b / t for b, t in zip(times["bare"], times[variant])]
        print(
            f"{args.precision} {variant:19s} {statistics.median(times[variant]) / STEPS_PER_ROUND * 1000:6.1f} ms/step, "
            f"paired ratio to bare: median {statistics.median(ratios):.3f} (min {min(ratios):.3f}, max {max(ratios):.3f})"
        )


if __name__ == "__main__":
    main()

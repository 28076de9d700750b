"""Which part of the trainer's safety net costs MobileNetV2's step: variants timed against the bare step.

Issue 23. Every variant is a trainer of the same weights (batch 128), driven
as the benchmark drives it (`tfmp.run.benchmark.timing.trainer_driver`), and
the bare hand-written step is the reference. Rounds are one step long and
interleaved (`timing.interleave`), so that the machine's slow stretches
(whole seconds at a time on the 2-core CPU) fall on both sides of each pair.
A variant changes one thing, at trace time, to measure it; none is a way to
train (`nocheck` applies every update, NaN or not):

* `gated`: the trainer as built (skip-only optimizer, gated update,
  BatchNorm transaction);
* `keras`: the same, driven by Keras's own `train_function`;
* `spec`: `speculative_update=True` on the skip-only optimizer;
* `nobn`: no BatchNorm snapshot or restore;
* `nocheck`: the finite check replaced by a constant True (so grappler
  removes the gate);
* `nocheck_spec`: both, leaving the speculative update's out-of-place
  writes alone;
* `noskip`: the bare inner optimizer (no gate, no BatchNorm transaction).

Prints each variant's median images/s and the geometric mean of its paired
ratios to the bare step, with a 95% bootstrap interval; with `keras` among
the variants, each one's paired ratio to it too.

    python3 docs/investigations/skip_gate/attribution.py float32 150 gated,nocheck,noskip
"""

import sys

import keras
import numpy as np
import tensorflow as tf

from tfmp import loss_scale as loss_scale_lib
from tfmp.run.benchmark import settings, timing
from tfmp.run.benchmark import workload as workload_lib

VARIANTS = ("gated", "keras", "spec", "nobn", "nocheck", "nocheck_spec", "noskip")


def _interval(log_ratios, rng):
    """The geometric mean of the ratios and its 95% bootstrap interval."""
    means = [np.mean(rng.choice(log_ratios, len(log_ratios))) for _ in range(2000)]
    return np.exp(np.mean(log_ratios)), np.exp(np.percentile(means, 2.5)), np.exp(np.percentile(means, 97.5))


def variant_driver(name, task, precision, weights, dataset, batch_size):
    """A trainer of `weights` with `name`'s one change, warmed up and ready to time."""
    workload = workload_lib.build_workload(task, precision, False, steps=1000, hand_written=False)
    trainer = workload.trainer
    trainer.set_weights(weights)
    if "noskip" in name:
        trainer.optimizer = trainer.optimizer.inner_optimizer
    if "nobn" in name:
        trainer.step_state_variables = lambda: []
    if "spec" in name:
        trainer.optimizer.speculative_update = True
    all_finite = loss_scale_lib.all_finite
    if "nocheck" in name:
        loss_scale_lib.all_finite = lambda grads: tf.constant(True)
    try:
        if name == "keras":
            trainer.fit(dataset, epochs=1, steps_per_epoch=1, verbose=0)
            keras.Model.make_train_function(trainer, force=True)
            function, iterator = trainer.train_function, iter(dataset)
            driver = timing.Driver(lambda: function(iterator), (batch_size,), 1)
            driver.run(3)
            return driver
        return timing.trainer_driver(workload, dataset, (batch_size,), 3, True)  # traced here
    finally:
        loss_scale_lib.all_finite = all_finite


def setup(precision):
    """(task, workload, dataset, batch size, {"hand": the bare step's driver}) of MobileNetV2 under `precision`."""
    keras.config.set_dtype_policy(precision)
    task = settings.default_specs()["mobilenet_v2"]
    workload = workload_lib.build_workload(task, precision, False, steps=1000)
    dataset = tf.data.Dataset.from_tensors(workload.batch).repeat()
    batch_size = int(workload.batch[0].shape[0])
    return task, workload, dataset, batch_size, {"hand": timing.hand_written_driver(workload, dataset, 3)}


def paired_to_hand(precision, name, drivers, rng, width=13):
    """One line: `name`'s median images/s and its paired ratio to the bare step, with its 95% interval."""
    driver = drivers[name]
    ratio = _interval(np.log(np.array(driver.images_per_sec) / np.array(drivers["hand"].images_per_sec)), rng)
    line = f"{precision} {name:{width}s} {driver.median_images_per_sec:7.1f} img/s, paired to hand "
    return line + "{:.3f} [{:.3f}, {:.3f}]".format(*ratio)


def main():
    precision = sys.argv[1] if len(sys.argv) > 1 else "float32"
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 150
    names = sys.argv[3].split(",") if len(sys.argv) > 3 else ["gated", "nocheck", "noskip"]
    unknown = sorted(set(names) - set(VARIANTS))
    if unknown:
        raise SystemExit(f"Unknown variants {unknown}; choose from {', '.join(VARIANTS)}.")
    task, workload, dataset, batch_size, drivers = setup(precision)
    weights = workload.trainer.get_weights()
    for name in names:
        drivers[name] = variant_driver(name, task, precision, weights, dataset, batch_size)
    timing.interleave(list(drivers.values()), 1, rounds)
    rng = np.random.default_rng(0)
    for name, driver in drivers.items():
        speed = np.array(driver.images_per_sec)
        line = paired_to_hand(precision, name, drivers, rng)
        if "keras" in drivers and name != "keras":
            to_keras = _interval(np.log(speed / np.array(drivers["keras"].images_per_sec)), rng)
            line += ", to keras {:.3f} [{:.3f}, {:.3f}]".format(*to_keras)
        print(line, flush=True)


if __name__ == "__main__":
    main()

"""The trainer and two gated hand-written steps, timed against the bare hand-written step in one process.

Issue 23: does the non-finite gate's form (tf.keras 2's gated update, or
`tfmp.LossScaleOptimizer(speculative_update=True)`, which applies the update
at once and undoes a skipped one) show in MobileNetV2's step on this machine?
Six drivers of the same network (batch 128), interleaved with
`tfmp.run.benchmark.timing.interleave` (4 steps a round), each fed by a
`tf.data` iterator inside its graph:

* `hand`: the benchmark's hand-written bare step (`optimizer.apply`, no gate);
* `trainer`: the trainer's `train_function`, as the benchmark times it, with
  `speculative_update=True` set on its skip-only optimizer before tracing;
* `trainer_gated`: a second trainer of the same weights, gated update;
* `train_step`: the first trainer's `train_step` called from a plain
  `tf.function`, as the hand-written step is (no Keras `train_function`
  around it: no nested function, `Optional`, or per-step host check);
* `hand_gated` / `hand_speculative`: the hand-written step with a skip-only
  `tfmp.LossScaleOptimizer` (fixed scale 1), gated or speculative.

Prints each driver's median images/s and its median paired ratio to `hand`
(min-max over the rounds).

    python3 docs/investigations/skip_gate/trainer_ab.py [float32|mixed_bfloat16] [rounds=40]
"""

import statistics
import sys

import keras
import tensorflow as tf

import tfmp
from tfmp.run.benchmark import settings, timing
from tfmp.run.benchmark import workload as workload_lib

STEPS_PER_ROUND = 4


def hand_written_driver(task, network, dataset, batch_size, speculative_update):
    """The hand-written step with a skip-only loss-scale optimizer (the trainer's gate, without the trainer)."""
    variables = network.trainable_variables
    (inner,) = task.optimizers(1000)
    optimizer = tfmp.LossScaleOptimizer(inner, dynamic=False, initial_scale=1.0, speculative_update=speculative_update)
    optimizer.build(variables)
    loss_fn = task.loss()
    iterator = iter(dataset)

    @tf.function
    def step(iterator):
        x, y = next(iterator)
        with tf.GradientTape() as tape:
            loss = loss_fn(y, network(x, training=True))
        optimizer.apply(tape.gradient(loss, variables), variables)
        return loss

    driver = timing.Driver(lambda: step(iterator), (batch_size,), 1)
    driver.run(3)
    return driver


def train_step_driver(trainer, dataset, batch_size):
    """The trainer's own `train_step`, fetched and called as the hand-written step is."""
    iterator = iter(dataset)

    @tf.function
    def step(iterator):
        return trainer.train_step(next(iterator))

    driver = timing.Driver(lambda: step(iterator), (batch_size,), trainer.images_per_example)
    driver.run(3)
    return driver


def main():
    precision = sys.argv[1] if len(sys.argv) > 1 else "float32"
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 40
    keras.config.set_dtype_policy(precision)
    task = settings.default_specs()["mobilenet_v2"]
    workload = workload_lib.build_workload(task, precision, False, steps=1000)
    workload.trainer.optimizer.speculative_update = True  # read when the step is traced
    dataset = tf.data.Dataset.from_tensors(workload.batch).repeat()
    batch_size = int(workload.batch[0].shape[0])
    gated = workload_lib.build_workload(task, precision, False, steps=1000, hand_written=False)
    gated.trainer.set_weights(workload.trainer.get_weights())
    (network,) = workload.trainer.networks.values()
    drivers = {
        "hand": timing.hand_written_driver(workload, dataset, 3),
        "trainer": timing.trainer_driver(workload, dataset, (batch_size,), 3, True),
        "trainer_gated": timing.trainer_driver(gated, dataset, (batch_size,), 3, True),
        "train_step": train_step_driver(workload.trainer, dataset, batch_size),
        "hand_gated": hand_written_driver(task, network, dataset, batch_size, False),
        "hand_speculative": hand_written_driver(task, network, dataset, batch_size, True),
    }
    timing.interleave(list(drivers.values()), STEPS_PER_ROUND, rounds)
    base = drivers["hand"].images_per_sec
    for name, driver in drivers.items():
        ratios = [a / b for a, b in zip(driver.images_per_sec, base)]
        print(
            f"{precision} {name:17s} {driver.median_images_per_sec:7.1f} img/s, paired ratio to hand: "
            f"median {statistics.median(ratios):.3f} (min {min(ratios):.3f}, max {max(ratios):.3f})"
        )


if __name__ == "__main__":
    main()

"""The seed GAN's tanh computed in float32 inside its bfloat16 layers, timed against Keras's bfloat16 tanh (issue 23).

The kernel ceiling (docs/PERFORMANCE.md, "Kernel ceilings") lists `TanhGrad`
as the GAN's slowest op in bfloat16 on the AVX512-BF16 CPU: 54.1 ms a step
against 15.7 ms in float32. This builds the GAN three times, as the benchmark
builds it (`tfmp.run.benchmark.workload`): float32; mixed_bfloat16 as today;
and mixed_bfloat16 with the hidden convolutions' activation
`cast(tanh(cast(x, float32)), x.dtype)`, so the tanh and its gradient run in
float32 at the price of two casts each way. The trainers' steps are timed in
one-step rounds, interleaved; printed: each one's geometric mean speed-up
over float32 and the float32-tanh form over today's, with 95% bootstrap
intervals.

    python3 docs/investigations/gan_tanh/float32_tanh.py 40
"""

import functools
import sys

import keras
import numpy as np
import tensorflow as tf

from tfmp import precision as precision_lib
from tfmp.run import tasks
from tfmp.run.benchmark import settings, timing
from tfmp.run.benchmark import workload as workload_lib


def float32_tanh(x):
    return tf.cast(tf.tanh(tf.cast(x, tf.float32)), x.dtype)


def driver(precision, activation):
    """The GAN trainer's warmed-up driver, its hidden convolutions built with `activation`."""
    build_generator, build_discriminator = tasks.build_generator, tasks.build_discriminator
    tasks.build_generator = functools.partial(build_generator, activation=activation)
    tasks.build_discriminator = functools.partial(build_discriminator, activation=activation)
    try:
        with precision_lib.precision_scope(precision):
            keras.utils.set_random_seed(0)
            task = settings.default_specs()["gan"]
            workload = workload_lib.build_workload(task, precision, False, steps=1000, hand_written=False)
            dataset = tf.data.Dataset.from_tensors(workload.batch).repeat()
            return timing.trainer_driver(workload, dataset, (task.config.batch_size,), 2, True)
    finally:
        tasks.build_generator, tasks.build_discriminator = build_generator, build_discriminator


def interval(log_ratios, rng):
    means = [np.mean(rng.choice(log_ratios, len(log_ratios))) for _ in range(2000)]
    return np.exp(np.mean(log_ratios)), np.exp(np.percentile(means, 2.5)), np.exp(np.percentile(means, 97.5))


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 40
    drivers = {
        "float32": driver("float32", "tanh"),
        "bfloat16": driver("mixed_bfloat16", "tanh"),
        "bfloat16, float32 tanh": driver("mixed_bfloat16", float32_tanh),
    }
    timing.interleave(list(drivers.values()), 1, rounds)
    rng = np.random.default_rng(0)
    speed = {name: np.array(d.images_per_sec) for name, d in drivers.items()}
    for name, d in drivers.items():
        ratio = interval(np.log(speed[name] / speed["float32"]), rng)
        print(f"{name:23s} {d.median_images_per_sec:7.1f} img/s; / float32 " + "{:.3f} [{:.3f}, {:.3f}]".format(*ratio))
    ratio = interval(np.log(speed["bfloat16, float32 tanh"] / speed["bfloat16"]), rng)
    print("float32 tanh / bfloat16 tanh: {:.3f} [{:.3f}, {:.3f}]".format(*ratio))


if __name__ == "__main__":
    main()

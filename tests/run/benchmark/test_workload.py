"""Tests for tfmp/run/benchmark/workload.py: the hand-written step does the trainer's math."""

import keras
import numpy as np
import pytest
import tensorflow as tf
from benchmark_tiny import BATCH, tiny_specs

import tfmp
from tfmp.run import benchmark, tasks
from tfmp.run import config as config_lib


@pytest.mark.parametrize(
    # The GAN only under float16 (two loss-scaled optimizers): its tracing is slow.
    "model, precision",
    [("tiny", "float32"), ("tiny", "mixed_float16"), ("tiny_gan", "mixed_float16")],
)
def test_hand_written_step_is_the_trainers_math(model, precision):
    # Two builds from the same seed: two trainer steps on one, two
    # hand-written steps on the other, give bit-identical weights.
    spec = tiny_specs()[model]
    weights = []
    for path in ("trainer", "hand_written"):
        with tfmp.precision_scope(precision):
            keras.utils.set_random_seed(0)
            workload = benchmark.build_workload(spec, precision, False)
            initial = [v.numpy() for v in workload.trainer.trainable_variables]
            if path == "trainer":
                data = tf.data.Dataset.from_tensors(workload.batch).repeat()
                workload.trainer.fit(data, epochs=1, steps_per_epoch=2, shuffle=False, verbose=0)
            else:
                for _ in range(2):
                    workload.hand_written_step(workload.batch)
        weights.append([v.numpy() for v in workload.trainer.trainable_variables])
    assert any(not np.array_equal(a, b) for a, b in zip(initial, weights[1]))
    for a, b in zip(*weights):
        np.testing.assert_array_equal(a, b)
    scaled = [isinstance(o, tfmp.LossScaleOptimizer) for o in workload.hand_written_optimizers]
    assert scaled == [precision == "mixed_float16"] * (2 if model == "tiny_gan" else 1)
    assert workload.images_per_step == (2 if model == "tiny_gan" else 1) * BATCH


def _dense():
    x = keras.Input((4,))
    return keras.Model(x, keras.layers.Dense(3, activation="softmax", dtype="float32")(x))


def test_a_user_task_without_the_benchmarks_hooks_gets_its_first_batch_and_the_supervised_step():
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(20, 4)).astype(np.float32), rng.integers(0, 3, 20)
    task = tasks.SupervisedTask(
        _dense, (x, y), loss="sparse_categorical_crossentropy", config=config_lib.TrainConfig(batch_size=8)
    )
    first = next(iter(task.train_data(None)))
    np.testing.assert_array_equal(task.benchmark_batch()[0].numpy(), first[0].numpy())
    with tfmp.precision_scope("float32"):
        workload = benchmark.build_workload(task, "float32", False)
    assert workload.batch[0].shape == (8, 4) and len(workload.hand_written_optimizers) == 1
    before = [v.numpy() for v in workload.trainer.trainable_variables]
    loss = workload.hand_written_step(workload.batch)
    assert np.isfinite(float(loss))
    assert any(not np.array_equal(a, v.numpy()) for a, v in zip(before, workload.trainer.trainable_variables))

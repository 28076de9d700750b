"""Tests for tfmp/run/benchmark/launches.py, and through it the step's cost on a GPU, counted on a CPU.

The counters are checked on small exact cases; then the trainers' steps are
held to them: one conditional per optimizer (none under XLA), no more than
5% more executed ops than plain Keras `fit()` on the same model, and no more
host reads per step.
"""

import families
import keras
import numpy as np
import pytest
import tensorflow as tf

import tfmp
from models.gan import build_discriminator, build_generator
from tfmp import trainers
from tfmp.layers import FusedBatchNormalization
from tfmp.run import _private_apis, config, runner, tasks
from tfmp.run.benchmark import launches

PRECISIONS = ["float32", "mixed_float16", "mixed_bfloat16"]


def test_conditionals_counts_each_cond_nested_ones_too():
    def two(x):
        y = tf.cond(x > 0, lambda: tf.cond(x > 1, lambda: x, lambda: -x), lambda: x * 2)
        return y + 1

    assert launches.conditionals(two, tf.constant(1.0)) == 2
    assert launches.conditionals(lambda x: tf.where(x > 0, x, -x), tf.constant(1.0)) == 0


def test_xla_conditionals_counts_the_hlo_conditionals():
    assert launches.xla_conditionals(lambda x: tf.cond(x > 0, lambda: x, lambda: -x), tf.constant(1.0)) == 1
    assert launches.xla_conditionals(lambda x: tf.where(x > 0, x, -x), tf.constant(1.0)) == 0


def test_host_reads_counts_each_copy_to_the_host_per_step():
    x = tf.constant([1.0, 2.0])

    def run(steps):
        for _ in range(steps):
            x.numpy()
            float(x[0])
            bool(x[1] > 0)
            np.asarray(x)

    assert launches.host_reads(run, 3) == 4.0
    with _private_apis.count_host_reads() as count:
        pass
    assert count == [0]


def test_executed_ops_counts_the_ops_a_step_runs():
    step = tf.function(lambda x: tf.nn.relu(x * 2.0 + 1.0))
    x = tf.ones((4,))
    step(x)

    def run(steps):
        for _ in range(steps):
            out = step(x)
        out.numpy()

    assert launches.executed_ops(run, 4) == 3.0  # Mul, AddV2, Relu


def _space_with_a_gpu():
    space = _private_apis.xplane_pb2.XSpace()
    host = space.planes.add(name="/host:CPU")
    host.event_metadata[1].name = "model/conv/Conv2D:Conv2D"
    host.lines.add(name="tf_Compute").events.add(metadata_id=1, duration_ps=10**9)
    gpu = space.planes.add(name="/device:GPU:0")
    gpu.event_metadata[1].name = "sm90_xmma_fprop_kernel"
    gpu.event_metadata[2].name = "memcpy"
    gpu.stat_metadata[1].name = "tf_op"
    gpu.stat_metadata[2].name = "model/conv/Conv2D:Conv2D"
    stream = gpu.lines.add(name="Stream #14(Compute)")
    event = stream.events.add(metadata_id=1, duration_ps=3 * 10**9)
    event.stats.add(metadata_id=1, ref_value=2)
    stream.events.add(metadata_id=1, duration_ps=10**9)  # no tf_op stat: named by its kernel
    gpu.lines.add(name="Stream #15(MemcpyH2D)").events.add(metadata_id=2, duration_ps=10**9)
    gpu.lines.add(name="Launch Stats").events.add(metadata_id=1, duration_ps=10**9)
    return space


def test_on_a_gpu_the_device_planes_kernels_count_not_the_host_launches():
    assert list(launches.op_events(_space_with_a_gpu())) == [("Conv2D", 3.0), ("sm90_xmma_fprop_kernel", 1.0)]


def _bn_cnn():
    inputs = keras.Input((16, 16, 3))
    x = keras.layers.Conv2D(16, 3, padding="same")(inputs)
    x = FusedBatchNormalization()(x)
    x = keras.layers.ReLU()(x)
    x = keras.layers.Conv2D(16, 3, padding="same")(x)
    x = keras.layers.BatchNormalization()(x)
    x = keras.layers.ReLU()(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    outputs = keras.layers.Dense(10, dtype="float32")(x)
    return keras.Model(inputs, outputs)


def _batch(n=16):
    rng = np.random.default_rng(0)
    return rng.uniform(size=(n, 16, 16, 3)).astype(np.float32), rng.integers(0, 10, n)


def _compiled(kind, jit_compile=False):
    """Plain Keras (`"keras"`), `tfmp.Trainer` (`"tfmp"`) or a user's own trainer (`"own"`) on the BatchNorm CNN."""
    keras.utils.set_random_seed(0)
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    if kind == "own":
        network = _bn_cnn()
        model = families.OwnTrainer(network, loss, keras.metrics.SparseCategoricalAccuracy(name="accuracy"))
        # As tfmp.Trainer's compile() picks it: loss-scaled for float16, skipping non-finite steps in every precision.
        optimizer = trainers.prepare_optimizer(keras.optimizers.Adam(1e-3), network, skip_nonfinite=True)
        model.compile(optimizer, jit_compile=jit_compile)
        return model
    model = _bn_cnn() if kind == "keras" else tfmp.Trainer(_bn_cnn())
    model.compile(keras.optimizers.Adam(1e-3), loss=loss, metrics=["accuracy"], jit_compile=jit_compile)
    return model


@pytest.mark.parametrize("kind", ["tfmp", "own"])
@pytest.mark.parametrize("precision", PRECISIONS)
def test_the_trainers_step_branches_once_and_never_under_xla(precision, kind):
    x, y = _batch()
    data = (tf.constant(x), tf.constant(y))
    with tfmp.precision_scope(precision):
        trainer = _compiled(kind)
    assert isinstance(trainer.optimizer, tfmp.LossScaleOptimizer)  # the exact skip is on
    assert launches.conditionals(trainer.train_step, data) == 1
    assert launches.xla_conditionals(trainer.train_step, data) == 0


@pytest.mark.parametrize("precision", ["float32", "mixed_float16"])
def test_the_gans_step_branches_once_per_optimizer_and_never_under_xla(precision):
    with tfmp.precision_scope(precision):
        widths = (8, 8, 8)
        gan = trainers.GANTrainer(build_generator(latent_dim=8, widths=widths), build_discriminator(widths=widths))
        gan.compile()
    real = tf.constant(np.random.default_rng(0).uniform(size=(8, 28, 28, 1)).astype(np.float32))
    assert launches.conditionals(gan.train_step, real) == 2
    assert launches.xla_conditionals(gan.train_step, real) == 0


def _fit_counts(model, data, steps=6):
    model.fit(data, steps_per_epoch=2, epochs=1, verbose=0)  # traced and warm

    def run(n):
        model.fit(data, steps_per_epoch=n, epochs=1, verbose=0)

    return launches.executed_ops(run, steps), launches.host_reads(run, steps)


@pytest.mark.parametrize("kind", ["tfmp", "own"])
@pytest.mark.parametrize("precision", ["float32", "mixed_float16"])
def test_a_trainer_step_executes_at_most_5_percent_more_ops_than_keras_fit_and_reads_no_more(precision, kind):
    data = tf.data.Dataset.from_tensors(_batch()).repeat()
    with tfmp.precision_scope(precision):
        keras_model, trainer = _compiled("keras"), _compiled(kind)
    keras_ops, keras_reads = _fit_counts(keras_model, data)
    trainer_ops, trainer_reads = _fit_counts(trainer, data)
    assert trainer_ops <= 1.05 * keras_ops, (trainer_ops, keras_ops)
    assert trainer_reads <= keras_reads, (trainer_reads, keras_reads)


def _task(tmp_path, steps):
    x, y = _batch(16 * 12)  # 12 batches: an epoch of up to 12 steps
    return tasks.SupervisedTask(
        model=_bn_cnn,
        train_data=(x, y),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
        config=config.TrainConfig(
            precision="float32", batch_size=16, epochs=1, steps_per_epoch=steps, warmup_steps=1, logdir=str(tmp_path)
        ),
        name="bn_cnn",
    )


def _run_reads(tmp_path, steps):
    """Host reads during a whole run's fit() at the run's defaults: its callbacks, summaries and checkpoints."""
    fit, reads = keras.Model.fit, []

    def counted_fit(model, *args, **kwargs):
        with _private_apis.count_host_reads() as count:
            result = fit(model, *args, **kwargs)
        reads.append(count[0])
        return result

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(keras.Model, "fit", counted_fit)
        runner.Runner(_task(tmp_path / str(steps), steps), print_fn=lambda line: None).run()
    return sum(reads)


def test_a_run_at_its_defaults_reads_the_device_no_more_often_per_step_than_plain_keras_fit(tmp_path):
    """Steady state: the difference between a run of 12 steps and one of 4, per step, against plain fit()'s."""
    run = (_run_reads(tmp_path, 12) - _run_reads(tmp_path, 4)) / 8
    x, y = _batch(64)
    keras.utils.set_random_seed(0)
    plain = _bn_cnn()
    plain.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(16).repeat()

    def fit_reads(steps):
        with _private_apis.count_host_reads() as count:
            plain.fit(data, steps_per_epoch=steps, epochs=1, verbose=0)
        return count[0]

    fit_reads(2)  # traced
    keras_fit = (fit_reads(12) - fit_reads(4)) / 8
    assert run <= keras_fit, (run, keras_fit)
    assert keras_fit >= 3  # has the next batch come, the loss, the accuracy: each read on its own


def test_steps_per_execution_runs_several_steps_a_call_and_reads_once_for_them():
    data = tf.data.Dataset.from_tensors(_batch()).repeat()
    keras.utils.set_random_seed(0)
    trainer = tfmp.Trainer(_bn_cnn())
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    trainer.compile("adam", loss=loss, metrics=["accuracy"], steps_per_execution=4)
    history = trainer.fit(data, steps_per_epoch=8, epochs=1, verbose=0)
    assert int(trainer.optimizer.iterations) == 8 and history.history["skipped_steps"] == [0]
    reads = launches.fit_host_reads(trainer, data, 8)
    assert reads <= 3 / 4, reads  # one call of 4 steps: is there a next batch, the float logs, the counts

"""Tests for tfmp/run/distribute.py and distributed training runs.

MirroredStrategy runs over the two logical CPU devices that conftest.py
configures; MultiWorkerMirroredStrategy runs as two real worker processes on
127.0.0.1.
"""

import dataclasses
import json
import math
import os
import re
import tempfile
import types

import families
import keras
import numpy as np
import pytest
import tensorflow as tf
import tiny
import workers

import tfmp
from tfmp import trainers
from tfmp.run import distribute, training

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
INF = float("inf")


@pytest.fixture(scope="module")
def mirrored():
    return distribute.make_strategy("mirrored")


def _fake_strategy(cluster=None, task_type=None, task_id=None, replicas=1):
    """A stand-in with what distribute.py reads: a cluster resolver and the replica count."""
    resolver = None
    if cluster is not None:
        resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
            tf.train.ClusterSpec(cluster), task_type=task_type, task_id=task_id
        )
    return types.SimpleNamespace(cluster_resolver=resolver, num_replicas_in_sync=replicas)


TWO_WORKERS = {"worker": ["host0:1", "host1:1"]}
CHIEF_AND_WORKER = {"chief": ["host0:1"], "worker": ["host1:1"]}


# --- make_strategy ------------------------------------------------------------------


def test_unknown_strategy_is_refused_naming_it_and_the_valid_ones():
    with pytest.raises(ValueError, match=r"Valid: default, mirrored, multi_worker\. Received: strategy='tpu'"):
        distribute.make_strategy("tpu")


def test_devices_are_only_for_mirrored():
    with pytest.raises(ValueError, match=r"strategy='default', devices=\['/cpu:0'\]"):
        distribute.make_strategy("default", ["/cpu:0"])


def test_default_is_the_current_strategy_and_mirrored_spans_both_cpus(mirrored):
    assert distribute.make_strategy("default") is tf.distribute.get_strategy()
    assert mirrored.num_replicas_in_sync == 2
    # One object per device set, however the devices are named.
    assert distribute.make_strategy("mirrored", ["/cpu:0", "/cpu:1"]) is mirrored


@pytest.mark.parametrize(
    "tf_config, problem",
    [
        (None, "it is not set"),
        ("worker0", "not valid JSON"),
        ('{"cluster": {}}', "'cluster' must map 'worker'"),
        ('{"cluster": {"worker": ["nohost"]}, "task": {"type": "worker", "index": 0}}', "host:port"),
        ('{"cluster": {"worker": ["a:1", "b:1"]}}', "'task' must hold"),
        ('{"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker", "index": 2}}', "task worker:2 is not"),
        # TensorFlow's own check comes later, as an InvalidArgumentError traceback ("Could not parse port").
        (
            '{"cluster": {"worker": ["localhost:abc"]}, "task": {"type": "worker", "index": 0}}',
            "holds 'localhost:abc': the port must be a number",
        ),
        ('{"cluster": {"worker": ["a:1", "b:70000"]}, "task": {"type": "worker", "index": 0}}', "'b:70000'"),
    ],
)
def test_multi_worker_without_a_usable_tf_config_says_what_it_must_hold(monkeypatch, tf_config, problem):
    if tf_config is None:
        monkeypatch.delenv("TF_CONFIG", raising=False)
    else:
        monkeypatch.setenv("TF_CONFIG", tf_config)
    with pytest.raises(ValueError) as error:
        distribute.make_strategy("multi_worker")
    message = str(error.value)
    assert problem in message
    assert f"Received: TF_CONFIG={tf_config!r}" in message
    assert distribute.tf_config_example() in message  # an example to copy
    json.loads(distribute.tf_config_example())


# --- who writes ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "cluster, task_type, task_id, chief",
    [
        (TWO_WORKERS, "worker", 0, True),
        (TWO_WORKERS, "worker", 1, False),
        (CHIEF_AND_WORKER, "chief", 0, True),
        (CHIEF_AND_WORKER, "worker", 0, False),
        ({**CHIEF_AND_WORKER, "evaluator": ["host2:1"]}, "evaluator", 0, False),
    ],
)
def test_the_chief_is_the_chief_task_or_else_worker_0(cluster, task_type, task_id, chief):
    assert distribute.is_chief(_fake_strategy(cluster, task_type, task_id)) is chief


def test_single_process_strategies_are_their_own_chief(mirrored):
    assert distribute.is_chief(tf.distribute.get_strategy())
    assert distribute.is_chief(mirrored)
    assert distribute.task(mirrored) == (None, None)


def test_only_the_chief_writes_to_the_path_itself(monkeypatch, tmp_path):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    path = str(tmp_path / "logs" / "run")
    assert distribute.writable_dir(path, _fake_strategy(TWO_WORKERS, "worker", 0)) == path
    worker_1 = distribute.writable_dir(path, _fake_strategy(TWO_WORKERS, "worker", 1))
    assert worker_1 == str(tmp_path / "tmp" / "tfmp_workertemp_worker_1") + path
    # Another task, another directory; a worker's is never inside the chief's.
    assert distribute.writable_dir(path, _fake_strategy(CHIEF_AND_WORKER, "worker", 0)) not in (path, worker_1)
    assert not worker_1.startswith(path)


# --- global batch -------------------------------------------------------------------


def test_the_global_batch_splits_evenly_or_is_refused_naming_both_numbers(mirrored):
    assert distribute.per_replica_batch(16, mirrored) == 8
    assert distribute.per_replica_batch(7, tf.distribute.get_strategy()) == 7
    for bad in (15, 1):
        with pytest.raises(ValueError, match=rf"Received: batch_size={bad} with 2 replicas"):
            distribute.per_replica_batch(bad, mirrored)


def test_a_run_refuses_an_unknown_strategy_and_an_uneven_global_batch(tmp_path):
    config = training.GANConfig(dataset="digits", logdir=str(tmp_path), strategy="tpu")
    with pytest.raises(training.ConfigError, match="strategy='tpu'"):
        config.validate()
    uneven = dataclasses.replace(config, strategy="mirrored", batch_size=15)
    with pytest.raises(training.ConfigError, match="batch_size=15 with 2 replicas"):
        training.train_gan(uneven, print_fn=lambda line: None)


def test_a_run_trains_under_the_strategy_it_is_handed_and_makes_none(mirrored, tmp_path, monkeypatch):
    def no_second_strategy(*args, **kwargs):
        raise AssertionError(f"make_strategy called with a strategy handed in: {args} {kwargs}")

    monkeypatch.setattr(distribute, "make_strategy", no_second_strategy)
    lines = []
    task = tiny.tiny(tmp_path, strategy="mirrored", batch_size=16, epochs=1, steps_per_epoch=2)
    result = training.train(task, print_fn=lines.append, strategy=mirrored)
    assert result.steps == 2 and result.trainer.distribute_strategy is mirrored
    assert any("strategy=mirrored replicas=2" in line for line in lines)
    # The config's name labels the run: a strategy of another kind is refused, naming both.
    with pytest.raises(
        training.ConfigError, match=r"the MirroredStrategy \('mirrored'\).*Received: strategy='default'"
    ):
        training.train(tiny.tiny(tmp_path, run_name="other"), print_fn=tiny.quiet, strategy=mirrored)


def test_name_of_names_a_strategys_kind(mirrored):
    assert distribute.name_of(mirrored) == "mirrored"
    assert distribute.name_of(tf.distribute.get_strategy()) == "default"
    assert distribute.name_of(tf.distribute.OneDeviceStrategy("/cpu:0")) == "default"


# --- the distributed step equals the single-device step ------------------------------
# Tiny models without BatchNorm or Dropout, trained with SGD: the only
# difference between one device and two replicas is then the order of
# floating-point sums, so the weights must agree to rounding. (BatchNorm
# normalises each replica's share with its own statistics and Dropout draws
# the same masks on each replica, so real models agree only statistically;
# see the end-to-end tests below.)


def _replica_values(variable):
    value = variable.value
    return [t.numpy() for t in value.values] if hasattr(value, "values") else [value.numpy()]


def _assert_replicas_agree(model):
    for variable in model.variables:
        first, *others = _replica_values(variable)
        for other in others:
            np.testing.assert_array_equal(first, other, err_msg=variable.path)


def _tiny_classifier():
    return keras.Sequential(
        [
            keras.Input((6,)),
            keras.layers.Dense(8, activation="tanh"),
            keras.layers.Dense(3),
            keras.layers.Activation("softmax", dtype="float32"),
        ]
    )


def _tiny_gan(label_swap_fraction=0.25):
    generator = keras.Sequential([keras.Input((4,)), keras.layers.Dense(6, activation="tanh")])
    discriminator = keras.Sequential(
        [
            keras.Input((6,)),
            keras.layers.Dense(4, activation="tanh"),
            keras.layers.Dense(1, dtype="float32"),
        ]
    )
    # With a global batch of 8, the first 2 rows (both on replica 0) swap labels.
    return trainers.GANTrainer(generator, discriminator, label_swap_fraction=label_swap_fraction, seed=3)


def _tiny_trainer(kind, strategy, precision):
    with tfmp.precision_scope(precision), strategy.scope():
        if kind == "classifier":
            trainer = trainers.ClassifierTrainer(_tiny_classifier())
            trainer.compile(
                keras.optimizers.SGD(0.5),
                loss="sparse_categorical_crossentropy",
                metrics=["accuracy"],
                loss_scale="dynamic",
            )
        else:
            trainer = _tiny_gan()
            trainer.compile(keras.optimizers.SGD(0.5), keras.optimizers.SGD(0.5), loss_scale="dynamic")
    return trainer


@pytest.mark.parametrize("kind", ["classifier", "gan"])
@pytest.mark.parametrize("precision, tolerance", [("float32", 1e-6), ("mixed_float16", 1e-3)])
def test_two_replicas_train_tiny_models_as_one_device_does(mirrored, kind, precision, tolerance):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(32, 6)).astype(np.float32)
    y = rng.integers(0, 3, 32).astype(np.int32)
    data = tf.data.Dataset.from_tensor_slices((x, y) if kind == "classifier" else x).batch(8)
    single = _tiny_trainer(kind, tf.distribute.get_strategy(), precision)
    replicated = _tiny_trainer(kind, mirrored, precision)
    for network, copy in zip(single.networks.values(), replicated.networks.values()):
        copy.set_weights(network.get_weights())
    logs = [
        {k: v[-1] for k, v in t.fit(data, epochs=2, shuffle=False, verbose=0).history.items()}
        for t in (single, replicated)
    ]

    assert replicated.distribute_strategy is mirrored
    _assert_replicas_agree(replicated)
    for network, copy in zip(single.networks.values(), replicated.networks.values()):
        for a, b in zip(network.get_weights(), copy.get_weights()):
            np.testing.assert_allclose(b, a, rtol=0, atol=tolerance)
    # Logged losses are the global batch's, not a replica's share of it.
    assert logs[1].keys() == logs[0].keys()
    for key, value in logs[0].items():
        assert logs[1][key] == pytest.approx(value, abs=tolerance), key


def test_the_epoch_end_average_is_one_traced_function_that_averages_every_replicas_copies(mirrored, caplog):
    with mirrored.scope():
        inputs = keras.Input((3,))
        model = keras.Model(inputs, keras.layers.BatchNormalization()(inputs))
    mean, variance = model.non_trainable_variables
    callback = distribute.AverageReplicaStatistics()
    callback.set_model(model)
    for epoch in range(7):
        # Each replica's own copies, as a training epoch leaves them.
        for i, copy in enumerate(mirrored.experimental_local_results(mean.value)):
            copy.assign([epoch + 2.0 * i] * 3)
        callback.on_epoch_end(epoch)
        for copy in mirrored.experimental_local_results(mean.value):
            np.testing.assert_array_equal(copy.numpy(), [epoch + 1.0] * 3)  # the mean of epoch and epoch + 2
    for copy in mirrored.experimental_local_results(variance.value):
        np.testing.assert_array_equal(copy.numpy(), [1.0] * 3)
    # Traced once for the run: TensorFlow's warning about repeated retracing never fires.
    assert not [r for r in caplog.records if "retracing" in r.getMessage()]
    assert distribute.replica_averager([mean], distribute.make_strategy("default"))() is None  # one replica: nothing


def test_each_replica_draws_its_own_rows_of_the_global_noise(mirrored):
    with mirrored.scope():
        gan = _tiny_gan()

    @tf.function
    def draw():
        return mirrored.run(lambda: gan.sample_noise(4))

    first, second = (t.numpy() for t in mirrored.experimental_local_results(draw()))
    assert not np.array_equal(first, second)
    with tf.distribute.get_strategy().scope():
        single = _tiny_gan()
    np.testing.assert_array_equal(np.concatenate([first, second]), single.sample_noise(8).numpy())


# --- one replica's non-finite gradient skips every replica --------------------------
# tests/test_loss_scale.py checks this for the optimizer and Keras's own
# train_step; these go through the tfmp trainers' tf.keras 2 flow.


def test_a_non_finite_gradient_on_replica_1_skips_the_classifier_step_everywhere(mirrored):
    with tfmp.precision_scope("mixed_float16"), mirrored.scope():
        trainer = trainers.ClassifierTrainer(_tiny_classifier())
        trainer.compile(
            tfmp.LossScaleOptimizer(keras.optimizers.SGD(0.1), initial_scale=8.0),
            loss="sparse_categorical_crossentropy",
        )
    before = trainer.get_weights()
    x = np.ones((4, 6), np.float32)
    x[3, 0] = np.nan  # examples 2-3 are replica 1's share
    trainer.fit(tf.data.Dataset.from_tensors((x, np.zeros(4, np.int32))), epochs=1, shuffle=False, verbose=0)
    _assert_replicas_agree(trainer)
    for a, b in zip(trainer.get_weights(), before):
        np.testing.assert_array_equal(a, b)
    optimizer = trainer.optimizer
    assert [float(t.numpy()) for t in optimizer.dynamic_scale.value.values] == [4.0, 4.0]
    assert int(optimizer.skipped_steps) == 1 and int(optimizer.inner_optimizer.iterations.numpy()) == 0


def test_a_non_finite_real_image_on_replica_1_skips_only_the_discriminator_everywhere(mirrored):
    with tfmp.precision_scope("mixed_float16"), mirrored.scope():
        gan = _tiny_gan()
        gan.compile(keras.optimizers.SGD(0.1), keras.optimizers.SGD(0.1))
    generator, discriminator = gan.generator.get_weights(), gan.discriminator.get_weights()
    real = np.ones((8, 6), np.float32)
    real[7, 0] = np.inf
    gan.fit(tf.data.Dataset.from_tensors(real), epochs=1, shuffle=False, verbose=0)
    _assert_replicas_agree(gan)
    for a, b in zip(gan.discriminator.get_weights(), discriminator):
        np.testing.assert_array_equal(a, b)
    assert not all(np.array_equal(a, b) for a, b in zip(gan.generator.get_weights(), generator))
    assert (int(gan.generator_optimizer.skipped_steps), int(gan.discriminator_optimizer.skipped_steps)) == (0, 1)


# --- whole runs: MirroredStrategy against one device ---------------------------------
# Two replicas differ from one device by more than rounding here: BatchNorm
# normalises each replica's 8 examples with their own statistics (as Keras
# and tf.keras do), the GAN's Dropout draws the same masks on both replicas,
# and Adam turns any difference in a small gradient into a step of up to the
# learning rate. So the weights agree only to a few learning rates; the
# logged losses agree closely, and every replica ends with the same weights
# and BatchNorm statistics (tfmp.run.distribute.AverageReplicaStatistics).


def _max_and_mean_difference(a, b):
    diffs = np.concatenate([np.abs(x - y).ravel() for x, y in zip(a, b)])
    return float(diffs.max()), float(diffs.mean())


def _compare_runs(train, config):
    lines = []
    single = train(dataclasses.replace(config, run_name="single"), print_fn=lambda line: None)
    replicated = train(dataclasses.replace(config, strategy="mirrored", run_name="mirrored"), print_fn=lines.append)
    assert any("strategy=mirrored replicas=2" in line for line in lines if line.startswith("training"))
    _assert_replicas_agree(replicated.trainer)
    trainable = [
        [v.numpy() for n in r.trainer.networks.values() for v in n.trainable_weights] for r in (single, replicated)
    ]
    return single, replicated, _max_and_mean_difference(*trainable)


def _largest_step(optimizer, t):
    """The largest |update| / learning rate any gradients can give at step `t` (from 1).

    Adam (bias-corrected): m_hat / sqrt(v_hat) = sum(a_i g_i) / sqrt(sum(b_i g_i^2)),
    at most sqrt(sum(a_i^2 / b_i)) by Cauchy-Schwarz (1 at step 1, 1.0014 at step 2).
    RMSprop (no momentum): g_t / sqrt(sum(b_i g_i^2)) <= 1 / sqrt(1 - rho).
    """
    import keras

    if isinstance(optimizer, keras.optimizers.Adam):
        b1, b2 = optimizer.beta_1, optimizer.beta_2
        a = [(1 - b1) * b1 ** (t - i) / (1 - b1**t) for i in range(1, t + 1)]
        b = [(1 - b2) * b2 ** (t - i) / (1 - b2**t) for i in range(1, t + 1)]
        return math.sqrt(sum(x * x / y for x, y in zip(a, b)))
    if isinstance(optimizer, keras.optimizers.RMSprop) and not optimizer.momentum and not optimizer.centered:
        return 1 / math.sqrt(1 - optimizer.rho)
    raise NotImplementedError(f"no update bound for {optimizer!r}")


def _update_bound(trainer):
    """How far two runs' weights can drift apart: twice the largest total update of either.

    With the same initial weights, each run moves a weight by at most
    sum_t lr_t * _largest_step(t); a gradient whose sign differs between the
    runs can use all of it in opposite directions.
    """
    bound = 0.0
    for optimizer in trainer.optimizers.values():
        inner = getattr(optimizer, "inner_optimizer", optimizer)
        steps = int(inner.iterations.numpy())
        schedule = inner._learning_rate
        rates = [float(schedule(t) if callable(schedule) else schedule) for t in range(steps)]
        total = sum(rate * _largest_step(inner, t + 1) for t, rate in enumerate(rates))
        bound = max(bound, 2 * total * (1 + 1e-6))  # float32 rounding of the updates
    return bound


@pytest.mark.slow
def test_mirrored_classifier_run_matches_one_device(tmp_path):
    config = training.ClassifierConfig(
        dataset="digits",
        alpha=0.35,
        batch_size=16,
        epochs=1,
        steps_per_epoch=2,
        warmup_steps=0,
        precision="float32",
        validation_batch_size=512,
        logdir=str(tmp_path),
    )
    single, replicated, (max_diff, _) = _compare_runs(training.train_classifier, config)
    assert max_diff <= _update_bound(single.trainer)
    # The logged losses have no derived bound here (each replica normalises
    # its own 8 examples); the tiny models above check them to 1e-6.
    for key in ("loss", "val_loss"):
        assert math.isfinite(replicated.logs[key]), key


@pytest.mark.slow
def test_mirrored_gan_run_matches_one_device(tmp_path):
    config = dataclasses.replace(
        tiny.TINY_GAN, steps_per_epoch=3, warmup_steps=0, precision="mixed_float16", logdir=str(tmp_path)
    )
    single, replicated, (max_diff, _) = _compare_runs(training.train_gan, config)
    assert max_diff <= _update_bound(single.trainer)
    for key in ("g_loss", "d_loss"):
        assert math.isfinite(replicated.logs[key]), key
    # One loss scale per optimizer, the same on both replicas, as on one device.
    for key in ("g_loss_scale", "d_loss_scale", "g_skipped_steps", "d_skipped_steps"):
        assert replicated.logs[key] == single.logs[key], key


# --- MultiWorkerMirroredStrategy: two worker processes -------------------------------


def _event_files(directory):
    return [os.path.join(d, f) for d, _, files in os.walk(directory) for f in files if f.startswith("events")]


@pytest.mark.slow
def test_two_workers_train_a_task_module_that_builds_its_optimizer_at_import(tmp_path):
    module = tmp_path / "optimizer_at_import.py"
    module.write_text(families.optimizer_at_import())
    logdir = tmp_path / "logs"
    flags = [f"--task={module}:TASK", "--strategy=multi_worker", "--epochs=1", "--steps_per_epoch=2"]
    flags += [f"--logdir={logdir}", "--run_name=mw", "--console=lines"]
    outputs = workers.Workers(tmp_path, flags, script="train.py").wait(timeout=300)
    for code, out in outputs:
        assert code == 0, out[-3000:]
        assert "training optimizer_at_import: precision=float32" in out and "strategy=multi_worker replicas=2" in out
    worker_1_run = tmp_path / "tmp1" / "tfmp_workertemp_worker_1" / str(logdir / "mw").lstrip(os.sep)
    chief_state = workers.latest_checkpoint(str(logdir / "mw" / "checkpoints"))
    worker_state = workers.latest_checkpoint(str(worker_1_run / "checkpoints"))
    assert chief_state.keys() == worker_state.keys()
    assert tf.train.latest_checkpoint(str(logdir / "mw" / "checkpoints")).endswith("ckpt-2")
    for key, value in chief_state.items():
        np.testing.assert_array_equal(worker_state[key], value, err_msg=key)


@pytest.mark.slow
def test_two_worker_processes_train_the_classifier_and_end_identical(tmp_path):
    logdir = tmp_path / "logs"
    flags = [
        "--strategy=multi_worker",
        "--dataset=digits",
        "--alpha=0.35",
        "--batch_size=16",
        "--epochs=1",
        "--steps_per_epoch=2",
        "--warmup_steps=0",
        "--precision=float32",
        f"--logdir={logdir}",
        "--run_name=mw",
    ]
    run = workers.Workers(tmp_path, flags)
    outputs = run.wait()
    for code, out in outputs:
        assert code == 0, out[-3000:]
        assert "strategy=multi_worker replicas=2" in out
    # Both workers log the same losses and accuracies (reduced over all replicas).
    epoch_lines = [
        [re.sub(r", images_per_sec \S+", "", line) for line in out.splitlines() if line.startswith("epoch 1/1")]
        for _, out in outputs
    ]
    assert epoch_lines[0] == epoch_lines[1] and len(epoch_lines[0]) == 1

    # Identical final state: every variable of the chief's final checkpoint
    # (weights, BatchNorm statistics, optimizer slots) equals worker 1's,
    # which worker 1 wrote to its private directory.
    worker_1_run = tmp_path / "tmp1" / "tfmp_workertemp_worker_1" / str(logdir / "mw").lstrip(os.sep)
    chief_state = workers.latest_checkpoint(str(logdir / "mw" / "checkpoints"))
    worker_state = workers.latest_checkpoint(str(worker_1_run / "checkpoints"))
    assert chief_state.keys() == worker_state.keys()
    assert sum(np.size(value) for value in chief_state.values()) > 100_000  # the model is in there
    for key, value in chief_state.items():
        np.testing.assert_array_equal(worker_state[key], value, err_msg=key)

    # Only the chief wrote TensorBoard logs where the run's logs are.
    worker_pid = re.escape(f".{run.processes[1].pid}.")
    assert _event_files(str(logdir))
    assert not [f for f in _event_files(str(logdir)) if re.search(worker_pid, os.path.basename(f))]
    assert _event_files(str(worker_1_run))  # worker 1's copy went to its own directory

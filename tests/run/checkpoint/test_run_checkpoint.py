"""Tests for tfmp/run/checkpoint/: what a checkpoint holds; saving, finding, checking, restoring, refusing."""

import json
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfmp
from tfmp import trainers
from tfmp.run import checkpoint, determinism, distribute, output


def _tiny_classifier_trainer(units=3):
    inputs = keras.Input((4,))
    outputs = keras.layers.Dense(units, activation="softmax", dtype="float32")(inputs)
    trainer = trainers.ClassifierTrainer(keras.Model(inputs, outputs))
    with tfmp.precision_scope("float32"):
        trainer.compile(keras.optimizers.Adam(0.1), loss="sparse_categorical_crossentropy", skip_nonfinite=True)
    return trainer


def _train_one_step(trainer, seed=0):
    rng = np.random.default_rng(seed)
    x, y = rng.normal(size=(8, 4)).astype(np.float32), rng.integers(0, 3, 8)
    trainer.fit(x, y, batch_size=8, epochs=1, verbose=0)


def _assert_library_terms(message):
    """The library names settings as the config does (`run_name`); only the scripts say `--run_name`."""
    assert "another run_name or checkpoint_dir" in message
    assert "--" not in message and "scripts/" not in message


def _variables(trainer):
    return trainer.variables + [v for o in trainer.optimizers.values() for v in o.variables]


def _values(trainer):
    return [v.numpy().copy() for v in _variables(trainer)]


def _assert_same_values(saved, trainer):
    variables = _variables(trainer)
    assert len(saved) == len(variables)
    for value, variable in zip(saved, variables):
        np.testing.assert_array_equal(value, variable.numpy(), err_msg=variable.path)


def _tiny_gan_trainer():
    """A small GAN under mixed_float16 with dynamic loss scaling: noise seed, Dropout seeds, BatchNorm, counters."""
    from tfmp.models.gan import build_discriminator, build_generator

    with tfmp.precision_scope("mixed_float16"):
        trainer = trainers.GANTrainer(
            build_generator(latent_dim=8, widths=(8, 8, 8)), build_discriminator(widths=(8, 8, 8))
        )
        trainer.compile(loss_scale="dynamic")
    return trainer


def _train_gan(trainer, steps=2, nan=False):
    images = np.random.default_rng(0).uniform(size=(8 * steps, 28, 28, 1)).astype(np.float32)
    if nan:
        images[0, 0, 0, 0] = np.nan  # a skipped discriminator step: counted, the scale backs off
    trainer.fit(images, batch_size=8, epochs=1, verbose=0, shuffle=False)


def _keys(path):
    return set(tf.train.load_checkpoint(path).get_variable_to_shape_map())


def _write_legacy(directory, trainer, step, signature):
    """A checkpoint as tfmp 0.1.0 wrote it: positional variable lists, through a manager naming ckpt-<step>."""
    legacy = tf.train.Checkpoint(
        model=list(trainer.variables),
        step=tf.Variable(step, dtype=tf.int64),
        signature=tf.Variable(json.dumps(signature, sort_keys=True), dtype=tf.string),
        **{f"optimizer_{name}": list(optimizer.variables) for name, optimizer in trainer.optimizers.items()},
    )
    return tf.train.CheckpointManager(legacy, directory, max_to_keep=3).save(checkpoint_number=step)


# How to build a trainer, train it before the save, and train it on (what the restore must undo).
_KINDS = {
    "classifier-float32": (_tiny_classifier_trainer, _train_one_step, lambda trainer: _train_one_step(trainer, seed=1)),
    "gan-float16-dynamic": (_tiny_gan_trainer, lambda trainer: _train_gan(trainer, nan=True), _train_gan),
}


@pytest.mark.parametrize("kind", list(_KINDS))
def test_save_and_restore_bring_back_weights_slots_and_step(kind, tmp_path):
    make, train, train_on = _KINDS[kind]
    trainer = make()
    initial = _values(trainer)
    ckpt = checkpoint.RunCheckpoint(str(tmp_path), trainer, {"model": "a"}, keep=2)
    train(trainer)
    path = ckpt.save(1)
    saved = _values(trainer)
    train_on(trainer)
    assert any(not np.array_equal(a, b) for a, b in zip(saved, _values(trainer)))
    found = ckpt.latest()
    assert found.step == 1 and found.path.endswith("ckpt-1") and found.signature == {"model": "a"}
    assert ckpt.restore(found) == 1
    for a, b in zip(saved, _values(trainer)):
        np.testing.assert_array_equal(a, b)

    # The keys are object paths, not positions in a list.
    keys = _keys(path)
    assert not any(key.startswith("model/") for key in keys)
    assert any(key.startswith(f"optimizer_{name}/") for key in keys for name in trainer.optimizers)
    # And a freshly built trainer gets every variable back, bit for bit.
    fresh = make()
    again = checkpoint.RunCheckpoint(str(tmp_path), fresh, {"model": "a"})
    assert again.restore(again.latest()) == 1
    _assert_same_values(saved, fresh)
    if kind.startswith("gan"):
        assert "trainer/generator/_operations/3/moving_mean/.ATTRIBUTES/VARIABLE_VALUE" in keys
        assert "seed_generators/noise_seed/.ATTRIBUTES/VARIABLE_VALUE" in keys
        assert sum(key.startswith("seed_generators/discriminator/") for key in keys) == 3  # its Dropouts
        # What the GAN's round trip covers: noise and Dropout seeds moved on; the loss scale, its growth
        # counter and the skipped step of the NaN batch are not their initial values.
        changed = {v.path for v, a, b in zip(_variables(fresh), initial, saved) if not np.array_equal(a, b)}
        assert sum("seed_generator_state" in path for path in changed) == 4, changed
        scaler = fresh.discriminator_optimizer
        assert int(scaler.skipped_steps) == 1 and float(scaler.loss_scale) == 2**14  # one backoff from 2**15
        assert int(fresh.generator_optimizer.step_counter) == 2  # two finite steps towards the next growth


def test_a_checkpoint_in_the_0_1_0_layout_resumes_exactly_and_the_next_save_writes_objects(tmp_path):
    trainer = _tiny_gan_trainer()
    _train_gan(trainer, nan=True)
    written = _write_legacy(str(tmp_path), trainer, 2, {"model": "gan"})
    assert any(key.startswith("model/0/") for key in _keys(written))
    saved = _values(trainer)

    fresh = _tiny_gan_trainer()
    ckpt = checkpoint.RunCheckpoint(str(tmp_path), fresh, {"model": "gan"})
    found = ckpt.latest()
    assert found.path == written and found.step == 2 and found.signature == {"model": "gan"}
    assert ckpt.restore(found) == 2
    _assert_same_values(saved, fresh)

    keys = _keys(ckpt.save(3))
    assert any(key.startswith("trainer/") for key in keys) and not any(key.startswith("model/") for key in keys)
    third = _tiny_gan_trainer()
    again = checkpoint.RunCheckpoint(str(tmp_path), third, {"model": "gan"})
    assert again.restore(again.latest()) == 3
    _assert_same_values(saved, third)


def test_a_checkpoint_in_the_0_1_0_layout_of_another_model_is_refused(tmp_path):
    # Another shape: 3 classes against 5.
    path = _write_legacy(str(tmp_path / "shape"), _tiny_classifier_trainer(units=3), 1, {})
    other = checkpoint.RunCheckpoint(str(tmp_path / "shape"), _tiny_classifier_trainer(units=5), {})
    with pytest.raises(checkpoint.CheckpointError) as error:
        other.restore(other.latest())
    assert path in str(error.value) and "another model" in str(error.value)
    # Another number of variables: one more layer, whose kernel and bias the positional lists cannot place.
    inputs = keras.Input((4,))
    deeper = trainers.ClassifierTrainer(keras.Model(inputs, keras.layers.Dense(3)(keras.layers.Dense(4)(inputs))))
    with tfmp.precision_scope("float32"):
        deeper.compile(keras.optimizers.Adam(0.1), loss="sparse_categorical_crossentropy", skip_nonfinite=True)
    path = _write_legacy(str(tmp_path / "count"), _tiny_classifier_trainer(units=3), 1, {})
    other = checkpoint.RunCheckpoint(str(tmp_path / "count"), deeper, {})
    with pytest.raises(checkpoint.CheckpointError) as error:
        other.restore(other.latest())
    message = str(error.value)
    assert path in message and "another model" in message
    assert "its model list holds 2 variables, this trainer's 4" in message


class _UnkeptWeight(keras.layers.Layer):
    """Creates a weight without keeping it in an attribute: Keras lists it, tf.train.Checkpoint cannot reach it."""

    def build(self, input_shape):
        self.add_weight(shape=(2,), initializer="zeros", trainable=False, name="unkept")

    def call(self, inputs):
        return inputs


def test_a_variable_the_checkpoint_cannot_reach_is_refused_naming_it(tmp_path):
    inputs = keras.Input((4,))
    trainer = trainers.ClassifierTrainer(keras.Model(inputs, keras.layers.Dense(3)(_UnkeptWeight()(inputs))))
    trainer.compile(keras.optimizers.Adam(0.1), loss="sparse_categorical_crossentropy")
    (unkept,) = [v for v in trainer.variables if v.name == "unkept"]
    with pytest.raises(checkpoint.CheckpointError) as error:
        checkpoint.RunCheckpoint(str(tmp_path), trainer, {})
    message = str(error.value)
    assert "1 of its variables are not reachable from its object graph" in message
    assert f"{unkept.path} (shape (2,))" in message and "dense" not in message
    assert not os.listdir(tmp_path)


def test_latest_is_none_without_checkpoints(tmp_path):
    assert checkpoint.RunCheckpoint(str(tmp_path), _tiny_classifier_trainer(), {}).latest() is None


def _truncate(prefix):
    data = prefix + ".data-00000-of-00001"
    with open(data, "r+b") as f:
        f.truncate(os.path.getsize(data) // 2)


def test_a_corrupt_newest_checkpoint_falls_back_to_the_previous_and_says_so(tmp_path):
    trainer = _tiny_classifier_trainer()
    ckpt = checkpoint.RunCheckpoint(str(tmp_path), trainer, {}, keep=3)
    first = ckpt.save(1)
    _train_one_step(trainer)
    newest = ckpt.save(2)
    _truncate(newest)
    messages = []
    with output.lines_to(messages.append):
        found = ckpt.latest()
    assert found.path == first and found.step == 1
    assert len(messages) == 1 and newest in messages[0] and first in messages[0]
    # Nothing readable at all: an error naming every file tried.
    _truncate(first)
    with pytest.raises(checkpoint.CheckpointError) as error:
        ckpt.latest()
    assert newest in str(error.value) and first in str(error.value)
    _assert_library_terms(str(error.value))


def test_a_checkpoint_of_another_model_is_refused_naming_the_file(tmp_path):
    path = checkpoint.RunCheckpoint(str(tmp_path), _tiny_classifier_trainer(units=3), {}).save(1)
    trainer = _tiny_classifier_trainer(units=5)
    other = checkpoint.RunCheckpoint(str(tmp_path), trainer, {})
    with pytest.raises(checkpoint.CheckpointError) as error:
        other.restore(other.latest())
    assert path in str(error.value) and "another model" in str(error.value)
    _assert_library_terms(str(error.value))


def test_a_different_signature_is_refused_naming_each_difference(tmp_path):
    trainer = _tiny_classifier_trainer()
    checkpoint.RunCheckpoint(str(tmp_path), trainer, {"precision": "mixed_float16", "seed": 0}).save(3)
    again = checkpoint.RunCheckpoint(str(tmp_path), trainer, {"precision": "float32", "seed": 0})
    with pytest.raises(checkpoint.CheckpointError) as error:
        again.restore(again.latest())
    message = str(error.value)
    assert "ckpt-3" in message and 'precision: checkpoint "mixed_float16", this run "float32"' in message
    assert "seed" not in message
    _assert_library_terms(message)


def test_a_difference_names_the_nested_key_and_both_values_in_full(tmp_path):
    trainer = _tiny_classifier_trainer()
    long = "x" * 300  # longer than a cut at 200 characters
    checkpoint.RunCheckpoint(str(tmp_path), trainer, {"config": {"long": long, "seed": 0}}).save(1)
    again = checkpoint.RunCheckpoint(str(tmp_path), trainer, {"config": {"long": long, "seed": 7}})
    with pytest.raises(checkpoint.CheckpointError) as error:
        again.restore(again.latest())
    message = str(error.value)
    # A setting (under the signature's "config") as a config names it, which the scripts turn into a flag.
    assert message.endswith("Differences: seed=0 in the checkpoint, seed=7 in this run")


def _files(directory):
    return {name: (directory / name).read_bytes() for name in os.listdir(directory) if name.startswith("ckpt-")}


def test_a_missing_state_file_hides_no_checkpoint_and_none_is_overwritten(tmp_path):
    trainer = _tiny_classifier_trainer()
    ckpt = checkpoint.RunCheckpoint(str(tmp_path), trainer, {}, keep=3)
    for step in (1, 2, 3):
        _train_one_step(trainer, seed=step)
        ckpt.save(step)
    os.remove(tmp_path / "checkpoint")  # a clean-up, a sync tool, an interrupted copy
    _truncate(str(tmp_path / "ckpt-3"))
    before = _files(tmp_path)

    lines = []
    with output.lines_to(lines.append):
        again = checkpoint.RunCheckpoint(str(tmp_path), _tiny_classifier_trainer(), {}, keep=2)
        assert again.checkpoints == [str(tmp_path / f"ckpt-{n}") for n in (1, 2, 3)]
        found = again.latest()
        assert found.step == 2 and found.path == str(tmp_path / "ckpt-2")
        assert len(lines) == 1
        assert f"state file {tmp_path / 'checkpoint'}" in lines[0] and "missing" in lines[0]
        assert f"resuming from the newest readable one, {tmp_path / 'ckpt-2'}" in lines[0] and "ckpt-3 (" in lines[0]

        # Carrying on from step 2: the unreadable ckpt-3 is kept aside, not overwritten; with keep=2 the
        # manager deletes only what it wrote itself.
        lines.clear()
        for step in (3, 4, 5):
            again.save(step)
        assert lines == [
            f"note: {tmp_path / 'ckpt-3'} already existed and was not written by this run; kept its files "
            "as ckpt-3.data-00000-of-00001.old, ckpt-3.index.old"
        ]
        after = _files(tmp_path)
        for name, content in before.items():
            kept = name if name.startswith(("ckpt-1.", "ckpt-2.")) else name + ".old"
            assert after[kept] == content, name
        assert checkpoint.RunCheckpoint(str(tmp_path), trainer, {}).checkpoints == [
            str(tmp_path / "ckpt-4"),
            str(tmp_path / "ckpt-5"),
        ]


def test_a_failed_write_names_the_directory_and_leaves_the_previous_checkpoint_newest(tmp_path, monkeypatch):
    trainer = _tiny_classifier_trainer()
    ckpt = checkpoint.RunCheckpoint(str(tmp_path), trainer, {}, keep=3)
    first = ckpt.save(1)

    def disk_full(self, prefix, options=None):
        # What a write that runs out of space leaves: TensorFlow's scratch directory and a partial data file.
        os.makedirs(prefix + "_temp")
        with open(prefix + ".data-00000-of-00001", "wb") as f:
            f.write(b"\0" * 10)
        raise tf.errors.ResourceExhaustedError(None, None, f"{prefix}_temp/part-00000; No space left on device")

    monkeypatch.setattr(tf.train.Checkpoint, "_write", disk_full)
    with pytest.raises(checkpoint.CheckpointError) as error:
        ckpt.save(2)
    message = str(error.value)
    assert f"Could not write checkpoint {tmp_path / 'ckpt-2'} in {tmp_path} (ResourceExhaustedError: " in message
    assert "No space left on device" in message and "Nothing was lost: the previous checkpoints remain" in message
    assert first in message
    monkeypatch.undo()
    assert sorted(os.listdir(tmp_path)) == ["checkpoint", "ckpt-1.data-00000-of-00001", "ckpt-1.index"]
    assert ckpt.latest().path == first
    assert ckpt.save(2) == str(tmp_path / "ckpt-2")  # once there is space again


def test_an_invalid_state_file_is_refused_saying_what_to_do(tmp_path):
    (tmp_path / "checkpoint").write_text("")
    with pytest.raises(checkpoint.CheckpointError) as error:
        checkpoint.RunCheckpoint(str(tmp_path), _tiny_classifier_trainer(), {})
    assert str(tmp_path / "checkpoint") in str(error.value) and "delete it" in str(error.value)


def _snapshot(directory):
    """Every file under `directory`, by its path relative to it, with its bytes."""
    return {str(p.relative_to(directory)): p.read_bytes() for p in directory.rglob("*") if p.is_file()}


@pytest.mark.parametrize("listed", ["{other}/ckpt-1", "../other/ckpt-1", "ckpt-*"])
def test_a_state_file_listing_files_outside_the_directory_is_refused_and_deletes_nothing(listed, tmp_path):
    directory, other = tmp_path / "checkpoints", tmp_path / "other"
    other.mkdir()
    for name in ("ckpt-1.index", "ckpt-1.data-00000-of-00001", "notes.txt"):
        (other / name).write_text("another run's")
    trainer = _tiny_classifier_trainer()
    ckpt = checkpoint.RunCheckpoint(str(directory), trainer, {}, keep=2)
    ckpt.save(1)
    ckpt.save(2)
    # Hand-edited (or copied from elsewhere): an entry first in the list, with its timestamp.
    listed = listed.format(other=other)
    state = directory / checkpoint.STATE_FILE
    lines = state.read_text().splitlines()
    paths = lines.index('all_model_checkpoint_paths: "ckpt-1"')
    stamps = next(i for i, line in enumerate(lines) if line.startswith("all_model_checkpoint_timestamps"))
    lines[stamps:stamps] = [lines[stamps]]
    lines[paths:paths] = [f'all_model_checkpoint_paths: "{listed}"']
    state.write_text("\n".join(lines) + "\n")
    before = _snapshot(tmp_path)

    with pytest.raises(checkpoint.CheckpointError) as error:
        resumed = checkpoint.RunCheckpoint(str(directory), _tiny_classifier_trainer(), {}, keep=2)
        resumed.save(3)  # beyond keep=2, the manager deleted the oldest listed: the files `listed` names
    message = str(error.value)
    assert (
        f"The checkpoint state file {state} lists 1 checkpoint(s) that are not ckpt-N files of {directory}: "
        f"{os.path.join(directory, listed)}. " in message
    )
    assert "nothing was deleted or read" in message and "delete it, and resume finds those" in message
    assert _snapshot(tmp_path) == before
    # What the message says to do works: without the state file, the directory's own checkpoints resume.
    state.unlink()
    found = checkpoint.RunCheckpoint(str(directory), trainer, {}).latest()
    assert found.path == str(directory / "ckpt-2")


def test_keep_must_be_positive(tmp_path):
    with pytest.raises(ValueError, match="keep=0"):
        checkpoint.RunCheckpoint(str(tmp_path), _tiny_classifier_trainer(), {}, keep=0)


def test_op_determinism_is_restored():
    from tensorflow.python.framework import config as tf_config

    assert not tf_config.is_op_determinism_enabled()
    with determinism.op_determinism(True):
        assert tf_config.is_op_determinism_enabled()
    assert not tf_config.is_op_determinism_enabled()


def _classifier_with_batch_norm(strategy):
    with strategy.scope():
        inputs = keras.Input((4,))
        hidden = keras.layers.BatchNormalization(name="bn")(keras.layers.Dense(3, name="dense")(inputs))
        trainer = trainers.ClassifierTrainer(keras.Model(inputs, keras.layers.Softmax(dtype="float32")(hidden)))
        trainer.compile(keras.optimizers.SGD(0.1), loss="sparse_categorical_crossentropy")
    return trainer


def _replica_values(trainer, name):
    (variable,) = [v for v in trainer.variables if v.path == name]
    return [np.array(c.numpy()) for c in trainer.distribute_strategy.experimental_local_results(variable.value)]


def test_each_replicas_own_batch_norm_statistics_survive_a_checkpoint(tmp_path):
    # Under MirroredStrategy each replica updates its own BatchNorm statistics until the epoch's end; a
    # checkpoint that kept only the first replica's copy would resume the others from it.
    mirrored = distribute.make_strategy("mirrored")
    assert mirrored.num_replicas_in_sync == 2
    trainer = _classifier_with_batch_norm(mirrored)
    for name in ("bn/moving_mean", "bn/moving_variance"):
        (variable,) = [v for v in trainer.variables if v.path == name]
        for i, copy in enumerate(mirrored.experimental_local_results(variable.value)):
            copy.assign(np.full(3, 0.25 + i, np.float32))
    saved = checkpoint.RunCheckpoint(str(tmp_path), trainer, {}, keep=2).save(1)

    resumed = _classifier_with_batch_norm(mirrored)
    ckpt = checkpoint.RunCheckpoint(str(tmp_path), resumed, {}, keep=2)
    assert ckpt.restore(ckpt.latest()) == 1
    for name in ("bn/moving_mean", "bn/moving_variance"):
        assert [v.tolist() for v in _replica_values(resumed, name)] == [[0.25] * 3, [1.25] * 3]

    # On one device the first replica's copy is the state; the others' copies are set aside, saying so.
    lines = []
    with output.lines_to(lines.append):
        single = _classifier_with_batch_norm(tf.distribute.get_strategy())
        one = checkpoint.RunCheckpoint(str(tmp_path / "one"), single, {}, read_directory=str(tmp_path))
        assert one.restore(one.latest()) == 1
        assert [v.tolist() for v in _replica_values(single, "bn/moving_mean")] == [[0.25] * 3]
        assert lines == [
            f"note: {saved} was written with 2 per-replica copies of state each replica keeps (BatchNorm "
            "statistics); this run has 0, so every replica resumes from the first replica's copy."
        ]

"""Tests for tfmp/run/callbacks/nonfinite_stop.py."""

import numpy as np
import pytest
import tensorflow as tf

from tfmp.run import callbacks


def test_nonfinite_stop_names_the_step_and_the_input_and_leaves_the_weights():
    import keras

    from tfmp import trainers

    inputs = keras.Input((2,))
    model = keras.Model(inputs, keras.layers.Dense(1, name="dense")(inputs))
    trainer = trainers.ClassifierTrainer(model)
    trainer.compile(keras.optimizers.SGD(0.1), loss="mse", skip_nonfinite=True)
    x = np.ones((6, 2), np.float32)
    x[4, 1] = np.nan  # the third batch of 2
    data = tf.data.Dataset.from_tensor_slices((x, np.ones((6, 1), np.float32))).batch(2)
    batches = list(data)
    after_two = []

    class Snapshot(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if batch == 1:
                after_two.extend(v.numpy().copy() for v in trainer.variables)

    with pytest.raises(callbacks.NonFiniteStepError) as error:
        trainer.fit(data, epochs=1, verbose=0, callbacks=[Snapshot(), callbacks.NonFiniteStop(batches.__getitem__)])
    message = str(error.value)
    assert "epoch 1, step 3 of the epoch (global step 3)" in message
    assert "input batch" in message and "1 NaN" in message
    assert "skipped this step's update and every variable of the model is finite" in message
    for before, variable in zip(after_two, trainer.variables):
        np.testing.assert_array_equal(before, variable.numpy())


def _dense_trainer(learning_rate=0.1):
    import keras

    from tfmp import trainers

    inputs = keras.Input((2,))
    trainer = trainers.ClassifierTrainer(keras.Model(inputs, keras.layers.Dense(1, name="dense")(inputs)))
    trainer.compile(keras.optimizers.SGD(learning_rate), loss="mse", skip_nonfinite=True)
    return trainer


def test_nonfinite_stop_sees_a_non_finite_first_step():
    trainer = _dense_trainer()
    x = np.ones((4, 2), np.float32)
    x[0, 0] = np.inf  # the very first batch of the fit()
    batches = list(tf.data.Dataset.from_tensor_slices((x, np.ones((4, 1), np.float32))).batch(2))
    with pytest.raises(callbacks.NonFiniteStepError) as error:
        trainer.fit(
            batches[0][0], batches[0][1], epochs=1, verbose=0, callbacks=[callbacks.NonFiniteStop(batches.__getitem__)]
        )
    assert "epoch 1, step 1 of the epoch (global step 1)" in str(error.value)
    assert "input batch" in str(error.value) and "1 Inf" in str(error.value)
    assert int(trainer.optimizer.skipped_steps) == 1


def test_nonfinite_stop_does_not_call_broken_weights_unchanged():
    """An infinite learning rate applies inf to the weights (finite gradient), then the next step is skipped:
    the message must not claim the weights are fine."""
    trainer = _dense_trainer(learning_rate=float("inf"))
    x = np.ones((4, 2), np.float32)
    data = tf.data.Dataset.from_tensor_slices((x, np.zeros((4, 1), np.float32))).batch(2)
    batches = list(data)
    with pytest.raises(callbacks.NonFiniteStepError) as error:
        trainer.fit(data, epochs=1, verbose=0, shuffle=False, callbacks=[callbacks.NonFiniteStop(batches.__getitem__)])
    message = str(error.value)
    assert "step 2 of the epoch (global step 2)" in message
    assert "unchanged" not in message and "is finite" not in message
    assert "2 of the model's variables already hold NaN or Inf (dense/kernel, dense/bias)" in message


def test_nonfinite_stop_names_a_dict_inputs_key_once_without_none_or_a_doubled_full_stop():
    import keras

    from tfmp import trainers

    tokens, length = keras.Input((3,), name="tokens"), keras.Input((1,), name="length")
    joined = keras.layers.Concatenate()([tokens, length])
    model = keras.Model({"tokens": tokens, "length": length}, keras.layers.Dense(1, name="dense")(joined))
    trainer = trainers.ClassifierTrainer(model)
    trainer.compile(keras.optimizers.SGD(0.1), loss="mse", skip_nonfinite=True)
    features = {"tokens": np.ones((4, 3), np.float32), "length": np.ones((4, 1), np.float32)}
    features["length"][3, 0] = np.nan  # the second batch of 2
    data = tf.data.Dataset.from_tensor_slices((features, np.ones((4, 1), np.float32))).batch(2)
    batches = list(data)
    with pytest.raises(callbacks.NonFiniteStepError) as error:
        trainer.fit(data, epochs=1, verbose=0, callbacks=[callbacks.NonFiniteStop(batches.__getitem__)])
    message = str(error.value)
    assert (
        "every variable of the model is finite. First non-finite: the input batch's 'length' (float32 [2, 1]): "
        "1 NaN and 0 Inf. Check the input data, or set on_nonfinite=skip"
    ) in message
    assert message.count("First non-finite") == 1 and "(None)" not in message and ".." not in message

"""A tf.keras 2-style custom training loop under `mixed_float16`, on Keras 3.

The loop of TensorFlow's tf.keras 2 mixed precision guide
(https://www.tensorflow.org/guide/mixed_precision), unchanged except for one
import: `from tfmp import mixed_precision` instead of
`from tensorflow.keras import mixed_precision`. It shows

* the global `mixed_float16` policy, with the softmax kept in float32;
* `LossScaleOptimizer` with tf.keras 2's custom-loop methods:
  `get_scaled_loss`, `get_unscaled_gradients`, then `apply_gradients`;
* the whole step inside one `tf.function`.

It trains a small classifier on the 8x8 digits that ship with tfmp (no
download). Run it with

    python3 examples/custom_loop_tf_keras2.py
    TFMP_EXAMPLE_STEPS=50 python3 examples/custom_loop_tf_keras2.py   # shorter

On most CPUs float16 is emulated (slow); `python3 scripts/benchmark.py --mode=kernels`
says what yours does with float16 and bfloat16.
"""

import math
import os

import keras
import tensorflow as tf

from tfmp import mixed_precision
from tfmp.run.data import load_digits

STEPS = int(os.environ.get("TFMP_EXAMPLE_STEPS", "400"))
BATCH_SIZE = 64

previous_policy = mixed_precision.global_policy()
mixed_precision.set_global_policy("mixed_float16")
try:
    digits = load_digits(image_size=(8, 8))
    model = keras.Sequential(
        [
            keras.Input((8, 8, 1)),
            keras.layers.Flatten(),
            keras.layers.Dense(128, activation="relu"),  # computes in float16
            keras.layers.Dense(10),
            # The softmax, and so the loss, must stay float32 under a mixed policy.
            keras.layers.Activation("softmax", dtype="float32"),
        ]
    )
    optimizer = mixed_precision.LossScaleOptimizer(keras.optimizers.Adam(1e-3))
    loss_fn = keras.losses.SparseCategoricalCrossentropy()

    @tf.function
    def train_step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
            # Small float16 gradients would flush to zero; scaling the loss lifts them.
            scaled_loss = optimizer.get_scaled_loss(loss)
        scaled_gradients = tape.gradient(scaled_loss, model.trainable_variables)
        gradients = optimizer.get_unscaled_gradients(scaled_gradients)
        optimizer.apply_gradients(zip(gradients, model.trainable_variables))
        return loss

    dataset = (
        tf.data.Dataset.from_tensor_slices((digits.x_train, digits.y_train))
        .shuffle(len(digits.y_train), seed=0)
        .repeat()
        .batch(BATCH_SIZE)
    )
    for step, (x, y) in enumerate(dataset.take(STEPS), start=1):
        loss = float(train_step(x, y))
        if step % 100 == 0:
            scale = float(optimizer.loss_scale)
            print(f"step {step}: loss {loss:.4f}, loss scale {scale:.0f}")

    predictions = model.predict(digits.x_val, verbose=0)
    accuracy = float((predictions.argmax(axis=1) == digits.y_val).mean())
    print(
        f"final loss: {loss:.4f} (finite: {math.isfinite(loss)}), "
        f"validation accuracy: {accuracy:.3f}"
    )
finally:
    mixed_precision.set_global_policy(previous_policy)

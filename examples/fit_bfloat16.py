"""Keras `fit()` under `mixed_bfloat16`, with tfmp's trainer and callbacks.

bfloat16 has float32's exponent range, so it needs no loss scaling: this is
the policy to use on CPUs with bfloat16 support and on Ampere+ GPUs. It shows

* `tfmp.precision_scope("mixed_bfloat16")`: the policy while the model is
  built, restored afterwards;
* `tfmp.Trainer`: a `keras.Model` whose `train_step` is tfmp's
  mixed-precision step (under bfloat16 its optimizer stays unwrapped);
* tfmp's callbacks: `StepTimer` (throughput), `ConsoleLogger` (one line per
  few steps and a summary) and `Summaries` (TensorBoard curves).

It trains a small CNN on the digits that ship with tfmp (no download). Run it
and look at the curves with

    python3 examples/fit_bfloat16.py
    tensorboard --logdir logs/fit_bfloat16
    TFMP_EXAMPLE_STEPS=20 python3 examples/fit_bfloat16.py   # shorter
"""

import math
import os

import keras
import tensorflow as tf

import tfmp
from tfmp.models.small_cnn import build_small_cnn
from tfmp.run import callbacks, output
from tfmp.run.data import load_digits

STEPS = int(os.environ.get("TFMP_EXAMPLE_STEPS", "200"))
EPOCHS = 2
BATCH_SIZE = 64
RUN_DIR = os.path.join("logs", "fit_bfloat16")  # this run's directory, for TensorBoard

digits = load_digits(image_size=(28, 28))
train = (
    tf.data.Dataset.from_tensor_slices((digits.x_train, digits.y_train))
    .shuffle(len(digits.y_train), seed=0)
    .repeat()
    .batch(BATCH_SIZE)
)
validation = tf.data.Dataset.from_tensor_slices((digits.x_val, digits.y_val)).batch(256)

with tfmp.precision_scope("mixed_bfloat16"):
    trainer = tfmp.Trainer(build_small_cnn(input_shape=(28, 28, 1)))
    trainer.compile(
        keras.optimizers.Adam(1e-3),
        loss="sparse_categorical_crossentropy",
        metrics=["accuracy"],
    )

timer = callbacks.StepTimer(images_per_step=BATCH_SIZE, warmup_steps=1)
fields = (("Loss", "loss"), ("Accuracy", "accuracy"))
logger = callbacks.ConsoleLogger(timer, fields=fields, log_every=25, run_dir=RUN_DIR)


def route(key):
    """Keras's TensorBoard layout: val_x under validation/, the rest under train/."""
    return ("validation", key[4:]) if key.startswith("val_") else ("train", key)


summaries = callbacks.Summaries(
    tensorboard_dir=RUN_DIR,
    route=route,
    hparams={"precision": "mixed_bfloat16", "batch_size": BATCH_SIZE},
    log_every=10,
    timer=timer,
)

with output.lines_to(print):  # the ConsoleLogger's lines, which go to `logging` otherwise
    history = trainer.fit(
        train,
        validation_data=validation,
        epochs=EPOCHS,
        steps_per_epoch=max(1, STEPS // EPOCHS),
        callbacks=[
            timer,
            logger,
            summaries,
        ],  # the StepTimer first: the other two read it
        verbose=0,  # the ConsoleLogger's lines instead
        shuffle=False,  # the dataset shuffles
    )

loss = history.history["loss"][-1]
accuracy = history.history["val_accuracy"][-1]
print(
    f"final loss: {loss:.4f} (finite: {math.isfinite(loss)}), "
    f"validation accuracy: {accuracy:.3f}"
)

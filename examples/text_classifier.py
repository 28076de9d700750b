r"""A text classifier of your own, trained by tfmp's run framework under `mixed_float16`.

Not an image model: reviews as sequences of integer tokens (word ids) ->
`Embedding` -> `GlobalAveragePooling1D` -> `Dense` -> a float32 softmax. The
reviews are made up here, so nothing is downloaded: 48 words each from a
vocabulary of 1,000, where words 100-199 are "good" and 200-299 "bad"; a
review is positive when it has more good words than bad ones. It shows

* `tfmp.run.tasks.SupervisedTask`: the model-building function, the data as
  arrays, the loss, optimizer and metrics, and the run's settings;
* `tfmp.run.training.train`: the whole run, with dynamic loss scaling, the
  console lines, TensorBoard curves (loss, accuracy, loss scale, skipped
  steps) and checkpoints under `logs/<run name>/`.

Run it, and look at the curves, with

    python3 examples/text_classifier.py
    tensorboard --logdir logs
    TFMP_EXAMPLE_STEPS=6 python3 examples/text_classifier.py   # shorter

This file is also a task module: the command line trains the same `TASK`,
with flags over its settings, resumable and on several GPUs:

    python3 scripts/train.py --task=examples/text_classifier.py:TASK --run_name=text
    python3 scripts/train.py --task=examples/text_classifier.py:TASK --run_name=text \
        --epochs=6 --resume

On most CPUs float16 is emulated (slower than float32), and bfloat16 is native
on CPUs with AVX512-BF16 (`--precision=bf16`); `python3 scripts/benchmark.py
--mode=kernels` says what yours does.
"""

import math
import os

import keras
import numpy as np

from tfmp.run import config, tasks, training

VOCABULARY, LENGTH = 1000, 48
GOOD, BAD = range(100, 200), range(200, 300)


def make_reviews(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """`n` reviews of `LENGTH` int32 word ids, and their labels (1: more good words)."""
    rng = np.random.default_rng(seed)
    words = rng.integers(0, VOCABULARY, (n, LENGTH), dtype=np.int32)
    good, bad = np.isin(words, GOOD).sum(axis=1), np.isin(words, BAD).sum(axis=1)
    return words, (good > bad).astype(np.int32)


def build_model() -> keras.Model:
    """The model; each run calls it under its precision's dtype policy."""
    inputs = keras.Input((LENGTH,), dtype="int32", name="words")
    x = keras.layers.Embedding(VOCABULARY, 16)(inputs)
    x = keras.layers.GlobalAveragePooling1D()(x)
    x = keras.layers.Dense(32, activation="relu")(x)
    # The softmax, and so the loss, must stay float32 under a mixed policy.
    outputs = keras.layers.Dense(2, activation="softmax", dtype="float32")(x)
    return keras.Model(inputs, outputs, name="text_classifier")


TASK = tasks.SupervisedTask(
    name="text_classifier",
    model=build_model,
    train_data=make_reviews(4000, seed=0),
    validation_data=make_reviews(1000, seed=1),
    loss="sparse_categorical_crossentropy",
    optimizer=keras.optimizers.Adam(1e-2),
    metrics=["accuracy"],
    config=config.TrainConfig(
        precision="mixed_float16",
        loss_scale="dynamic",
        epochs=3,
        batch_size=64,
        log_every=20,
    ),
)


def main() -> None:
    steps = int(os.environ.get("TFMP_EXAMPLE_STEPS", "0"))  # 0: whole epochs
    task = TASK
    if steps:
        task = TASK.with_config(steps_per_epoch=max(1, steps // TASK.config.epochs))
    result = training.train(task)

    loss, accuracy = result.logs["loss"], result.logs["val_accuracy"]
    print(
        f"final loss: {loss:.4f} (finite: {math.isfinite(loss)}), "
        f"validation accuracy: {accuracy:.3f}"
    )


if __name__ == "__main__":
    main()

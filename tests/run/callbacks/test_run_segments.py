"""Tests for tfmp/run/callbacks/segments.py."""

import numpy as np

from tfmp.run import callbacks


class _Recorder(__import__("keras").callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.events = []

    def on_train_begin(self, logs=None):
        self.events.append(("train_begin", self.params["steps"], self.params["epochs"]))

    def on_train_end(self, logs=None):
        self.events.append(("train_end",))

    def on_epoch_begin(self, epoch, logs=None):
        self.events.append(("epoch", epoch))

    def on_train_batch_end(self, batch, logs=None):
        self.events.append(("batch", batch))


def test_run_segments_look_like_one_run_to_a_callback():
    import keras

    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    x = np.zeros((12, 2), np.float32)
    recorder = _Recorder()
    run = {"steps": 3, "epochs": 3}
    # Resumed after 2 steps of epoch 0: one step finishes it, then epochs 1 and 2.
    model.fit(
        x[:1],
        x[:1, :1],
        batch_size=1,
        epochs=1,
        verbose=0,
        callbacks=[callbacks.RunSegment(recorder, True, False, batch_offset=2, params=run)],
    )
    model.fit(
        x,
        x[:, :1],
        batch_size=4,
        initial_epoch=1,
        epochs=3,
        verbose=0,
        callbacks=[callbacks.RunSegment(recorder, False, True, params=run)],
    )
    assert recorder.events == [
        ("train_begin", 3, 3),
        ("epoch", 0),
        ("batch", 2),
        ("epoch", 1),
        ("batch", 0),
        ("batch", 1),
        ("batch", 2),
        ("epoch", 2),
        ("batch", 0),
        ("batch", 1),
        ("batch", 2),
        ("train_end",),
    ]

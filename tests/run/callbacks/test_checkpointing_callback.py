"""Tests for tfmp/run/callbacks/checkpointing.py."""

import os

import numpy as np
import pytest

from tfmp.run import callbacks


def test_checkpointing_saves_every_n_steps_and_stops_on_request(tmp_path):
    import signal

    import keras

    from tfmp import trainers
    from tfmp.run import checkpoint, preemption

    inputs = keras.Input((2,))
    trainer = trainers.ClassifierTrainer(keras.Model(inputs, keras.layers.Dense(1)(inputs)))
    trainer.compile(keras.optimizers.SGD(0.1), loss="mse")
    ckpt = checkpoint.RunCheckpoint(str(tmp_path), trainer, {}, keep=10)
    x = np.ones((8, 2), np.float32)
    lines = []
    saver = callbacks.Checkpointing(ckpt, step=0, every=3, print_fn=lines.append)
    trainer.fit(x, x[:, :1], batch_size=2, epochs=1, verbose=0, callbacks=[saver])
    assert [os.path.basename(p) for p in ckpt.checkpoints] == ["ckpt-3", "ckpt-4"]
    assert lines == [f"checkpoint: {ckpt.checkpoints[-1]} (step 4)"]

    class Stop(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if batch == 0:
                signal.raise_signal(signal.SIGTERM)

    with preemption.PreemptionGuard() as guard:
        saver = callbacks.Checkpointing(ckpt, step=4, every=0, guard=guard, print_fn=lines.append)
        with pytest.raises(preemption.Preempted) as stopped:
            trainer.fit(x, x[:, :1], batch_size=2, epochs=1, verbose=0, callbacks=[Stop(), saver])
    assert stopped.value.step == 5 and stopped.value.checkpoint.endswith("ckpt-5")
    assert ckpt.latest().step == 5

"""Tests for tfmp/run/callbacks/checkpointing.py."""

import os

import numpy as np
import pytest

from tfmp.run import callbacks, output


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
    with output.lines_to(lines.append):
        saver = callbacks.Checkpointing(ckpt, step=0, every=3)
        trainer.fit(x, x[:, :1], batch_size=2, epochs=1, verbose=0, callbacks=[saver])
        assert [os.path.basename(p) for p in ckpt.checkpoints] == ["ckpt-3", "ckpt-4"]
        assert lines == [f"checkpoint: {ckpt.checkpoints[-1]} (step 4)"]

        class Stop(keras.callbacks.Callback):
            def on_train_batch_end(self, batch, logs=None):
                if batch == 0:
                    signal.raise_signal(signal.SIGTERM)

        with preemption.PreemptionGuard() as guard:
            saver = callbacks.Checkpointing(ckpt, step=4, every=0, guard=guard)
            with pytest.raises(preemption.Preempted) as stopped:
                trainer.fit(x, x[:, :1], batch_size=2, epochs=1, verbose=0, callbacks=[Stop(), saver])
        assert stopped.value.step == 5 and stopped.value.checkpoint.endswith("ckpt-5")
        assert ckpt.latest().step == 5


def test_in_a_cluster_every_worker_stops_at_the_step_the_workers_agree_on(tmp_path):
    # A stand-in for tfmp.run.preemption.ClusterStop: another worker reports SIGTERM at the end of step 3. This
    # worker received nothing, and its own request would not stop it alone: the gathered answer decides.
    import signal

    import keras

    from tfmp import trainers
    from tfmp.run import checkpoint, preemption

    inputs = keras.Input((2,))
    trainer = trainers.ClassifierTrainer(keras.Model(inputs, keras.layers.Dense(1)(inputs)))
    trainer.compile(keras.optimizers.SGD(0.1), loss="mse")
    run_dir = tmp_path / "run"
    ckpt = checkpoint.RunCheckpoint(str(tmp_path / "private"), trainer, {}, keep=10, read_directory=str(run_dir))
    asked = []

    def cluster(signum):
        asked.append(signum)
        # Asked twice at step 3: the decision, then the barrier after the save.
        return {"worker 1 (10.0.0.2:2222)": signal.SIGTERM} if len(asked) >= 3 else {}

    x = np.ones((8, 2), np.float32)
    saver = callbacks.Checkpointing(ckpt, step=0, every=0, cluster=cluster)
    with pytest.raises(preemption.Preempted) as stopped:
        trainer.fit(x, x[:, :1], batch_size=2, epochs=1, verbose=0, callbacks=[saver])
    assert asked == [None] * 4  # after steps 1, 2 and 3, then once more after the save
    error = stopped.value
    assert error.step == 3 and error.exit_code == preemption.CLUSTER_EXIT_CODE
    assert error.signalled == {"worker 1 (10.0.0.2:2222)": signal.SIGTERM}
    # This worker wrote its copy where it writes; the message names the run's checkpoint, which resume reads.
    assert [os.path.basename(p) for p in ckpt.checkpoints] == [] and os.path.isfile(
        tmp_path / "private" / "ckpt-3.index"
    )
    assert error.checkpoint == str(run_dir / "ckpt-3")


def test_the_checkpoint_of_an_epochs_last_step_holds_the_epochs_end_and_a_stop_then_waits_for_it(tmp_path):
    # A stand-in for AverageReplicaStatistics, which changes the BatchNorm statistics at the epoch's end: the
    # checkpoint of the epoch's last step must hold its change, also when a stop is requested during that step.
    import signal

    import keras
    import tensorflow as tf

    from tfmp import trainers
    from tfmp.run import checkpoint, preemption

    inputs = keras.Input((2,))
    model = keras.Model(inputs, keras.layers.Dense(1)(inputs))
    trainer = trainers.ClassifierTrainer(model)
    trainer.compile(keras.optimizers.SGD(0.1), loss="mse")
    marker = model.layers[-1].bias

    class EndOfEpoch(keras.callbacks.Callback):
        def __init__(self, stop_at=None):
            super().__init__()
            self.stop_at = stop_at

        def on_train_batch_end(self, batch, logs=None):
            if batch == self.stop_at:
                signal.raise_signal(signal.SIGTERM)

        def on_epoch_end(self, epoch, logs=None):
            marker.assign([100.0 + epoch])

    def saved_marker(path):
        reader = tf.train.load_checkpoint(path)
        # The bias: a checkpoint saves a variable once, under its first path, here the optimizer's.
        bias = "_trainable_variables/1/.ATTRIBUTES/VARIABLE_VALUE"
        (key,) = [k for k in reader.get_variable_to_shape_map() if k.endswith(bias)]
        return reader.get_tensor(key)

    ckpt = checkpoint.RunCheckpoint(str(tmp_path), trainer, {}, keep=10)
    x = np.ones((8, 2), np.float32)
    saver = callbacks.Checkpointing(ckpt, step=0, every=1)
    trainer.fit(x, x[:, :1], batch_size=2, epochs=2, verbose=0, callbacks=[EndOfEpoch(), saver])
    assert [os.path.basename(p) for p in ckpt.checkpoints] == [f"ckpt-{i}" for i in range(1, 9)]
    np.testing.assert_array_equal(saved_marker(ckpt.checkpoints[3]), [100.0])  # ckpt-4: epoch 0's end
    np.testing.assert_array_equal(saved_marker(ckpt.checkpoints[7]), [101.0])
    assert saved_marker(ckpt.checkpoints[2])[0] not in (100.0, 101.0)

    with preemption.PreemptionGuard() as guard:
        saver = callbacks.Checkpointing(ckpt, step=8, every=0, guard=guard)
        with pytest.raises(preemption.Preempted) as stopped:
            trainer.fit(x, x[:, :1], batch_size=2, epochs=2, verbose=0, callbacks=[EndOfEpoch(stop_at=3), saver])
    # Stopped at the end of the epoch whose last step it arrived in, with the epoch's end in the checkpoint.
    assert stopped.value.step == 12 and stopped.value.checkpoint.endswith("ckpt-12")
    np.testing.assert_array_equal(saved_marker(stopped.value.checkpoint), [100.0])

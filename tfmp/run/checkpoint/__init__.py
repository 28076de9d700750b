"""Checkpoints that resume a run exactly, and survive being killed mid-write.

A `RunCheckpoint` holds everything a step changes, as one object-based
`tf.train.Checkpoint` managed by one `tf.train.CheckpointManager`:

* `trainer`: the trainer itself. Keras 3 on TensorFlow makes layers,
  models, optimizers and variables TensorFlow trackables, so the checkpoint
  follows the trainer's attributes to every network weight and BatchNorm
  statistic, and each variable is matched on restore by where it sits in
  that object graph (`trainer/generator/...`), not by its position in a
  list;
* `optimizer_<name>`: each optimizer of `trainer.optimizers` under its own
  name (also reachable through the trainer, but named here so that a
  checkpoint's layout says which optimizer is which): iterations, slots,
  learning rate, and for a `tfmp.LossScaleOptimizer` the scale, its growth
  and hysteresis counters and the skipped-step count;
* `seed_generators`: the states of the trainer's `keras.random.SeedGenerator`s
  (the GAN's noise, Dropout masks), keyed by where each generator is held
  (`seed_generators/noise_seed`, `seed_generators/discriminator/_operations/3/seed_generator`).
  Keras's seed generators are not TensorFlow trackables, so the trainer's
  object graph does not reach them;
* `replicas` (under `MirroredStrategy`) or `workers` (under
  `MultiWorkerMirroredStrategy`): the other replicas' own copies of the
  non-trainable state each replica updates from its share of the batch
  (BatchNorm statistics), which a distributed variable's checkpoint would
  otherwise reduce to the chief's first replica's; a run resumed mid-epoch
  then ends the epoch exactly as the uninterrupted one
  (`tfmp.run.replica_state`). Resumed with another number of replicas, every
  replica starts from the first one's copy, with a note;
* `step`: the global step, from which the epoch and the position in the
  data follow (`tfmp.run.training` replays the data stream to that position);
* `signature`: what must not change between the run that wrote a
  checkpoint and the one that resumes from it (model, precision, loss
  scaling, optimizers, data order). A mismatch is refused, naming it; a
  setting under the signature's `SETTINGS_KEY` entry as a config names it
  (`batch_size=32 in the checkpoint, batch_size=64 in this run`).

TensorFlow stores each variable once, under the shortest path that reaches
it: a network's trainable weights therefore appear under their optimizer
(`optimizer_<name>/_trainable_variables/<i>`, the list Keras optimizers
keep of what they update) and the other variables under `trainer/...`; a
restore matches them through either path. Compiled metrics are not in the
checkpoint (Keras 3 metrics are not trackables); `fit()` resets them at
every epoch anyway. `RunCheckpoint` refuses, naming them, a trainer whose
`variables` or optimizer variables the checkpoint would not reach (a
weight a custom layer created without keeping it in an attribute), rather
than resume them silently from their initial values.

Checkpoints of tfmp 0.1.0, which stored `trainer.variables` and each
optimizer's `variables` as positional lists (`model/<i>`,
`optimizer_<name>/<i>`), are still resumed: `restore` recognises their
keys and reads them in that layout (`tfmp.run.checkpoint.legacy`). Saves
always write the object layout.

Writes are crash-safe by construction: TensorFlow writes a checkpoint's
files first and only then, atomically, the `checkpoint` state file that
names the latest one. A process killed mid-write leaves the previous
checkpoint as the latest. A failed write (disk full) raises
`CheckpointError` naming the directory, after removing its partial files:
the previous checkpoints stay the latest. Reading is defensive too:
`latest()` reads every tensor of the newest checkpoint before trusting it,
and falls back to the one before, saying so, when it is truncated or
corrupt.

Checkpoints are never lost to a missing state file (deleted by a clean-up,
lost by a sync tool or an interrupted copy): a directory holding `ckpt-N`
files holds checkpoints, and `latest()` then finds them by their files. A
`ckpt-N` this run did not write is never overwritten (`save` renames its
files to `*.old` first) nor deleted (the manager only deletes, beyond
`keep`, checkpoints that the state file or this run's saves list). Nor is
anything outside the directory: a state file that lists anything but the
directory's own `ckpt-N` (hand-edited, copied from another run) is refused,
naming the paths, before anything is read or deleted.

Typical use (what `tfmp.run.training` does):

```python
ckpt = RunCheckpoint(directory, trainer, signature, keep=3)
found = ckpt.latest()                    # None: nothing to resume
if found:
    step = ckpt.restore(found)               # raises CheckpointError on mismatch
...
ckpt.save(step)
```

One module per concept: `run_checkpoint` (`RunCheckpoint`), `signature`
(the step and signature a checkpoint holds, `run_signature`, `Found`, `CheckpointError`),
`files` (a directory's `ckpt-N` files) and `contents` (the seed generators'
states, and the variables a checkpoint would not reach). The public names
are importable from here.
"""

from __future__ import annotations

from tfmp.run.checkpoint.files import STATE_FILE
from tfmp.run.checkpoint.run_checkpoint import RunCheckpoint
from tfmp.run.checkpoint.signature import SETTINGS_KEY, CheckpointError, Found, SettingsDiffer, run_signature
from tfmp.run.determinism import op_determinism  # noqa: F401 - its 0.1 path, `tfmp.checkpoint.op_determinism`

__all__ = ["SETTINGS_KEY", "STATE_FILE", "CheckpointError", "Found", "RunCheckpoint", "SettingsDiffer", "run_signature"]

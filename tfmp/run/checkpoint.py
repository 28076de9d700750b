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
keys and reads them in that layout (`tfmp.run.legacy_checkpoint`). Saves
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
found = ckpt.latest(print_fn=print)          # None: nothing to resume
if found:
    step = ckpt.restore(found)               # raises CheckpointError on mismatch
...
ckpt.save(step)
```
"""

from __future__ import annotations

import collections
import dataclasses
import json
import os
import re
import shutil
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import keras
import tensorflow as tf

from tfmp.run import legacy_checkpoint as legacy
from tfmp.run.determinism import op_determinism  # noqa: F401 - its 0.1 path, `tfmp.checkpoint.op_determinism`
from tfmp.run.replica_state import ReplicaState

__all__ = ["CheckpointError", "Found", "RunCheckpoint"]

_STEP_KEY = "step/.ATTRIBUTES/VARIABLE_VALUE"
_SIGNATURE_KEY = "signature/.ATTRIBUTES/VARIABLE_VALUE"
STATE_FILE = "checkpoint"  # tf.train.CheckpointManager's list of the checkpoints
# The signature entry holding the run's settings (`tfmp.run.config` fields), whose differences name the setting.
SETTINGS_KEY = "config"
# The files of checkpoint N, as tf.train.CheckpointManager names them (prefix "ckpt").
_CHECKPOINT_FILE = re.compile(r"^ckpt-(\d+)\.(?:index|data-\d{5}-of-\d{5})$")


class CheckpointError(ValueError):
    """A checkpoint that cannot be written or resumed from; the message names the file or variables."""


@dataclasses.dataclass(frozen=True)
class Found:
    """A readable checkpoint.

    Attributes:
        path: The checkpoint's prefix (`<dir>/ckpt-N`).
        step: Training steps done when it was written.
        signature: The run signature it was written with.
    """

    path: str
    step: int
    signature: dict[str, Any]


def _read_all(path: str) -> tuple[int, dict[str, Any]]:
    """Reads every tensor of a checkpoint; returns its step and signature.

    Raises:
        Exception: (tf.errors.OpError, IndexError, ValueError, ...) if any
        part is missing, truncated or corrupt.
    """
    reader = tf.train.load_checkpoint(path)
    for key in reader.get_variable_to_shape_map():
        reader.get_tensor(key)  # reads (and checksums) the data
    step = int(reader.get_tensor(_STEP_KEY))
    signature = json.loads(reader.get_tensor(_SIGNATURE_KEY).decode("utf-8"))
    return step, signature


def _differences(saved: Any, current: Any, key: str = "") -> list[str]:
    """One line per differing leaf, naming both values in full.

    `key: checkpoint <value>, this run <value>`, nested keys joined with
    dots; a setting (a key under `SETTINGS_KEY`) as a config names it,
    `batch_size=32 in the checkpoint, batch_size=64 in this run`, which the
    scripts turn into flag names.
    """
    if isinstance(saved, Mapping) and isinstance(current, Mapping):
        return [
            line
            for name in sorted(set(saved) | set(current), key=str)
            for line in _differences(saved.get(name), current.get(name), f"{key}.{name}" if key else str(name))
        ]
    if saved == current:
        return []
    group, _, setting = key.partition(".")
    if group == SETTINGS_KEY and setting:
        return [f"{setting}={saved!r} in the checkpoint, {setting}={current!r} in this run"]
    return [f"{key}: checkpoint {json.dumps(saved, sort_keys=True)}, this run {json.dumps(current, sort_keys=True)}"]


def _checkpoint_files(directory: str) -> dict[int, list[str]]:
    """The `ckpt-N` files in `directory` by checkpoint number N (sorted names), listed in a state file or not."""
    try:
        names = sorted(os.listdir(directory or "."))
    except OSError:
        return {}
    files: dict[int, list[str]] = {}
    for name in names:
        if m := _CHECKPOINT_FILE.match(name):
            files.setdefault(int(m.group(1)), []).append(os.path.join(directory, name))
    return files


def _on_disk(directory: str) -> list[str]:
    """The checkpoints whose files are in `directory`, listed or not, oldest (lowest number) first."""
    return [os.path.join(directory, f"ckpt-{n}") for n in sorted(_checkpoint_files(directory))]


def _not_own(directory: str, paths: Iterable[str]) -> list[str]:
    """The `paths` that are not a `ckpt-N` directly in `directory` (symbolic links resolved), in order."""
    home = os.path.realpath(directory or ".")
    return [
        path
        for path in paths
        if not re.fullmatch(r"ckpt-\d+", os.path.basename(path))
        or os.path.realpath(os.path.dirname(path) or ".") != home
    ]


def _files_of(prefix: str) -> list[str]:
    """The files of the checkpoint `prefix` (`<dir>/ckpt-N`) that exist."""
    directory, name = os.path.split(prefix)
    number = name.removeprefix("ckpt-")
    return _checkpoint_files(directory).get(int(number), []) if number.isdigit() else []


def _set_aside(files: list[str]) -> list[str]:
    """Renames each file to `<file>.old` (`.old-2`, ... if taken); returns the new names."""
    moved = []
    for path in files:
        target, n = f"{path}.old", 1
        while os.path.lexists(target):
            n += 1
            target = f"{path}.old-{n}"
        os.rename(path, target)
        moved.append(target)
    return moved


def _seed_generator_states(trainer: Any) -> dict[str, Any]:
    """The states of the `keras.random.SeedGenerator`s the trainer's layers hold, nested by where they are held.

    Keras 3's seed generators are plain Python objects, not TensorFlow
    trackables, so `tf.train.Checkpoint` does not follow a layer's attribute
    to one. This walks the trainer's object graph (`tf.train.TrackableView`,
    breadth first, as the checkpoint does) and names each generator by the
    path of the layer holding it and its attribute: the GAN trainer's
    `noise_seed` is `{"noise_seed": state}`, a Dropout layer's generator
    `{"discriminator": {"_operations": {"3": {"seed_generator": state}}}}`.
    A generator kept in a list or tuple attribute is named by its index in it.

    Returns:
        Nested dicts whose leaves are the generators' state variables.
    """
    states: dict[str, Any] = {}
    seen: set[int] = set()

    def add(path: list[str], state: Any) -> None:
        node = states
        for name in path[:-1]:
            node = node.setdefault(name, {})
        node[path[-1]] = state

    paths = {id(trainer): []}
    queue = collections.deque([trainer])
    while queue:
        obj = queue.popleft()
        if isinstance(obj, keras.layers.Layer):
            attributes = list(vars(obj).items())
            # Direct attributes first: Keras also lists a layer's generators in a private list.
            found = [([name], value) for name, value in attributes]
            found += [
                ([name, str(i)], item)
                for name, value in attributes
                if isinstance(value, (list, tuple))
                for i, item in enumerate(value)
            ]
            for names, value in found:
                if isinstance(value, keras.random.SeedGenerator) and id(value) not in seen:
                    seen.add(id(value))
                    add(paths[id(obj)] + names, value.state)
        for name, child in tf.train.TrackableView.children(obj).items():
            if id(child) not in paths:
                paths[id(child)] = paths[id(obj)] + [name]
                queue.append(child)
    return states


def _unreachable(checkpoint: tf.train.Checkpoint, variables: Iterable[Any]) -> list[Any]:
    """The `variables` that `checkpoint` does not reach, so would neither save nor restore.

    What a save writes is the variables among the checkpoint's descendants
    (`tf.train.TrackableView.descendants`, the object graph it walks): this
    compares identities against them, without writing anything.
    """
    reachable = {id(node) for node in tf.train.TrackableView(checkpoint).descendants()}
    return [v for v in variables if id(v) not in reachable]


class RunCheckpoint:
    """The checkpoints of one training run.

    Args:
        directory: Where the checkpoints go (created if missing).
        trainer: A `tfmp.trainers` trainer, compiled, with its optimizers
            built (its `optimizers` mapping names them).
        signature: JSON-serialisable settings a resume must match.
        keep: How many checkpoints to keep (>= 1; keep 2 or more so that a
            corrupt newest one has a fallback).
        read_directory: Where to resume from, if not `directory`. Under
            multi-worker training every worker restores the chief's
            checkpoints (a filesystem all workers see) but the others write
            their own copies to private directories.
        print_fn: Says when `save` keeps the files of an existing
            checkpoint it would otherwise overwrite.

    Raises:
        CheckpointError: when the directory's state file is invalid, or when
            a variable of the trainer or its optimizers is not reachable from
            the checkpoint's object graph (the message names each one).
    """

    def __init__(
        self,
        directory: str,
        trainer: Any,
        signature: Mapping[str, Any],
        keep: int = 3,
        read_directory: str | None = None,
        print_fn: Callable[[str], None] = print,
    ):
        if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
            raise ValueError(f"keep must be an integer >= 1. Received: keep={keep!r}")
        self.directory = directory
        self.signature = json.loads(json.dumps(signature, sort_keys=True, default=str))
        self._step = tf.Variable(0, dtype=tf.int64, trainable=False, name="step")
        self._signature = tf.Variable(json.dumps(self.signature, sort_keys=True), dtype=tf.string, trainable=False)
        for name, optimizer in trainer.optimizers.items():
            if not optimizer.built:
                raise ValueError(f"Build the optimizer of {name!r} before checkpointing (trainer.compile does).")
        self._trainer = trainer
        # One top-level name per optimizer, as the signature's `optimizers` names them, rather than one
        # name-keyed object: the same top-level names as the 0.1.0 layout, so a checkpoint's keys say
        # which optimizer is which in both.
        objects = {
            "trainer": trainer,
            "seed_generators": _seed_generator_states(trainer),
            "step": self._step,
            "signature": self._signature,
            **{f"optimizer_{name}": optimizer for name, optimizer in trainer.optimizers.items()},
        }
        self._core = tf.train.Checkpoint(**objects)
        # What the core cannot hold: the other replicas' own copies (a checkpoint saves a variable's first).
        self._replica_state = ReplicaState(trainer)
        self._checkpoint = self._core
        if self._replica_state.copies:
            self._checkpoint = tf.train.Checkpoint(**objects, **{self._replica_state.name: self._replica_state.copies})
        optimizer_variables = [v for optimizer in trainer.optimizers.values() for v in optimizer.variables]
        missing = _unreachable(self._core, [*trainer.variables, *optimizer_variables])
        if missing:
            raise CheckpointError(
                f"Cannot checkpoint {trainer.name}: {len(missing)} of its variables are not reachable from its "
                "object graph, so a checkpoint would not hold them and a resumed run would start them from "
                "their initial values: "
                + ", ".join(f"{v.path} (shape {tuple(v.shape)})" for v in missing)
                + ". Keep each variable (or the object holding it) in an attribute of a layer, model or "
                "optimizer, e.g. `self.w = self.add_weight(...)` rather than a bare `self.add_weight(...)`."
            )
        self.read_directory = read_directory or directory
        self._manager = self._reader = self._new_manager(directory, keep)
        if self.read_directory != directory:
            self._reader = self._new_manager(self.read_directory, keep)
        self.print_fn = print_fn
        self._written: set[str] = set()  # the checkpoints this object wrote

    def _new_manager(self, directory: str, keep: int) -> tf.train.CheckpointManager:
        """A manager of `directory`'s checkpoints, refusing a state file that names files elsewhere."""
        state = os.path.join(directory, STATE_FILE)
        try:
            manager = tf.train.CheckpointManager(self._checkpoint, directory, max_to_keep=keep)
        except ValueError as e:  # a state file without a latest checkpoint (emptied, hand-edited)
            raise CheckpointError(
                f"The checkpoint state file {state} is invalid ({e}). It only lists "
                "the checkpoints: delete it, and resume finds them by their files."
            ) from None
        # The manager deletes the files of every listed checkpoint beyond `keep` (its names are glob
        # patterns, too), so a hand-edited or copied state file must not reach beyond this directory's own.
        foreign = _not_own(directory, manager.checkpoints)
        if foreign:
            raise CheckpointError(
                f"The checkpoint state file {state} lists {len(foreign)} checkpoint(s) that are not ckpt-N files "
                f"of {directory}: {', '.join(foreign)}. A run deletes the oldest checkpoints its state file lists, "
                "so it is not used (nothing was deleted or read). It only lists the checkpoints: delete it, and "
                f"resume finds those in {directory} by their files."
            )
        return manager

    @property
    def checkpoints(self) -> list[str]:
        """The checkpoints to resume from, oldest first.

        Those the `checkpoint` state file lists; when it is missing (or lists
        none), every `ckpt-N` whose files are in the directory, so that a
        lost state file never makes a directory look empty.
        """
        return list(self._reader.checkpoints) or _on_disk(self.read_directory)

    def save(self, step: int) -> str:
        """Writes a checkpoint of the current state after `step` steps; returns its path.

        Files of a checkpoint with the same number that this object did not
        write (an unreadable one a resume fell back from, or one missing from
        the state file) are never overwritten: they are renamed to
        `<file>.old` first, saying so.

        Raises:
            CheckpointError: when the write fails (disk full, permissions):
                the message names the directory; the partial files of this
                checkpoint are removed, and the previous checkpoints remain.
        """
        prefix = os.path.join(self.directory, f"ckpt-{step}")
        foreign = [] if prefix in self._written else _files_of(prefix)
        if foreign and self.read_directory == self.directory:  # a worker's private copies are its own
            moved = _set_aside(foreign)
            self.print_fn(
                f"note: {prefix} already existed and was not written by this run; kept its files as "
                f"{', '.join(os.path.basename(f) for f in moved)}"
            )
        previous = [p for p in (list(self._manager.checkpoints) or _on_disk(self.directory)) if p != prefix]
        self._step.assign(step)
        self._replica_state.save()  # under several workers a collective: every worker saves at this step
        try:
            path = self._manager.save(checkpoint_number=step)
        except (tf.errors.OpError, OSError) as e:
            for leftover in _files_of(prefix):
                os.remove(leftover)
            shutil.rmtree(f"{prefix}_temp", ignore_errors=True)  # TensorFlow's scratch directory for it
            self._written.discard(prefix)
            reason = str(e).strip().splitlines()[0] if str(e).strip() else ""
            kept = (
                f"the previous checkpoints remain, the newest being {previous[-1]}"
                if previous
                else "no checkpoint had been written there yet"
            )
            raise CheckpointError(
                f"Could not write checkpoint {prefix} in {self.directory} ({type(e).__name__}: {reason}). Nothing "
                f"was lost: {kept}, and the partial files of ckpt-{step} were removed. Free space in (or fix) "
                f"{self.directory}, then resume the run."
            ) from None
        self._written.add(path)
        return path

    def latest(self, print_fn: Callable[[str], None] = print) -> Found | None:
        """The newest checkpoint that reads back completely, or None if there is none.

        An unreadable newest checkpoint (truncated, corrupt, half-written by
        a killed process) is skipped with a message naming it and the one
        used instead. Without a state file listing the checkpoints, they are
        found by their files, and one line says so and which was chosen.

        Raises:
            CheckpointError: when checkpoints exist but none can be read.
        """
        listed = list(self._reader.checkpoints)
        candidates = list(reversed(listed or _on_disk(self.read_directory)))
        if not candidates:
            return None
        failures = []
        for path in candidates:
            try:
                step, signature = _read_all(path)
            except Exception as e:  # noqa: BLE001 - TF raises OpError, IndexError, ValueError... for bad files
                reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                failures.append(f"{path} ({reason})")
                continue
            if not listed:
                state = os.path.join(self.read_directory, STATE_FILE)
                skipped = f" (skipped, unreadable: {'; '.join(failures)})" if failures else ""
                print_fn(
                    f"warning: the state file {state} that lists the checkpoints is "
                    f"{'unreadable or empty' if os.path.exists(state) else 'missing'}; found "
                    f"{len(candidates)} checkpoint(s) by their files; resuming from the newest readable one, "
                    f"{path}{skipped}"
                )
            elif failures:
                print_fn(f"warning: checkpoint {failures[-1]} is unreadable; resuming from the previous one, {path}")
            return Found(path, step, signature)
        raise CheckpointError(
            "No checkpoint in this directory can be read: "
            + "; ".join(failures)
            + ". Start a new run (another run_name or checkpoint_dir) or restore the files."
        )

    def check_signature(self, found: Found) -> None:
        """Raises `CheckpointError` naming every setting that differs from `found`'s."""
        differences = _differences(found.signature, self.signature)
        if differences:
            raise CheckpointError(
                f"Checkpoint {found.path} was written by a different run; resume with the same settings, "
                f"or start a new run (another run_name or checkpoint_dir). Differences: " + "; ".join(differences)
            )

    def restore(self, found: Found) -> int:
        """Restores `found` into the trainer and optimizers; returns its step.

        A checkpoint in tfmp 0.1.0's positional layout is read in that layout
        (`tfmp.run.legacy_checkpoint`); the next `save` writes the object
        layout.

        Raises:
            CheckpointError: when the signatures differ, or the checkpoint's
                variables do not fit this trainer (another model).
        """
        self.check_signature(found)
        try:
            shapes = tf.train.load_checkpoint(found.path).get_variable_to_shape_map()  # one read of the index
            keys = list(shapes)
            saved_copies = None
            if legacy.is_legacy(keys):
                legacy.check_counts(keys, self._trainer)
                checkpoint = legacy.legacy_checkpoint(self._trainer, self._step, self._signature)
            else:
                saved_copies = self._replica_state.saved(shapes)
                checkpoint = self._checkpoint if self._replica_state.fits(shapes) else self._core
            # Created before reading, so the saved counter has a variable to go to and assert_consumed
            # checks the rest; the manager numbers checkpoints by step, not by this counter.
            _ = checkpoint.save_counter
            status = checkpoint.read(found.path)
            if checkpoint is self._core and saved_copies:
                # Written with another number of replicas: their own copies have nowhere to go.
                status.assert_existing_objects_matched()
                status.expect_partial()
                self.print_fn(
                    f"note: {found.path} was written with {saved_copies} of state each "
                    f"replica keeps (BatchNorm statistics); this run has {self._replica_state.describe()}, so every "
                    "replica resumes from the first replica's copy."
                )
            else:
                # Both ways: every variable here got a value, and every value of the checkpoint found a variable.
                status.assert_consumed()
        except (AssertionError, ValueError, tf.errors.OpError) as e:
            raise CheckpointError(
                f"Checkpoint {found.path} does not fit this model and optimizers ({str(e).splitlines()[0]}). "
                "It was written by another model; start a new run (another run_name or checkpoint_dir)."
            ) from None
        if checkpoint is self._checkpoint:
            self._replica_state.restore()
        return int(self._step.numpy())

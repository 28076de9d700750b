"""`RunCheckpoint`: the checkpoints of one training run, saved, found and restored (see `tfmp.run.checkpoint`)."""

from __future__ import annotations

import json
import logging
import os
import shutil
from collections.abc import Mapping
from typing import Any

import tensorflow as tf

from tfmp.run.checkpoint import legacy
from tfmp.run.checkpoint.contents import seed_generator_states, unreachable
from tfmp.run.checkpoint.files import STATE_FILE, files_of, not_own, on_disk, set_aside
from tfmp.run.checkpoint.signature import CheckpointError, Found, SettingsDiffer, differences, read_all
from tfmp.run.replica_state import ReplicaState

__all__ = ["RunCheckpoint"]

log = logging.getLogger(__name__)


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

    What it notes (`save` keeping the files of an existing checkpoint it
    would otherwise overwrite, a resume that skips an unreadable one) is
    logged (`tfmp.run.output`).

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
    ):
        if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
            raise ValueError(f"keep must be an integer >= 1. Received: keep={keep!r}")
        self.directory = directory
        self.signature = json.loads(json.dumps(signature, sort_keys=True, default=str))
        self._step = tf.Variable(0, dtype=tf.int64, trainable=False, name="step")
        self._signature = tf.Variable(json.dumps(self.signature, sort_keys=True), dtype=tf.string, trainable=False)
        for name, optimizer in trainer.optimizers.items():
            if not optimizer.built:
                raise ValueError(
                    f"Build optimizer {name!r} ({type(optimizer).__name__}) of {trainer.name} before checkpointing: "
                    "a trainer's compile() builds each optimizer on the variables it updates."
                )
        self._trainer = trainer
        # One top-level name per optimizer, as the signature's `optimizers` names them, rather than one
        # name-keyed object: the same top-level names as the 0.1.0 layout, so a checkpoint's keys say
        # which optimizer is which in both.
        objects = {
            "trainer": trainer,
            "seed_generators": seed_generator_states(trainer),
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
        missing = unreachable(self._core, [*trainer.variables, *optimizer_variables])
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
        foreign = not_own(directory, manager.checkpoints)
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
        return list(self._reader.checkpoints) or on_disk(self.read_directory)

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
        foreign = [] if prefix in self._written else files_of(prefix)
        if foreign and self.read_directory == self.directory:  # a worker's private copies are its own
            moved = set_aside(foreign)
            log.info(
                f"note: {prefix} already existed and was not written by this run; kept its files as "
                f"{', '.join(os.path.basename(f) for f in moved)}"
            )
        previous = [p for p in (list(self._manager.checkpoints) or on_disk(self.directory)) if p != prefix]
        self._step.assign(step)
        self._replica_state.save()  # under several workers a collective: every worker saves at this step
        try:
            path = self._manager.save(checkpoint_number=step)
        except (tf.errors.OpError, OSError) as e:
            for leftover in files_of(prefix):
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

    def latest(self) -> Found | None:
        """The newest checkpoint that reads back completely, or None if there is none.

        An unreadable newest checkpoint (truncated, corrupt, half-written by
        a killed process) is skipped with a message naming it and the one
        used instead. Without a state file listing the checkpoints, they are
        found by their files, and one line says so and which was chosen.

        Raises:
            CheckpointError: when checkpoints exist but none can be read.
        """
        listed = list(self._reader.checkpoints)
        candidates = list(reversed(listed or on_disk(self.read_directory)))
        if not candidates:
            return None
        failures = []
        for path in candidates:
            try:
                step, signature = read_all(path)
            except Exception as e:  # noqa: BLE001 - TF raises OpError, IndexError, ValueError... for bad files
                reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                failures.append(f"{path} ({reason})")
                continue
            if not listed:
                state = os.path.join(self.read_directory, STATE_FILE)
                skipped = f" (skipped, unreadable: {'; '.join(failures)})" if failures else ""
                log.warning(
                    f"warning: the state file {state} that lists the checkpoints is "
                    f"{'unreadable or empty' if os.path.exists(state) else 'missing'}; found "
                    f"{len(candidates)} checkpoint(s) by their files; resuming from the newest readable one, "
                    f"{path}{skipped}"
                )
            elif failures:
                log.warning(f"warning: checkpoint {failures[-1]} is unreadable; resuming from the previous one, {path}")
            return Found(path, step, signature)
        raise CheckpointError(
            "No checkpoint in this directory can be read: "
            + "; ".join(failures)
            + ". Start a new run (another run_name or checkpoint_dir) or restore the files."
        )

    def check_signature(self, found: Found) -> None:
        """Raises `SettingsDiffer` (a `CheckpointError`) naming every setting that differs from `found`'s."""
        settings, others = differences(found.signature, self.signature)
        if settings or others:
            raise SettingsDiffer(found.path, settings, others)

    def restore(self, found: Found) -> int:
        """Restores `found` into the trainer and optimizers; returns its step.

        A checkpoint in tfmp 0.1.0's positional layout is read in that layout
        (`tfmp.run.checkpoint.legacy`); the next `save` writes the object
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
                log.info(
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

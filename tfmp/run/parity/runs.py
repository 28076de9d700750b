"""The runs of a parity experiment: what each starts from, the check that a unit's runs are paired, and
`run_parity`, which trains them and records their results."""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import logging
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from tfmp import precision as precision_lib
from tfmp.run import output, runner, tasks, training
from tfmp.run import settled as settled_lib
from tfmp.run.parity.design import REFERENCE, ParityConfig
from tfmp.run.parity.record import ParityRecord
from tfmp.run.parity.table import scale_text
from tfmp.run.parity.task import parity_task

__all__ = ["PairedStart", "PairingError", "paired_start", "run_parity"]

log = logging.getLogger(__name__)


class PairingError(RuntimeError):
    """Runs of one unit that would not start from the same weights and batches."""


class _Evaluations(keras.callbacks.Callback):
    """Keeps each epoch's validation loss, and its accuracy when the model logs one."""

    def __init__(self) -> None:
        super().__init__()
        self.accuracy: list[float] = []
        self.loss: list[float] = []

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        logs = logs or {}
        if "val_loss" in logs:
            self.loss.append(float(logs["val_loss"]))
            if "val_accuracy" in logs:
                self.accuracy.append(float(logs["val_accuracy"]))


@dataclasses.dataclass(frozen=True)
class PairedStart:
    """What a run starts from.

    Attributes:
        weights: The networks' initial weights (float32 variables, in
            `network.weights` order), before any step.
        batches: One SHA-256 digest per training batch of the whole run, in
            order (every input, target and weight of the batch).
    """

    weights: list[np.ndarray]
    batches: list[str]

    def digest(self) -> str:
        """One short digest of the weights and the batch order."""
        h = hashlib.sha256()
        for w in self.weights:
            h.update(w.tobytes())
        h.update("".join(self.batches).encode())
        return h.hexdigest()[:16]


def paired_start(task: tasks.Task) -> PairedStart:
    """The initial weights and batch order of the run of `task` (e.g. from `parity_task`).

    Nothing is trained. The network and the training pipeline are built as
    `tfmp.run.runner.Runner` builds them: the global seeds set from the
    config's `seed` (`keras.utils.set_random_seed`), then the model built
    under the precision's policy, with the run's float32 layers.

    Returns:
        A `PairedStart`; compare two with `np.array_equal` / `digest()`.
    """
    task = task.with_config(run_name="paired_start")
    with output.lines_to(None):  # the run's own notes, not this check's
        settled = settled_lib.resolve(task)
    steps = task.steps_per_epoch(settled.data)
    keras.utils.set_random_seed(task.config.seed)  # as the runner does, right before building
    with precision_lib.precision_scope(settled.precision):
        built = task.build(settled.precision, settled.loss_scale, False, steps, settled.data)
    weights = [np.array(w.numpy()) for network in built.trainer.networks.values() for w in network.weights]
    batches = []
    for batch in task.stream(settled.data, 0).take(task.config.epochs * steps):
        h = hashlib.sha256()
        for part in tf.nest.flatten(batch):
            h.update(np.asarray(part).tobytes())
        batches.append(h.hexdigest())
    return PairedStart(weights, batches)


def _check_pairing(config: ParityConfig, seed: int, fold: int) -> str:
    """The unit's common start digest; `PairingError` if two arms start differently."""
    digests = {arm.name: paired_start(parity_task(config, seed, fold, arm)).digest() for arm in config.arms()}
    if len(set(digests.values())) != 1:
        raise PairingError(
            f"Runs of seed {seed} fold {fold} would not start from the same weights and batch order, so their "
            f"results could not be compared pairwise. Start digests: {digests}"
        )
    return digests[REFERENCE]


def _unit_name(seed: int, fold: int, folds: int) -> str:
    return f"seed {seed}" + (f" fold {fold}" if folds > 1 else "")


def run_parity(
    config: ParityConfig,
    print_fn: Callable[[str], None] | None = print,
    on_record: Callable[[list[ParityRecord]], None] | None = None,
) -> list[ParityRecord]:
    """Trains every unit in every arm; returns the records in run order.

    Each unit's arms run one after the other (float32 first), so a change of
    machine load during the sweep does not favour one arm. The runs'
    TensorBoard logs go to `<classifier.logdir>/<run_name>/`.

    Args:
        config: What to run.
        print_fn: Where the progress lines go (one per unit and per run); None: nowhere.
        on_record: Called with the records so far after each run (e.g. to
            save them, so that a sweep stopped halfway keeps its results).

    Raises:
        tfmp.run.training.ConfigError: for an impossible setting, before training.
        PairingError: if one unit's runs would not start alike.
    """
    with output.lines_to(print_fn):
        config.validate()
        parent = config.run_name or f"parity_{datetime.datetime.now().strftime('%Y%m%d-%H%M%S')}"
        records = []
        for seed, fold in config.units():
            unit = _unit_name(seed, fold, config.folds)
            if config.check_pairing:
                digest = _check_pairing(config, seed, fold)
                log.info(f"{unit}: every arm starts from the same weights and batch order ({digest})")
            for arm in config.arms():
                start = time.monotonic()
                name = f"{arm.name}_seed{seed}" + (f"_fold{fold}" if config.folds > 1 else "")
                task = parity_task(config, seed, fold, arm)
                evaluations = _Evaluations()
                result = runner.Runner(
                    task.with_config(run_name=os.path.join(parent, name)), None, callbacks=[evaluations]
                ).run()
                if len(evaluations.loss) < config.average_last:
                    raise training.ConfigError(
                        f"Parity compares validation results, but {task.name!r} logged {len(evaluations.loss)} "
                        f"validation losses in {task.config.epochs} epochs: give the task validation data."
                    )
                scale = result.logs.get("loss_scale")
                last = config.average_last
                record = ParityRecord(
                    arm=arm.name,
                    precision=arm.precision,
                    seed=seed,
                    fold=fold,
                    val_accuracy=statistics.fmean(evaluations.accuracy[-last:]) if evaluations.accuracy else None,
                    val_loss=statistics.fmean(evaluations.loss[-last:]),
                    skipped_steps=result.skipped_steps,
                    final_loss_scale=None if scale is None else float(scale),
                    accuracy_by_epoch=tuple(evaluations.accuracy),
                    loss_by_epoch=tuple(evaluations.loss),
                    seconds=round(time.monotonic() - start, 1),
                )
                records.append(record)
                if on_record is not None:
                    on_record(list(records))
                accuracy = "" if record.val_accuracy is None else f"val_accuracy {record.val_accuracy:.4f} "
                log.info(
                    f"{unit} {arm.name}: {accuracy}val_loss {record.val_loss:.4f} "
                    f"skipped_steps {record.skipped_steps} loss_scale {scale_text(record.final_loss_scale)} "
                    f"({record.seconds:.0f} s, load {os.getloadavg()[0]:.1f})"
                )
        return records

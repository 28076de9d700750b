"""The design of a parity experiment: its arms, units and levers (`ParityConfig`), and k-fold splits."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from tfmp.run import benchmark, data, tasks, training

__all__ = ["CONTROL", "DEFAULT_CLASSIFIER", "REFERENCE", "Arm", "ParityConfig", "fold_split"]

REFERENCE = "float32"
CONTROL = "float32_keras_bn"

# MobileNetV2 (alpha 0.35) on the embedded digits: 45 steps of 32 per epoch (1,437 or 1,438
# training images), 12 epochs; float16 runs with the default (dynamic) loss scaling.
# docs/NUMERICS.md measures the design and the accuracy it reaches.
DEFAULT_CLASSIFIER = training.ClassifierConfig(
    dataset="digits",
    alpha=0.35,
    batch_size=32,
    epochs=12,
    learning_rate=2e-3,
    lr_schedule="cosine",
    log_every=1000,
    warmup_steps=0,
    logdir="logs",
)


@dataclasses.dataclass(frozen=True)
class Arm:
    """One arm of the comparison: a precision, or a variant of one.

    Attributes:
        name: The arm's name in the records and tables.
        precision: Canonical precision name.
        keras_batch_norm: Build the network with Keras's unfused
            BatchNormalization instead of tfmp's fused layer.
        initial_scale: mixed_float16's dynamic loss scale starts here; None:
            the library's default (2**15).
    """

    name: str
    precision: str
    keras_batch_norm: bool = False
    initial_scale: float | None = None


@dataclasses.dataclass(frozen=True)
class ParityConfig:
    """What a parity benchmark runs.

    Attributes:
        classifier: The run of every unit and arm (without `task`); its
            `precision`, `seed` and `run_name` are replaced per run.
        seeds: Seeds (of weights, shuffling and the data split), each run
            in every arm.
        precisions: Precisions to compare; must include `float32`, the
            reference. Aliases (`fp16`, ...) are accepted; `auto` is not.
        folds: 1: the classifier's own training/validation split of each
            seed. k >= 2: the union of its training and validation images,
            shuffled by the seed, is cut into k folds and each seed runs k
            times, validating on each fold in turn (`fold_split`).
        lr_warmup_steps: Steps of linear learning-rate warm-up from 0 to
            `classifier.learning_rate`, before the cosine decay (which then
            spans the remaining steps); needs `lr_schedule="cosine"`.
        average_last: A run's accuracy and loss are the means of the
            validation evaluations after its last `average_last` epochs.
        control: Also run float32 with Keras's BatchNormalization (arm
            `CONTROL`): the same function in a different order of float32
            operations, whose paired gap to float32 is the noise floor.
        fp16_initial_scales: Extra mixed_float16 arms (`mixed_float16_scale<s>`)
            whose dynamic loss scale starts at each of these values.
        run_name: Parent directory of the runs under `classifier.logdir`;
            default `parity_<timestamp>`. Each run is `<arm>_seed<seed>`
            (plus `_fold<f>` with folds) in it.
        check_pairing: Before training a unit, check that its runs start
            from bit-identical weights and batch order (`paired_start`), at
            the cost of one model build per run.
        task: A model of your own to compare instead of the classifier
            (its config's `precision`, `seed` and `run_name` are replaced per
            run). The levers above that belong to the classifier's design
            (`folds`, `lr_warmup_steps`, `control`, `fp16_initial_scales`)
            are then off: `for_task` makes such a config.
    """

    classifier: training.ClassifierConfig = DEFAULT_CLASSIFIER
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
    precisions: tuple[str, ...] = ("float32", "mixed_float16", "mixed_bfloat16")
    folds: int = 5
    lr_warmup_steps: int = 45
    average_last: int = 1
    control: bool = False
    fp16_initial_scales: tuple[float, ...] = ()
    run_name: str = ""
    check_pairing: bool = True
    task: tasks.Task | None = None

    @classmethod
    def for_task(cls, task: tasks.Task, **changes: Any) -> ParityConfig:
        """Paired runs of `task` over `seeds` and `precisions`, one split per seed (no folds, warm-up or control)."""
        return cls(task=task, **{"folds": 1, "lr_warmup_steps": 0, **changes})

    @property
    def run(self) -> training.TrainConfig:
        """The config every run starts from: the task's, or `classifier`."""
        return self.classifier if self.task is None else self.task.config

    def validate(self) -> None:
        """Raises `tfmp.run.training.ConfigError` naming the first impossible setting."""
        if not self.seeds:
            raise training.ConfigError(f"No seed given. Received: seeds={self.seeds!r}")
        for seed in self.seeds:
            if not _is_int(seed) or seed < 0:
                raise training.ConfigError(f"seeds must be integers >= 0. Received: seed={seed!r}")
        if len(set(self.seeds)) != len(self.seeds):
            raise training.ConfigError(f"A seed is given twice. Received: seeds={self.seeds!r}")
        precisions = self.canonical_precisions()
        if REFERENCE not in precisions:
            raise training.ConfigError(
                f"precisions must include float32, the reference the others are compared with. "
                f"Received: precisions={self.precisions!r}"
            )
        if len(precisions) < 2 and not self.control and not self.fp16_initial_scales:
            raise training.ConfigError(
                f"Give float32 and at least one precision to compare with it. Received: precisions={self.precisions!r}"
            )
        if not _is_int(self.folds) or self.folds < 1:
            raise training.ConfigError(f"folds must be an integer >= 1. Received: folds={self.folds!r}")
        if self.task is not None:
            self._check_task_levers()
        epochs = self.run.epochs
        if not _is_int(self.average_last) or not 1 <= self.average_last <= epochs:
            raise training.ConfigError(
                f"average_last must be an integer from 1 to the {epochs} epochs. Received: "
                f"average_last={self.average_last!r}"
            )
        if not _is_int(self.lr_warmup_steps) or self.lr_warmup_steps < 0:
            raise training.ConfigError(
                f"lr_warmup_steps must be an integer >= 0. Received: lr_warmup_steps={self.lr_warmup_steps!r}"
            )
        if self.lr_warmup_steps and self.run.lr_schedule != "cosine":
            raise training.ConfigError(
                "lr_warmup_steps needs the cosine schedule; set lr_schedule='cosine' or lr_warmup_steps=0. "
                f"Received: lr_schedule={self.run.lr_schedule!r}, lr_warmup_steps={self.lr_warmup_steps}"
            )
        for scale in self.fp16_initial_scales:
            if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not 1 <= scale < math.inf:
                raise training.ConfigError(
                    f"fp16_initial_scales must be finite numbers >= 1. Received: initial scale {scale!r}"
                )
        if len(set(self.fp16_initial_scales)) != len(self.fp16_initial_scales):
            raise training.ConfigError(
                f"An initial scale is given twice. Received: fp16_initial_scales={self.fp16_initial_scales!r}"
            )
        self.run.validate()

    def _check_task_levers(self) -> None:
        if not isinstance(self.task, tasks.Task):
            raise training.ConfigError(f"task must be a tfmp.run.tasks.Task. Received: task={self.task!r}")
        levers = {
            "folds": (self.folds, 1),
            "lr_warmup_steps": (self.lr_warmup_steps, 0),
            "control": (self.control, False),
            "fp16_initial_scales": (self.fp16_initial_scales, ()),
        }
        for name, (value, off) in levers.items():
            if value != off:
                raise training.ConfigError(
                    f"{name} belongs to the MobileNetV2 classifier's design; a task of your own runs its seeds "
                    f"and precisions on one split per seed ({name}={off!r}; ParityConfig.for_task sets it). "
                    f"Received: {name}={value!r}"
                )

    def canonical_precisions(self) -> tuple[str, ...]:
        """The precisions' canonical names, float32 first; `ConfigError` for an unknown one or a repeat."""
        try:
            names = benchmark.canonical_precisions(self.precisions)
        except ValueError as e:
            raise training.ConfigError(str(e)) from None
        if len(names) != len(self.precisions):
            raise training.ConfigError(f"A precision is given twice. Received: precisions={self.precisions!r}")
        return tuple(sorted(names, key=lambda name: name != REFERENCE))

    def arms(self) -> tuple[Arm, ...]:
        """Every arm in run order: float32 first, then the control, the precisions, the float16 scale arms."""
        precisions = self.canonical_precisions()
        arms = [Arm(REFERENCE, REFERENCE)]
        if self.control:
            arms.append(Arm(CONTROL, REFERENCE, keras_batch_norm=True))
        arms += [Arm(p, p) for p in precisions[1:]]
        for scale in self.fp16_initial_scales:
            arms.append(Arm(f"mixed_float16_scale{scale:g}", "mixed_float16", initial_scale=float(scale)))
        return tuple(arms)

    def units(self) -> tuple[tuple[int, int], ...]:
        """`(seed, fold)` of every unit, in run order (fold 0 only without folds)."""
        return tuple((int(seed), fold) for seed in self.seeds for fold in range(self.folds))


def _is_int(value: Any) -> bool:
    """Whether `value` is an integer (a numpy one too), not a bool."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def fold_split(split: data.Split, seed: int, fold: int, folds: int) -> data.Split:
    """Fold `fold` of `folds` of `split`'s images as validation, the rest as training.

    The union of the training and validation images is shuffled by `seed`
    and cut into `folds` parts of sizes differing by at most one
    (`np.array_split`); over the folds of a seed every image is validated
    exactly once. `folds=1` returns `split` itself.
    """
    if folds == 1:
        return split
    if not 0 <= fold < folds:
        raise ValueError(f"fold must be in [0, {folds}). Received: fold={fold!r}")
    x = np.concatenate([split.x_train, split.x_val])
    y = np.concatenate([split.y_train, split.y_val])
    parts = np.array_split(np.random.default_rng(seed).permutation(len(y)), folds)
    train = np.sort(np.concatenate([p for i, p in enumerate(parts) if i != fold]))
    val = np.sort(parts[fold])
    return data.Split(x[train], y[train], x[val], y[val])

"""Does mixed precision keep float32's accuracy? Paired runs over seeds and folds.

`run_parity(ParityConfig(...))` trains a model once per *unit* (a seed and,
with `folds > 1`, a fold of the data) and *arm* (a precision, or a variant
of one) and returns one `ParityRecord` per run. The model is the MobileNetV2
classifier on the embedded digits by default, or any `tfmp.run.tasks.Task`
(`ParityConfig.for_task(task)`: seeds and precisions, one split per seed). The
design is *paired*: in a unit every arm starts from the same initial weights
(the variables are float32 under every policy, and the seed fixes their
initializers), trains on the same images and sees the same batches in the
same order (the pipeline's shuffle is seeded). The model has no dropout, so
nothing else is random. The difference between an arm's result and
float32's in the same unit is therefore made by the arithmetic alone, and
`paired_gaps` summarises those differences over the units: their mean,
standard error and 95% interval, for the accuracy (when the model logs
`accuracy`) and for the validation loss (for a classifier, the mean negative
log-likelihood, a continuous metric). A task of your own must be paired the
same way: its pipeline's order fixed by the config's seed, and no randomness
but the seeded one.

Levers of the classifier's design (`ParityConfig`):

* `folds`: k-fold rotation over the union of the dataset's training and
  validation images, so that each image is evaluated once per seed.
* `lr_warmup_steps`: a linear learning-rate warm-up before the cosine decay.
* `average_last`: a run's accuracy and loss are the mean of the validation
  evaluations after its last epochs (every epoch's are in the record).
* `control`: also run float32 with Keras's unfused BatchNormalization, a
  rounding-only change of float32's arithmetic; its paired gap to float32 is
  the design's noise floor.
* `fp16_initial_scales`: extra mixed_float16 arms whose dynamic loss scale
  starts elsewhere than the default 2**15.

`parity_task` builds the task of one run and `paired_start` returns what it
starts from (initial weights, batch order) without training, so the pairing
can be checked: `run_parity` checks it for every unit before training and
refuses to compare unpaired runs.

```python
from tfmp.run import parity
records = parity.run_parity(parity.ParityConfig(seeds=(0, 1), control=True))
print(parity.parity_table(records))
parity.paired_gaps(records)["mixed_float16"].accuracy.mean   # points, negative: below float32
```

The measured figures and what they mean are in [Numerics](../../NUMERICS.md).
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import math
import os
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from tfmp import loss_scale as loss_scale_lib
from tfmp import precision as precision_lib
from tfmp.run import benchmark, data, runner, tasks, training
from tfmp.run import epochs as epochs_lib
from tfmp.run import setting as setting_lib
from tfmp.run.reporting import Gap

__all__ = [
    "CONTROL",
    "DEFAULT_CLASSIFIER",
    "Arm",
    "PairedStart",
    "PairingError",
    "ParityConfig",
    "ParityRecord",
    "PairedGap",
    "fold_split",
    "paired_gaps",
    "paired_start",
    "parity_table",
    "parity_task",
    "run_parity",
]

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


class PairingError(RuntimeError):
    """Runs of one unit that would not start from the same weights and batches."""


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


class _ParityTask(tasks.ClassifierTask):
    """The classifier task of one parity run: its fold, warm-up, BatchNorm and initial loss scale."""

    def __init__(self, config: training.ClassifierConfig, arm: Arm, fold: int, folds: int, lr_warmup_steps: int):
        network = None
        if arm.keras_batch_norm:

            def network(shape: tuple[int, int, int], classes: int) -> keras.Model:
                return tasks.build_mobilenet_v2_classifier(
                    shape,
                    num_classes=classes,
                    alpha=config.alpha,
                    from_logits=config.from_logits,
                    batch_norm_momentum=config.batch_norm_momentum,
                    fused_batch_norm=False,
                )

        advice = tasks.cpu_bfloat16_float32_layers(config.image_shape)
        super().__init__(config, network=network, cpu_bfloat16_float32_layers=advice)
        self.arm, self.fold, self.folds, self.lr_warmup_steps = arm, fold, folds, lr_warmup_steps

    def load_data(self) -> data.Split:
        return fold_split(super().load_data(), self.config.seed, self.fold, self.folds)

    def optimizers(self, steps_per_epoch: int) -> tuple[keras.optimizers.Optimizer, ...]:
        c = self.config
        if self.lr_warmup_steps:
            total = c.epochs * steps_per_epoch
            warmup = min(self.lr_warmup_steps, total - 1)
            schedule = keras.optimizers.schedules.CosineDecay(
                0.0, decay_steps=total - warmup, warmup_target=c.learning_rate, warmup_steps=warmup
            )
            optimizer = keras.optimizers.Adam(schedule)
        else:
            (optimizer,) = super().optimizers(steps_per_epoch)
        if self.arm.initial_scale is not None:
            # Passed through as it is by the trainer's compile (loss_scale="dynamic").
            optimizer = loss_scale_lib.LossScaleOptimizer(optimizer, dynamic=True, initial_scale=self.arm.initial_scale)
        return (optimizer,)


def parity_task(config: ParityConfig, seed: int, fold: int, arm: Arm) -> tasks.Task:
    """The task of one run: `config.task` (or the classifier) at `seed` and `arm.precision`, on fold `fold`."""
    if config.task is not None:
        return config.task.replace(seed=int(seed), precision=arm.precision)
    run = dataclasses.replace(config.classifier, seed=int(seed), precision=arm.precision)
    return _ParityTask(run, arm, fold, config.folds, config.lr_warmup_steps)


@dataclasses.dataclass(frozen=True)
class ParityRecord:
    """One run's result.

    Attributes:
        arm: The arm's name (`Arm.name`).
        precision: Canonical precision name.
        seed: The run's seed.
        fold: The validation fold (0 without folds).
        val_accuracy: Validation accuracy, averaged over the evaluations
            after the last `average_last` epochs; None for a model that logs
            no `accuracy`.
        val_loss: Validation loss (mean negative log-likelihood), averaged
            likewise.
        skipped_steps: Steps whose non-finite gradients were skipped.
        final_loss_scale: The loss scale at the end (`mixed_float16` with a
            loss scale); None otherwise.
        accuracy_by_epoch: The validation accuracy after every epoch.
        loss_by_epoch: The validation loss after every epoch.
        seconds: The run's wall time.
    """

    arm: str
    precision: str
    seed: int
    fold: int
    val_accuracy: float | None
    val_loss: float
    skipped_steps: int
    final_loss_scale: float | None
    accuracy_by_epoch: tuple[float, ...] = ()
    loss_by_epoch: tuple[float, ...] = ()
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


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
    task = task.replace(run_name="paired_start")
    setting = setting_lib.resolve(task, lambda line: None)
    steps = epochs_lib.steps_per_epoch(task, setting.data)
    keras.utils.set_random_seed(task.config.seed)  # as the runner does, right before building
    with precision_lib.precision_scope(setting.precision):
        built = task.build(setting.precision, setting.loss_scale, False, steps, setting.data)
    weights = [np.array(w.numpy()) for network in built.trainer.networks.values() for w in network.weights]
    batches = []
    for batch in epochs_lib.stream(task, setting.data).take(task.config.epochs * steps):
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
    print_fn: Callable[[str], None] = print,
    on_record: Callable[[list[ParityRecord]], None] | None = None,
) -> list[ParityRecord]:
    """Trains every unit in every arm; returns the records in run order.

    Each unit's arms run one after the other (float32 first), so a change of
    machine load during the sweep does not favour one arm. The runs'
    TensorBoard logs go to `<classifier.logdir>/<run_name>/`.

    Args:
        config: What to run.
        print_fn: Where the progress lines go (one per unit and per run).
        on_record: Called with the records so far after each run (e.g. to
            save them, so that a sweep stopped halfway keeps its results).

    Raises:
        tfmp.run.training.ConfigError: for an impossible setting, before training.
        PairingError: if one unit's runs would not start alike.
    """
    config.validate()
    parent = config.run_name or f"parity_{datetime.datetime.now().strftime('%Y%m%d-%H%M%S')}"
    records = []
    for seed, fold in config.units():
        unit = _unit_name(seed, fold, config.folds)
        if config.check_pairing:
            digest = _check_pairing(config, seed, fold)
            print_fn(f"{unit}: every arm starts from the same weights and batch order ({digest})")
        for arm in config.arms():
            start = time.monotonic()
            name = f"{arm.name}_seed{seed}" + (f"_fold{fold}" if config.folds > 1 else "")
            task = parity_task(config, seed, fold, arm)
            evaluations = _Evaluations()
            result = runner.Runner(
                task.replace(run_name=os.path.join(parent, name)), lambda line: None, callbacks=[evaluations]
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
            print_fn(
                f"{unit} {arm.name}: {accuracy}val_loss {record.val_loss:.4f} "
                f"skipped_steps {record.skipped_steps} loss_scale {_scale(record.final_loss_scale)} "
                f"({record.seconds:.0f} s, load {os.getloadavg()[0]:.1f})"
            )
    return records


@dataclasses.dataclass(frozen=True)
class PairedGap:
    """An arm against float32 on the same units.

    Attributes:
        arm: The arm compared with float32.
        units: `(seed, fold)` of the units run in both.
        accuracy: Accuracy differences in percentage points (negative: below
            float32); None for a model that logs no accuracy.
        loss: Validation-loss differences (for a classifier, NLL in nats;
            positive: worse than float32).
    """

    arm: str
    units: tuple[tuple[int, int], ...]
    accuracy: Gap | None
    loss: Gap


def _by_arm(records: Sequence[ParityRecord]) -> dict[str, dict[tuple[int, int], ParityRecord]]:
    table: dict[str, dict[tuple[int, int], ParityRecord]] = {}
    for record in records:
        table.setdefault(record.arm, {})[(record.seed, record.fold)] = record
    return table


def paired_gaps(records: Sequence[ParityRecord]) -> dict[str, PairedGap]:
    """Per arm other than float32, its paired differences to float32.

    Only units run in both the arm and float32 count.
    """
    table = _by_arm(records)
    reference = table.get(REFERENCE, {})
    gaps = {}
    for arm, runs in table.items():
        if arm == REFERENCE:
            continue
        units = tuple(unit for unit in runs if unit in reference)
        if units:
            accuracy = None
            if all(r.val_accuracy is not None for r in (*runs.values(), *reference.values())):
                accuracy = Gap(tuple(100.0 * (runs[u].val_accuracy - reference[u].val_accuracy) for u in units))
            loss = Gap(tuple(runs[u].val_loss - reference[u].val_loss for u in units))
            gaps[arm] = PairedGap(arm, units, accuracy, loss)
    return gaps


def _scale(scale: float | None) -> str:
    return "-" if scale is None else f"{scale:g}"


def _signed(value: float, digits: int) -> str:
    return "n/a" if math.isnan(value) else f"{value:+.{digits}f}"


def _summary(gap: Gap, digits: int) -> str:
    low, high = gap.interval
    return (
        f"{_signed(gap.mean, digits)} | {'n/a' if math.isnan(gap.stderr) else f'{gap.stderr:.{digits}f}'} | "
        f"{_signed(low, digits)}..{_signed(high, digits)}"
    )


def parity_table(records: Sequence[ParityRecord]) -> str:
    """Markdown: per-unit accuracies (or losses, for a model without accuracy), then the paired gaps.

    float16 cells add the skipped steps and the final loss scale.
    """
    table = _by_arm(records)
    arms = sorted(table, key=lambda name: name != REFERENCE)
    units = sorted({(record.seed, record.fold) for record in records})
    by_accuracy = all(r.val_accuracy is not None for r in records)

    def value(record: ParityRecord) -> float:
        return record.val_accuracy if by_accuracy else record.val_loss

    lines = ["| seed | fold | " + " | ".join(arms) + " |", "|---" * (len(arms) + 2) + "|"]
    for seed, fold in units:
        cells = []
        for arm in arms:
            record = table[arm].get((seed, fold))
            if record is None:
                cells.append("-")
                continue
            cell = f"{value(record):.4f}"
            if record.final_loss_scale is not None:
                cell += f" ({record.skipped_steps} skipped, scale {_scale(record.final_loss_scale)})"
            cells.append(cell)
        lines.append(f"| {seed} | {fold} | " + " | ".join(cells) + " |")
    means = [statistics.fmean(value(r) for r in table[a].values()) for a in arms]
    label = "mean" if by_accuracy else "mean loss"
    lines.append(f"| {label} | | " + " | ".join(f"{m:.4f}" for m in means) + " |")
    lines += [
        "",
        "| arm | units | accuracy gap to float32 (points) | standard error | 95% interval | "
        "loss gap | standard error | 95% interval |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for arm, gap in paired_gaps(records).items():
        accuracy = "n/a | n/a | n/a" if gap.accuracy is None else _summary(gap.accuracy, 2)
        lines.append(f"| {arm} | {len(gap.units)} | {accuracy} | {_summary(gap.loss, 4)} |")
    return "\n".join(lines)

"""Does mixed precision keep float32's accuracy? Paired runs over seeds.

`run_parity(ParityConfig(...))` trains the MobileNetV2 classifier
(`tfmp.run.training.train_classifier`) once per seed and precision and returns one
`ParityRecord` per run. The design is *paired*: for a given seed every
precision starts from the same initial weights (the variables are float32
under every policy, and the seed fixes their initializers) and sees the same
batches in the same order (the pipeline's shuffle is seeded). The model has no
dropout, so nothing else is random. The difference between a precision's
accuracy and float32's on the same seed is therefore made by the arithmetic
alone, and `paired_gaps` summarises those differences over the seeds: their
mean, spread and standard error.

`paired_start` returns what a run starts from (initial weights, batch order)
without training, so the pairing can be checked: `run_parity` checks it for
every seed before training and refuses to compare unpaired runs.

```python
from tfmp.run import parity
records = parity.run_parity(parity.ParityConfig(seeds=(0, 1, 2)))
print(parity.parity_table(records))
parity.paired_gaps(records)["mixed_float16"].mean    # accuracy points, negative: below float32
```

The measured figures and what they mean are in docs/NUMERICS.md.
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

from tfmp import precision as precision_lib
from tfmp.run import benchmark, tasks, training
from tfmp.run import setting as setting_lib

__all__ = [
    "DEFAULT_CLASSIFIER",
    "PairedStart",
    "PairingError",
    "ParityConfig",
    "ParityRecord",
    "PairedGap",
    "paired_gaps",
    "paired_start",
    "parity_table",
    "run_parity",
]

REFERENCE = "float32"

# MobileNetV2 (alpha 0.35) on the embedded digits: 45 steps of 32 per epoch;
# 8 epochs reach about 90% validation accuracy in float32 (chance: 10%).
# float16 runs with the default (dynamic) loss scaling.
DEFAULT_CLASSIFIER = training.ClassifierConfig(
    dataset="digits",
    alpha=0.35,
    batch_size=32,
    epochs=8,
    learning_rate=2e-3,
    lr_schedule="cosine",
    log_every=1000,
    warmup_steps=0,
    logdir="logs",
)


class PairingError(RuntimeError):
    """Runs of one seed that would not start from the same weights and batches."""


@dataclasses.dataclass(frozen=True)
class ParityConfig:
    """What a parity benchmark runs.

    Attributes:
        classifier: The run of every seed and precision; its `precision`,
            `seed` and `run_name` are replaced per run.
        seeds: Seeds (of weights, shuffling and the data split), each run
            at every precision.
        precisions: Precisions to compare; must include `float32`, the
            reference. Aliases (`fp16`, ...) are accepted; `auto` is not.
        run_name: Parent directory of the runs under `classifier.logdir`;
            default `parity_<timestamp>`. Each run is `<precision>_seed<seed>`
            in it.
        check_pairing: Before training a seed, check that its runs start
            from bit-identical weights and batch order (`paired_start`), at
            the cost of one model build per run.
    """

    classifier: training.ClassifierConfig = DEFAULT_CLASSIFIER
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
    precisions: tuple[str, ...] = ("float32", "mixed_float16", "mixed_bfloat16")
    run_name: str = ""
    check_pairing: bool = True

    def validate(self) -> None:
        """Raises `tfmp.run.training.ConfigError` naming the first impossible setting."""
        if not self.seeds:
            raise training.ConfigError(f"No seed given. Received: seeds={self.seeds!r}")
        for seed in self.seeds:
            if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
                raise training.ConfigError(f"seeds must be integers >= 0. Received: seed={seed!r}")
        if len(set(self.seeds)) != len(self.seeds):
            raise training.ConfigError(f"A seed is given twice. Received: seeds={self.seeds!r}")
        precisions = self.canonical_precisions()
        if REFERENCE not in precisions:
            raise training.ConfigError(
                f"precisions must include float32, the reference the others are compared with. "
                f"Received: precisions={self.precisions!r}"
            )
        if len(precisions) < 2:
            raise training.ConfigError(
                f"Give float32 and at least one precision to compare with it. Received: precisions={self.precisions!r}"
            )
        self.classifier.validate()

    def canonical_precisions(self) -> tuple[str, ...]:
        """The precisions' canonical names, float32 first; `ConfigError` for an unknown one or a repeat."""
        try:
            names = benchmark.canonical_precisions(self.precisions)
        except ValueError as e:
            raise training.ConfigError(str(e)) from None
        if len(names) != len(self.precisions):
            raise training.ConfigError(f"A precision is given twice. Received: precisions={self.precisions!r}")
        return tuple(sorted(names, key=lambda name: name != REFERENCE))


@dataclasses.dataclass(frozen=True)
class ParityRecord:
    """One run's result.

    Attributes:
        precision: Canonical precision name.
        seed: The run's seed.
        val_accuracy: Validation accuracy after the last epoch.
        val_loss: Validation loss after the last epoch.
        skipped_steps: Steps whose non-finite gradients were skipped.
        final_loss_scale: The loss scale at the end (`mixed_float16` with a
            loss scale); None otherwise.
    """

    precision: str
    seed: int
    val_accuracy: float
    val_loss: float
    skipped_steps: int
    final_loss_scale: float | None

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class PairedStart:
    """What a run starts from.

    Attributes:
        weights: The network's initial weights (float32 variables, in
            `network.weights` order), before any step.
        batches: One SHA-256 digest per training batch of the whole run, in
            order (images and labels).
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


def paired_start(config: training.ClassifierConfig, precision: str) -> PairedStart:
    """The initial weights and batch order of `train_classifier(config)` at `precision`.

    Nothing is trained. The network and the training pipeline are built by
    the `tfmp.run.tasks.ClassifierTask` that `tfmp.run.training.train_classifier`
    runs, as it builds them: the global seeds set from
    `config.seed` (`keras.utils.set_random_seed`), then the model built under
    the precision's policy, with the run's float32 layers.

    Args:
        config: The run (its `precision` is replaced by `precision`).
        precision: A precision name or alias.

    Returns:
        A `PairedStart`; compare two with `np.array_equal` / `digest()`.
    """
    task = tasks.ClassifierTask(dataclasses.replace(config, precision=precision, run_name="paired_start"))
    setting = setting_lib.resolve(task, lambda line: None)
    steps = task.steps_per_epoch(len(setting.split.x_train))
    keras.utils.set_random_seed(config.seed)  # as train_classifier does, right before building
    with precision_lib.precision_scope(setting.precision):
        built = task.build(setting.precision, setting.loss_scale, False, steps, setting.split)
    (network,) = built.trainer.networks.values()
    weights = [np.array(w.numpy()) for w in network.weights]
    batches = []
    for x, y in task.stream(setting.split).take(config.epochs * steps):
        h = hashlib.sha256(np.asarray(x).tobytes())
        h.update(np.asarray(y).tobytes())
        batches.append(h.hexdigest())
    return PairedStart(weights, batches)


def _check_pairing(config: training.ClassifierConfig, precisions: Sequence[str]) -> str:
    """The seed's common start digest; `PairingError` if two precisions start differently."""
    digests = {precision: paired_start(config, precision).digest() for precision in precisions}
    if len(set(digests.values())) != 1:
        raise PairingError(
            f"Runs of seed {config.seed} would not start from the same weights and batch order, so their "
            f"accuracies could not be compared pairwise. Start digests: {digests}"
        )
    return digests[precisions[0]]


def run_parity(config: ParityConfig, print_fn: Callable[[str], None] = print) -> list[ParityRecord]:
    """Trains every seed at every precision; returns the records in run order.

    Each seed's precisions run one after the other (float32 first), so a
    change of machine load during the sweep does not favour one precision.
    The runs' TensorBoard logs go to `<classifier.logdir>/<run_name>/`.

    Raises:
        tfmp.run.training.ConfigError: for an impossible setting, before training.
        PairingError: if one seed's runs would not start alike.
    """
    config.validate()
    precisions = config.canonical_precisions()
    parent = config.run_name or f"parity_{datetime.datetime.now().strftime('%Y%m%d-%H%M%S')}"
    records = []
    for seed in config.seeds:
        run = dataclasses.replace(config.classifier, seed=int(seed))
        if config.check_pairing:
            digest = _check_pairing(run, precisions)
            print_fn(f"seed {seed}: every precision starts from the same weights and batch order ({digest})")
        for precision in precisions:
            start = time.monotonic()
            result = training.train_classifier(
                dataclasses.replace(run, precision=precision, run_name=os.path.join(parent, f"{precision}_seed{seed}")),
                print_fn=lambda line: None,
            )
            scale = result.logs.get("loss_scale")
            record = ParityRecord(
                precision=precision,
                seed=int(seed),
                val_accuracy=float(result.logs["val_accuracy"]),
                val_loss=float(result.logs["val_loss"]),
                skipped_steps=result.skipped_steps,
                final_loss_scale=None if scale is None else float(scale),
            )
            records.append(record)
            print_fn(
                f"seed {seed} {precision}: val_accuracy {record.val_accuracy:.4f} val_loss {record.val_loss:.4f} "
                f"skipped_steps {record.skipped_steps} loss_scale {_scale(record.final_loss_scale)} "
                f"({time.monotonic() - start:.0f} s, load {os.getloadavg()[0]:.1f})"
            )
    return records


@dataclasses.dataclass(frozen=True)
class PairedGap:
    """A precision's accuracy minus float32's on the same seeds, in percentage points.

    Attributes:
        precision: The precision compared with float32.
        differences: Per seed (in `seeds` order), accuracy minus float32's.
        seeds: The seeds run at both precisions.
        mean: Mean of `differences`: negative is below float32.
        std: Sample standard deviation of `differences` (nan for one seed).
        stderr: Standard error of `mean` (`std / sqrt(n)`).
        min, max: Smallest and largest difference.
    """

    precision: str
    seeds: tuple[int, ...]
    differences: tuple[float, ...]

    @property
    def mean(self) -> float:
        return statistics.fmean(self.differences)

    @property
    def std(self) -> float:
        return statistics.stdev(self.differences) if len(self.differences) > 1 else math.nan

    @property
    def stderr(self) -> float:
        return self.std / math.sqrt(len(self.differences))

    @property
    def min(self) -> float:
        return min(self.differences)

    @property
    def max(self) -> float:
        return max(self.differences)


def _by_precision(records: Sequence[ParityRecord]) -> dict[str, dict[int, ParityRecord]]:
    table: dict[str, dict[int, ParityRecord]] = {}
    for record in records:
        table.setdefault(record.precision, {})[record.seed] = record
    return table


def paired_gaps(records: Sequence[ParityRecord]) -> dict[str, PairedGap]:
    """Per precision other than float32, its paired accuracy differences to float32.

    Only seeds run at both the precision and float32 count.
    """
    table = _by_precision(records)
    reference = table.get(REFERENCE, {})
    gaps = {}
    for precision, runs in table.items():
        if precision == REFERENCE:
            continue
        seeds = tuple(seed for seed in runs if seed in reference)
        if seeds:
            differences = tuple(100.0 * (runs[s].val_accuracy - reference[s].val_accuracy) for s in seeds)
            gaps[precision] = PairedGap(precision, seeds, differences)
    return gaps


def _scale(scale: float | None) -> str:
    return "-" if scale is None else f"{scale:g}"


def _points(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value:+.2f}"


def parity_table(records: Sequence[ParityRecord]) -> str:
    """Markdown: per-seed accuracies (skipped steps and final scale for float16), then the paired gaps."""
    table = _by_precision(records)
    precisions = sorted(table, key=lambda name: name != REFERENCE)
    seeds = sorted({record.seed for record in records})
    lines = ["| seed | " + " | ".join(precisions) + " |", "|---" * (len(precisions) + 1) + "|"]
    for seed in seeds:
        cells = []
        for precision in precisions:
            record = table[precision].get(seed)
            if record is None:
                cells.append("-")
                continue
            cell = f"{record.val_accuracy:.4f}"
            if record.final_loss_scale is not None:
                cell += f" ({record.skipped_steps} skipped, scale {_scale(record.final_loss_scale)})"
            cells.append(cell)
        lines.append(f"| {seed} | " + " | ".join(cells) + " |")
    means = [statistics.fmean(r.val_accuracy for r in table[p].values()) for p in precisions]
    lines.append("| mean | " + " | ".join(f"{m:.4f}" for m in means) + " |")
    lines += [
        "",
        "| precision | seeds | mean paired gap to float32 (points) | std of the differences | standard error | "
        "min..max |",
        "|---|---|---|---|---|---|",
    ]
    for precision, gap in paired_gaps(records).items():
        lines.append(
            f"| {precision} | {len(gap.seeds)} | {_points(gap.mean)} | "
            f"{'n/a' if math.isnan(gap.std) else f'{gap.std:.2f}'} | "
            f"{'n/a' if math.isnan(gap.stderr) else f'{gap.stderr:.2f}'} | "
            f"{_points(gap.min)}..{_points(gap.max)} |"
        )
    return "\n".join(lines)

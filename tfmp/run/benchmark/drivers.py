"""Timing one benchmark row: each path (trainer, hand-written step) run step by step, rounds interleaved.

How and why ("Warm-up" and "Timing" in docs/guides/benchmark-methodology.md):
a round's clock stops once its last step's outputs reach the host, and
`time_rounds` alternates which path goes first so that machine noise hits
both equally. It times round after round until a `StopRule` says enough: a
fixed number of rounds, or once the paired ratio's 95% interval is narrow
enough or the row's time budget is spent. With an allocator to read, each
timed round also records the allocator's peak and the step memory above what
was resident before it, read outside the clock.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from tfmp.run.benchmark.workload import Workload
from tfmp.run.memory_meters import AllocatorMemory
from tfmp.run.reporting import t_quantile

__all__ = [
    "Driver",
    "StopRule",
    "fit_driver",
    "hand_written_driver",
    "interleave",
    "relative_interval",
    "steps_per_round",
    "time_rounds",
    "trainer_driver",
]


def _block(outputs: Any) -> None:
    """Waits for a step to finish by fetching one of its outputs to the host."""
    flat = tf.nest.flatten(outputs)
    if flat:
        np.asarray(flat[0])


class Driver:
    """Runs one path (trainer or hand-written) step by step, counting images.

    Args:
        call: Runs one step and returns its outputs.
        batch_sizes: Examples of the successive batches, cycled.
        images_per_example: Images per example (2 for the GAN).
        allocator: TensorFlow's allocator, read around each timed round
            (outside its clock); None reads nothing.

    Attributes:
        peak_mb: The allocator's highest peak over the timed rounds (MiB);
            None without an allocator or before a timed round.
        step_mb: The most a timed round allocated above what was allocated
            before it (MiB): activations, gradients and workspaces, without
            the weights, optimizer slots and data resident between steps.
    """

    def __init__(
        self,
        call: Callable[[], Any],
        batch_sizes: Sequence[int],
        images_per_example: int,
        allocator: AllocatorMemory | None = None,
    ):
        self.call = call
        self.batch_sizes = tuple(batch_sizes)
        self.images_per_example = images_per_example
        self.allocator = allocator
        self.position = 0
        self.images_per_sec: list[float] = []
        self.peak_mb: float | None = None
        self.step_mb: float | None = None
        self.step_seconds: float | None = None

    def run(self, steps: int) -> tuple[float, int]:
        """Runs `steps` steps; returns `(seconds, images)`."""
        images = sum(self.batch_sizes[(self.position + i) % len(self.batch_sizes)] for i in range(steps))
        self.position += steps
        start = time.perf_counter()
        outputs = None
        for _ in range(steps):
            outputs = self.call()
        _block(outputs)
        return time.perf_counter() - start, images * self.images_per_example

    def warm_up(self, steps: int) -> None:
        """Runs `steps` untimed steps, the last one alone so that `step_seconds` holds one warm step's time."""
        if steps <= 0:
            return
        if steps > 1:
            self.run(steps - 1)
        self.step_seconds = self.run(1)[0]

    def timed(self, steps: int) -> None:
        """Runs `steps` steps and records their images per second (and, with an allocator, their memory)."""
        if self.allocator is None:
            seconds, images = self.run(steps)
        else:
            before = self.allocator.reset()
            seconds, images = self.run(steps)
            peak = self.allocator.peak_mb()
            self.peak_mb = max(peak, self.peak_mb or 0.0)
            self.step_mb = max(peak - before, self.step_mb or 0.0)
        self.images_per_sec.append(images / seconds)

    @property
    def median_images_per_sec(self) -> float:
        """The median of the recorded rounds' images per second."""
        return statistics.median(self.images_per_sec)


def relative_interval(values: Sequence[float]) -> float | None:
    """The relative half-width of the 95% interval of `values`' geometric mean; None for fewer than two values.

    From Student's t over the logarithms: `expm1(t(0.95, n - 1) * sd(log v) / sqrt(n))`,
    so 0.02 means the mean is known to about +-2%.
    """
    if len(values) < 2:
        return None
    logs = [math.log(v) for v in values]
    return math.expm1(t_quantile(0.95, len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs)))


def paired_interval(drivers: Sequence[Driver]) -> float | None:
    """The relative 95% interval of the first path's throughput over the second's, paired round by round.

    With one path, that of its throughput; None before two rounds.
    """
    if len(drivers) == 1:
        return relative_interval(drivers[0].images_per_sec)
    return relative_interval([a / b for a, b in zip(drivers[0].images_per_sec, drivers[1].images_per_sec)])


@dataclasses.dataclass(frozen=True)
class StopRule:
    """When a row's timed rounds stop.

    With `repeats`, after that many rounds. Without, after at least
    `min_rounds`, once the paired ratio's 95% interval (`paired_interval`) is
    within `interval`, or when another round would take the timing past
    `seconds`.

    Attributes:
        repeats: A fixed number of rounds, or None to time to `interval`.
        interval: The relative half-width at which timing stops (0.02: +-2%).
        seconds: The timing's budget, in seconds.
        min_rounds: The fewest rounds timed to an interval (two give one a first width).
    """

    repeats: int | None = None
    interval: float = 0.02
    seconds: float = 60.0
    min_rounds: int = 3

    def done(self, rounds: int, width: float | None, elapsed: float) -> bool:
        """Whether to stop after `rounds` rounds, `elapsed` seconds in, with the interval's `width` so far."""
        if self.repeats is not None:
            return rounds >= self.repeats
        if rounds < self.min_rounds:
            return False
        return (width is not None and width <= self.interval) or elapsed * (rounds + 1) / rounds > self.seconds

    def eta(self, rounds: int, width: float | None, elapsed: float) -> float:
        """Seconds the timing should still take: the interval shrinks as one over the square root of the rounds.

        The rounds still needed for `interval`, as many as the budget allows, and the fewest rounds whatever it says.
        """
        per_round = elapsed / rounds
        if self.repeats is not None:
            return max(self.repeats - rounds, 0) * per_round
        needed = (
            self.min_rounds if width is None else max(self.min_rounds, math.ceil(rounds * (width / self.interval) ** 2))
        )
        affordable = max(self.min_rounds, math.floor(self.seconds / per_round)) if per_round > 0 else needed
        return max(min(needed, affordable) - rounds, 0) * per_round


def steps_per_round(drivers: Sequence[Driver], round_seconds: float) -> int:
    """Steps each path runs per round so that the slowest path's share lasts about `round_seconds` (at least 1).

    From each driver's warm `step_seconds`; 1 when none was measured.
    """
    measured = [d.step_seconds for d in drivers if d.step_seconds]
    if not measured:
        return 1
    return max(1, round(round_seconds / max(measured)))


def time_rounds(
    drivers: Sequence[Driver],
    steps: int,
    rule: StopRule,
    on_round: Callable[[int, float | None, float], None] | None = None,
) -> int:
    """Times the drivers round after round, rotating which goes first, until `rule` says stop.

    Args:
        drivers: The paths to time, warmed up; the first two make the paired ratio.
        steps: Steps per path per round.
        rule: When to stop.
        on_round: Called after each round with `(rounds, width, elapsed seconds)`.

    Returns:
        The number of rounds timed.
    """
    start = time.perf_counter()
    rounds = 0
    while True:
        for i in range(len(drivers)):
            drivers[(rounds + i) % len(drivers)].timed(steps)
        rounds += 1
        width, elapsed = paired_interval(drivers), time.perf_counter() - start
        if on_round is not None:
            on_round(rounds, width, elapsed)
        if rule.done(rounds, width, elapsed):
            return rounds


def interleave(drivers: Sequence[Driver], steps: int, repeats: int) -> None:
    """Times every driver `repeats` times, rotating which one goes first (`time_rounds` with a fixed count).

    Args:
        drivers: The paths to time, warmed up.
        steps: Steps per timed round.
        repeats: Rounds per driver.
    """
    time_rounds(drivers, steps, StopRule(repeats=repeats))


def trainer_driver(
    workload: Workload,
    dataset: tf.data.Dataset,
    batch_sizes: Sequence[int],
    warmup_steps: int,
    first_fit: bool,
    allocator: AllocatorMemory | None = None,
) -> Driver:
    """The trainer's step as `fit()` runs it, warmed up.

    With `first_fit`, the first warm-up step is a one-step `fit()` on
    `dataset` (which builds what fit builds and sets `train_function`).

    Args:
        workload: The row's workload; its trainer is run.
        dataset: The repeated data the trainer is fed.
        batch_sizes: Examples of the dataset's successive batches, cycled.
        warmup_steps: Untimed steps, the `fit()` one included.
        first_fit: Whether the first warm-up step is a one-step `fit()`
            (False when the trainer has already been fitted).
        allocator: Read around each timed round (`Driver`); None reads nothing.

    Returns:
        The trainer's driver, past its warm-up.
    """
    return fit_driver(workload.trainer, dataset, batch_sizes, warmup_steps, first_fit, allocator)


def fit_driver(
    model: keras.Model,
    dataset: tf.data.Dataset,
    batch_sizes: Sequence[int],
    warmup_steps: int,
    first_fit: bool = True,
    allocator: AllocatorMemory | None = None,
) -> Driver:
    """Any compiled Keras model's step as `fit()` runs it (its `train_function`), warmed up; see `trainer_driver`."""
    if first_fit:
        model.fit(dataset, epochs=1, steps_per_epoch=1, shuffle=False, verbose=0)
        warmup_steps -= 1
    model.make_train_function()  # a no-op after fit(); as fit() calls it
    # The iterator fit() would make: the strategy's distributed dataset.
    iterator = iter(model.distribute_strategy.experimental_distribute_dataset(dataset))
    per_example = getattr(model, "images_per_example", 1)
    driver = Driver(lambda: model.train_function(iterator), batch_sizes, per_example, allocator)
    if first_fit:
        driver.position = 1
    driver.warm_up(warmup_steps)
    return driver


def hand_written_driver(workload: Workload, dataset: tf.data.Dataset, warmup_steps: int) -> Driver:
    """The hand-written step, fetching its batch inside a graph as fit() does.

    Args:
        workload: The row's workload, with its hand-written step built.
        dataset: The repeated data the step is fed.
        warmup_steps: Untimed steps (the first traces the step).

    Returns:
        The hand-written step's driver, past its warm-up.
    """
    step = workload.hand_written_step
    iterator = iter(dataset)

    @tf.function
    def next_step(iterator):
        return step(next(iterator))

    batch_size = int(tf.nest.flatten(workload.batch)[0].shape[0])
    driver = Driver(lambda: next_step(iterator), (batch_size,), workload.images_per_step // batch_size)
    driver.warm_up(warmup_steps)
    return driver

"""Timing one benchmark row: each path (trainer, hand-written step) run step by step, rounds interleaved.

How and why ("Warm-up" and "Timing" in docs/guides/benchmark-methodology.md):
a round's clock stops once its last step's outputs reach the host, and
`interleave` alternates which path goes first so that machine noise hits
both equally. With an allocator to read, each timed round also records the
allocator's peak and the step memory above what was resident before it, read
outside the clock.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from tfmp.run.benchmark.workload import Workload
from tfmp.run.memory_meters import AllocatorMemory

__all__ = ["Driver", "fit_driver", "hand_written_driver", "interleave", "trainer_driver"]


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


def interleave(drivers: Sequence[Driver], steps: int, repeats: int) -> None:
    """Times every driver `repeats` times, rotating which one goes first.

    Args:
        drivers: The paths to time, warmed up.
        steps: Steps per timed round.
        repeats: Rounds per driver.
    """
    for r in range(repeats):
        for i in range(len(drivers)):
            drivers[(r + i) % len(drivers)].timed(steps)


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
    if warmup_steps > 0:
        driver.run(warmup_steps)
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
    driver.run(warmup_steps)
    return driver

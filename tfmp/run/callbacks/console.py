"""Console output: the GAN tutorial's per-step line (or a progress bar) and a closing summary."""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

import keras

from tfmp import _deprecated
from tfmp.run.callbacks.step_timer import StepTimer
from tfmp.run.config import CONSOLE_MODES  # defined with the setting it checks; still importable from here

__all__ = ["CONSOLE_MODES", "ConsoleLogger", "console_mode"]

log = logging.getLogger(__name__)


def console_mode(mode: str, stream: Any) -> str:
    """Resolves a console setting to `"progress"` or `"lines"`.

    `"auto"` is a Keras progress bar when `stream` is a terminal (its
    `isatty()` is true) and the tutorial's step lines otherwise (a pipe, a file,
    a test's captured output, or no stream), so logs stay line by line.

    Args:
        mode: One of `CONSOLE_MODES`.
        stream: Where the progress bar would go (`sys.stdout`), or None.
    """
    if mode not in CONSOLE_MODES:
        raise ValueError(f"Unknown console mode. Valid: {', '.join(CONSOLE_MODES)}. Received: {mode!r}")
    if mode != "auto":
        return mode
    isatty = getattr(stream, "isatty", None)
    return "progress" if isatty is not None and isatty() else "lines"


def _shown_fields(fields: Sequence[tuple[str, str]], logs: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The `fields` that `logs` holds, then every other training loss in it, labelled in title case.

    A training loss is a key ending in `loss`, not `val_`: a GAN's `g_loss`
    shows as `G Loss` whether or not the task names it.
    """
    named = {key for _, key in fields}
    losses = [key for key in logs if key.endswith("loss") and not key.startswith("val_") and key not in named]
    return [(label, key) for label, key in fields if key in logs] + [(k.replace("_", " ").title(), k) for k in losses]


def _format_number(value: float) -> str:
    return f"{value:.0f}" if float(value).is_integer() else f"{value:.3g}"


def _format_log(value: float) -> str:
    """An epoch log's value: four significant digits, a large one (a throughput) whole, never in e-notation."""
    return f"{value:.0f}" if abs(value) >= 1e4 else f"{value:.4g}"


class ConsoleLogger(keras.callbacks.Callback):
    """Logs the GAN tutorial's step line every `log_every` steps, and a summary.

    The line, for the GAN:
    `(epoch, step), G Loss: x, D Loss: y, loss_scale: s, step_time: t, throughput: N img/s`.
    Losses are the epoch's running means, as Keras's progress bar shows them.
    With two loss-scaled optimizers the scales print as `s_g/s_d`; without
    loss scaling, `loss_scale: none`. With `progress=True` a
    `keras.utils.Progbar` per epoch (written to `sys.stdout`, as Keras's
    own) shows the same values instead of the lines. The lines (and the
    epoch lines around a bar) go to the logger (`tfmp.run.output`). The closing summary gives the mean
    throughput and the skipped steps, per optimizer with several
    (`skipped steps: G 0, D 1`, named after the log-key prefixes).

    Args:
        timer: The run's `StepTimer` (placed before this callback).
        fields: `(label, log key)` pairs to print first, e.g. `(("Loss", "loss"),)`;
            every other training loss the logs hold follows, labelled in
            title case (`g_loss` as `G Loss`).
        loss_scale_prefixes: Log-key prefixes of the loss-scale entries.
        log_every: Print every this many steps (and the last step of each epoch).
        run_dir: The run's directory, which the summary names (with the
            `tensorboard --logdir` of its parent); `logdir=` is its deprecated name.
        progress: Show a progress bar rather than the step lines.
        unit: What the throughput counts, per second: `"img"` (images), or
            `"ex"` (examples) for a model that does not take images; None:
            the timer's (`StepTimer.unit`), so the console and TensorBoard agree.
    """

    @_deprecated.renamed_argument("ConsoleLogger(logdir)")
    def __init__(
        self,
        timer: StepTimer,
        fields: Sequence[tuple[str, str]],
        loss_scale_prefixes: Sequence[str] = ("",),
        log_every: int = 1,
        run_dir: str | None = None,
        progress: bool = False,
        unit: str | None = None,
    ):
        super().__init__()
        if log_every < 1:
            raise ValueError(f"log_every must be >= 1. Received: log_every={log_every!r}")
        self.timer = timer
        self.fields = tuple(fields)
        self.loss_scale_prefixes = tuple(loss_scale_prefixes)
        self.log_every = int(log_every)
        self.run_dir = run_dir
        self.progress = bool(progress)
        self.unit = f"{timer.unit if unit is None else unit}/s"
        self.final_logs: dict[str, Any] = {}
        self._epoch = 0
        self._steps_in_epoch: int | None = None
        self._bar: keras.utils.Progbar | None = None
        self._bar_step = 0

    def _loss_scale(self, logs: Mapping[str, Any]) -> str:
        scales = [logs[p + "loss_scale"] for p in self.loss_scale_prefixes if p + "loss_scale" in logs]
        return "/".join(_format_number(s) for s in scales) if scales else "none"

    def _skipped(self, logs: Mapping[str, Any]) -> str:
        """`G 0, D 1` with per-optimizer prefixes (`g_`, `d_`), a bare count with one; "" without any."""
        return ", ".join(
            f"{p.rstrip('_').upper()} {int(logs[p + 'skipped_steps'])}" if p else str(int(logs[p + "skipped_steps"]))
            for p in self.loss_scale_prefixes
            if p + "skipped_steps" in logs
        )

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch
        self._steps_in_epoch = self.params.get("steps") if self.params else None
        if self.progress:
            log.info(f"Epoch {epoch + 1}/{self.params.get('epochs', '?') if self.params else '?'}")
            # Every value is shown as logged: the losses already are the epoch's running means.
            self._bar = keras.utils.Progbar(self._steps_in_epoch, stateless_metrics=())

    def _bar_values(self, logs: Mapping[str, Any]) -> list[tuple[str, float]]:
        values = [(label, float(logs[key])) for label, key in _shown_fields(self.fields, logs)]
        values += [
            (f"{p.rstrip('_').upper()} loss_scale" if p else "loss_scale", float(logs[p + "loss_scale"]))
            for p in self.loss_scale_prefixes
            if p + "loss_scale" in logs
        ]
        return values + [(self.unit, self.timer.images_per_step / self.timer.last_step_time)]

    def on_train_batch_end(self, batch, logs=None):
        if self._bar is not None:
            self._bar_step = batch + 1
            self._bar.update(self._bar_step, self._bar_values(logs or {}), finalize=False)
            return
        last = self._steps_in_epoch is not None and batch + 1 == self._steps_in_epoch
        if batch % self.log_every and not last:
            return
        logs = logs or {}
        step_time = self.timer.last_step_time
        # NaN: no step of the epoch counted yet (every one so far skipped).
        values = ", ".join(
            f"{label}: {'n/a' if math.isnan(logs[key]) else f'{logs[key]:.3f}'}"
            for label, key in _shown_fields(self.fields, logs)
        )
        log.info(
            f"({self._epoch}, {batch}), {values}, loss_scale: {self._loss_scale(logs)}, "
            f"step_time: {step_time:.3f}, throughput: {self.timer.images_per_step / step_time:.3f} {self.unit}"
        )

    def on_epoch_end(self, epoch, logs=None):
        logs = dict(logs or {})
        self.final_logs = logs
        if self._bar is not None:
            self._bar.update(self._bar_step, finalize=True)
            self._bar = None
        shown = ", ".join(
            f"{k} {_format_number(v) if 'loss_scale' in k or 'skipped' in k else _format_log(v)}"
            for k, v in logs.items()
        )
        log.info(f"epoch {epoch + 1}/{self.params.get('epochs', '?')}: {shown}")

    def on_train_end(self, logs=None):
        timer = self.timer
        mean = timer.mean_images_per_sec
        if mean is None:
            throughput = f"n/a (all {len(timer.step_times)} steps were warm-up)"
        else:
            throughput = (
                f"{mean:.1f} {self.unit} over {timer.measured_steps} steps "
                f"(first {timer.warmup_steps} steps excluded as warm-up)"
            )
        skipped = self._skipped(self.final_logs)
        finals = ", ".join(
            f"{label} {self.final_logs[key]:.4f}" for label, key in _shown_fields(self.fields, self.final_logs)
        )
        lines = [
            f"summary: {len(timer.step_times)} steps; mean throughput {throughput}",
            f"  skipped steps: {skipped or 'none (no loss scaling)'}; final {finals}",
        ]
        if self.run_dir:
            parent = os.path.dirname(os.path.normpath(self.run_dir)) or "."
            lines.append(f"  logs: {self.run_dir}  (view: tensorboard --logdir {parent})")
        for line in lines:
            log.info(line)

"""Graceful stops: SIGTERM or SIGINT finish the step, then checkpoint and exit.

Cluster schedulers preempt jobs with SIGTERM (and a grace period), and people
press Ctrl-C. `PreemptionGuard` turns either signal into a request that the
training loop honours between steps (`tfmp.run.callbacks.Checkpointing` checks
it): the current step finishes, a checkpoint is written, and `Preempted` is
raised with where the checkpoint is and how to resume, in the settings'
terms (`resume=True`; the scripts say it with their flags). A second signal
while that happens is passed to the previous handler, so a second Ctrl-C
still interrupts at once.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType
from typing import Any

__all__ = ["Preempted", "PreemptionGuard", "SIGNALS"]

SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Preempted(RuntimeError):
    """Training stopped on a signal after writing a checkpoint.

    Attributes:
        signum: The signal received.
        step: Training steps done (and saved).
        checkpoint: The checkpoint written.
        exit_code: The conventional exit status, 128 + the signal number.
    """

    def __init__(self, signum: int, step: int, checkpoint: str):
        self.signum = signum
        self.step = step
        self.checkpoint = checkpoint
        self.exit_code = 128 + int(signum)
        super().__init__(
            f"training stopped by {signal.Signals(signum).name} after step {step}; checkpoint written to "
            f"{checkpoint}. To resume, start the run again with resume=True (and the same run_name)."
        )


class PreemptionGuard:
    """While active, SIGTERM and SIGINT set `requested` instead of killing.

    Use as a context manager around training; the previous handlers come
    back on exit. Outside the main thread Python cannot install signal
    handlers, and the guard then does nothing (`active` is False).
    """

    def __init__(self, signals: tuple[int, ...] = SIGNALS):
        self.signals = tuple(signals)
        self.signum: int | None = None
        self.active = False
        self._previous: dict[int, Any] = {}

    @property
    def requested(self) -> bool:
        """Whether a stop was requested."""
        return self.signum is not None

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.signum is None:
            self.signum = signum
            return
        # Second signal: let the previous handler have it (e.g. KeyboardInterrupt).
        previous = self._previous.get(signum)
        if callable(previous):
            previous(signum, frame)
        elif previous == signal.SIG_DFL:
            signal.signal(signum, signal.SIG_DFL)
            signal.raise_signal(signum)

    def __enter__(self) -> PreemptionGuard:
        if threading.current_thread() is threading.main_thread():
            for signum in self.signals:
                self._previous[signum] = signal.signal(signum, self._handle)
            self.active = True
        return self

    def __exit__(self, *exc_info: Any) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        self._previous = {}
        self.active = False

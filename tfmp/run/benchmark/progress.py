"""What a benchmark shows while it runs: each row's phase, step, elapsed time and ETA, and the whole run's estimate.

`Progress` writes to stderr: on a terminal one line rewritten in place
(`"progress"`), in a pipe or a log plain lines (`"lines"`), as the training
scripts' `--console` does. It holds no stream, so it pickles: a row measured
in a process of its own reports through the same stderr.
"""

from __future__ import annotations

import dataclasses
import math
import shutil
import sys
import time
from collections.abc import Sequence

__all__ = ["Progress", "remaining_estimate"]


def _clock(seconds: float) -> str:
    """`42 s`, `3 min 5 s`."""
    seconds = max(0, round(seconds))
    return f"{seconds // 60} min {seconds % 60} s" if seconds >= 60 else f"{seconds} s"


@dataclasses.dataclass
class Progress:
    """A benchmark's progress on stderr.

    Args:
        mode: `"progress"`: one line per row, rewritten in place (a terminal);
            `"lines"`: a plain line per phase, and one at most every `every`
            seconds while a row times (a pipe, a log).
        every: In `"lines"` mode, the fewest seconds between two timing lines of a row.
        label: The row being measured (set by `row`).
        started: When the row started (`time.time()`, which a row's own process shares).
        shown_at: When the row's last timing line was shown (`"lines"` mode spaces them out).

    Example: `Progress("lines").row("gan float32 xla=false batch=512")`.
    """

    mode: str = "lines"
    every: float = 10.0
    label: str = ""
    started: float = 0.0
    shown_at: float = -math.inf

    def __post_init__(self) -> None:
        if self.mode not in ("progress", "lines"):
            raise ValueError(f'Progress mode must be "progress" or "lines". Received: mode={self.mode!r}')

    def row(self, label: str) -> Progress:
        """This progress for one row, its clock started now."""
        return dataclasses.replace(self, label=label, started=time.time(), shown_at=-math.inf)

    @property
    def elapsed(self) -> float:
        """Seconds since the row started."""
        return time.time() - self.started

    def _show(self, text: str, final: bool = False) -> None:
        if self.mode == "progress":
            width = shutil.get_terminal_size((120, 24)).columns - 1
            shown = text if final or len(text) <= width else text[: width - 1] + "…"
            sys.stderr.write("\r\x1b[K" + shown + ("\n" if final else ""))
        else:
            sys.stderr.write(text + "\n")
        sys.stderr.flush()

    def phase(self, phase: str) -> None:
        """The row moved to `phase` (`building`, `warm-up (3 steps)`, `counting launches`)."""
        self._show(f"{self.label}: {phase}, {_clock(self.elapsed)}")

    def timing(
        self, rounds: int, steps: int, eta: float | None, width: float | None, repeats: int | None = None
    ) -> None:
        """A timed round ended: `rounds` so far of `steps` steps per path, the interval's `width` and the ETA.

        Args:
            rounds: Rounds timed so far.
            steps: Steps per path per round.
            eta: Seconds the row's timing is expected to need still; None when not known.
            width: The relative half-width of the 95% interval so far; None before two rounds. Shown from
                the third round on: two rounds give Student's t a single degree of freedom, and an interval
                many times the ratio.
            repeats: The fixed number of rounds, or None when timing to an interval.
        """
        if self.mode == "lines" and time.time() - self.shown_at < self.every:
            return
        self.shown_at = time.time()
        of = f"/{repeats}" if repeats else ""
        known = f", ratio +-{100 * width:.1f}%" if width is not None and rounds >= 3 else ""
        left = f", ETA {_clock(eta)}" if eta is not None else ""
        self._show(
            f"{self.label}: timing, round {rounds}{of} ({rounds * steps} steps per path){known}, "
            f"{_clock(self.elapsed)}{left}"
        )

    def done(self, line: str) -> None:
        """The row's closing line (which ends a line rewritten in place)."""
        self._show(line, final=True)

    def note(self, line: str) -> None:
        """A line of its own: the plan, the run's estimate."""
        self._show(line, final=True)


def remaining_estimate(seconds: Sequence[tuple[str, float]], rows_left: Sequence[str]) -> float:
    """Seconds the rows left should take: each at the mean of the rows measured so far of its model, else of all.

    Args:
        seconds: `(model, seconds)` of each row measured so far (at least one).
        rows_left: The model of each row still to measure.
    """
    if not seconds:
        raise ValueError(f"remaining_estimate needs a measured row. Received: seconds={seconds!r}")
    overall = sum(s for _, s in seconds) / len(seconds)
    by_model: dict[str, list[float]] = {}
    for model, s in seconds:
        by_model.setdefault(model, []).append(s)
    return sum(sum(by_model[m]) / len(by_model[m]) if m in by_model else overall for m in rows_left)

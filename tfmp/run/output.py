"""Where the run's lines go: Python `logging`, as in Keras and Model Garden.

Every module of `tfmp.run` writes its lines (the start line, the epoch
lines, checkpoints, notes and warnings) to its own logger,
`logging.getLogger(__name__)`, a child of the `tfmp.run` logger: `log.info`
for what a run reports, `log.warning` for what needs a look.

The entry points (`tfmp.run.training.train`, `train_gan`,
`train_classifier`, `diagnose`, `diagnose_run`, `compare_loss_scaling`,
`tfmp.run.runner.Runner` and the parity runs) take a `print_fn`, as
`keras.Model.summary(print_fn=...)` does, and hand it every line of their
work through `lines_to`:

```python
lines = []
training.train_gan(config, print_fn=lines.append)  # each line, without a prefix
training.train_gan(config, print_fn=None)  # no lines at all
```

Code that calls the internals directly (a `tfmp.run.checkpoint.RunCheckpoint`,
a callback) and is inside no `lines_to` sends the records along Python
logging's normal path: configure it as for Keras or Model Garden, e.g.
`logging.basicConfig(level=logging.INFO)` or
`logging.getLogger("tfmp.run").setLevel(logging.INFO)` with a handler of
your own.

`with_cpu_note` adds to a `print_fn`, after a run's first line, what this
CPU does with each 16-bit type the run uses (the scripts print it).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterable, Iterator

import tensorflow as tf

from tfmp import cpu_kernels
from tfmp import precision as precision_lib

__all__ = ["LOGGER_NAME", "lines_to", "with_cpu_note"]

LOGGER_NAME = "tfmp.run"
"""The logger every `tfmp.run` module's logger descends from."""


class _Sink(logging.Handler):
    """Hands each record's message, as is, to a function (in the thread that logs)."""

    def __init__(self, print_fn: Callable[[str], None] | None):
        super().__init__(logging.INFO)
        self.print_fn = print_fn

    def emit(self, record: logging.LogRecord) -> None:
        # Called directly rather than through handleError: an exception raised by
        # print_fn (a test's stop, a closed pipe) reaches the code that logged.
        if self.print_fn is not None:
            self.print_fn(record.getMessage())


@contextlib.contextmanager
def lines_to(print_fn: Callable[[str], None] | None) -> Iterator[None]:
    """Sends the `tfmp.run` lines logged inside the block to `print_fn`, and only there.

    While the block runs, the `tfmp.run` logger's level is INFO, its only
    handler calls `print_fn(message)` (the message alone, no level or
    name), and it does not propagate, so a root or absl handler does not
    show the lines again. The logger's level, propagation and handlers are
    restored when the block ends, also on an exception. Blocks nest: the
    innermost `print_fn` gets the lines, so an entry point that calls
    another prints each line once.

    Args:
        print_fn: Called with each line (e.g. `print`, `lines.append`);
            None swallows the lines.

    Example:

    ```python
    lines = []
    with output.lines_to(lines.append):
        logging.getLogger("tfmp.run.runner").info("hello")
    assert lines == ["hello"]
    ```
    """
    if print_fn is not None and not callable(print_fn):
        raise TypeError(f"print_fn must be callable or None. Received: print_fn={print_fn!r}")
    logger = logging.getLogger(LOGGER_NAME)
    saved = (logger.level, logger.propagate, logger.handlers[:])
    logger.setLevel(logging.INFO)
    logger.propagate = False
    logger.handlers = [_Sink(print_fn)]
    try:
        yield
    finally:
        logger.setLevel(saved[0])
        logger.propagate = saved[1]
        logger.handlers = saved[2]


def with_cpu_note(
    print_fn: Callable[[str], None],
    precisions: Iterable[str],
    times: Callable[[], cpu_kernels.KernelTimes] | None = None,
) -> Callable[[str], None]:
    """`print_fn`, adding a note on each 16-bit type the run uses on a CPU after the run's first line.

    The note says what this CPU does with the type, from the measurement of
    its kernels (`tfmp.cpu_kernels.describe`): whether the type is native
    here, how its kernels compare with float32's, and, for float16, which
    gradients tfmp computes in float32. A GPU run and a float32 run get no
    note (`print_fn` itself comes back), nor does a run its settings stop.

    Args:
        print_fn: Prints one line.
        precisions: The precisions the run trains in (an unknown one is left
            to the run to refuse).
        times: This CPU's kernel times; None: `tfmp.cpu_kernels.kernel_times`
            (measured once per CPU and cached).
    """

    def sixteen_bit(precision: str) -> str | None:
        try:
            name = precision_lib.canonical_precision(precision)
        except ValueError:
            return None  # the run refuses it, naming it
        return name if name in ("mixed_float16", "mixed_bfloat16") else None

    wanted = dict.fromkeys(name for name in map(sixteen_bit, precisions) if name)
    if not wanted or tf.config.list_physical_devices("GPU"):
        return print_fn
    pending = list(wanted)
    measure = times or cpu_kernels.kernel_times

    def print_and_note(line: str) -> None:
        print_fn(line)
        while pending:
            print_fn(cpu_kernels.describe(measure(), pending.pop(0)))

    return print_and_note

"""Where a run writes: its run directory and checkpoint directories, created, checked and held.

`hold(...)` creates each directory once, checks it writable as it is made
(`ConfigError` naming `logdir` or `checkpoint_dir` otherwise), and on the
chief holds the run directory and the checkpoint directory with a
`tfmp.run.rundir.RunDirLock`, so a second run there is refused. When the
block fails, or Ctrl-C interrupts it, the locks are released and the
directories it created removed again if still empty.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import os
import re
import tempfile
from collections.abc import Iterator

import tensorflow as tf

from tfmp.run import distribute, rundir
from tfmp.run.config import ConfigError

__all__ = ["Directories", "default_run_name", "hold", "make_writable_dir"]


def default_run_name(precision: str, loss_scale: str | float, name: str = "") -> str:
    """A timestamp, the task's name, then the precision and loss-scale settings.

    `20261126-185627_text_classifier_mixed_float16_ls-dynamic`: the timestamp
    first, so that runs sort by time. The name is made safe for one path
    component (each run of characters other than letters, digits, `.`, `_`
    and `-` becomes one `_`); without a name it is left out.

    Args:
        precision: The resolved precision.
        loss_scale: The resolved loss scale.
        name: The task's name (`tfmp.run.tasks.Task.name`).
    """
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._")
    return f"{stamp}_{safe + '_' if safe else ''}{precision}_ls-{loss_scale}"


@dataclasses.dataclass
class Directories:
    """Where a run writes; held by this run while it lasts (`Runner.build_directories`).

    Attributes:
        run_dir: The run's directory (its TensorBoard logs on the chief).
        writes: This process's TensorBoard directory: the run's own
            (`Setting.run_dir`) on the chief, a private one on other workers.
        run_checkpoints: The run's checkpoints, which every worker resumes from.
        checkpoint_dir: Where this process writes its checkpoints.
        training_started: Set once the first step is under way.
    """

    run_dir: str
    writes: str
    run_checkpoints: str
    checkpoint_dir: str
    training_started: bool = False


def make_writable_dir(name: str, path: str) -> list[str]:
    """Creates `path` (and missing parents) and checks it can be written to; returns what it created.

    Raises:
        ConfigError: naming the setting `name` and `path` when it cannot;
            whatever was created is removed again.
    """
    created: list[str] = []
    try:
        created = rundir.make_dirs(path)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as e:
        rundir.remove_empty_dirs(created)
        raise ConfigError(
            f"must be a directory tfmp can create and write to ({e.strerror or e}).", name, path
        ) from None
    return created


def _claim_new_dir(path: str, created: list[str]) -> str:
    """Creates `path`, or `path-2`, `path-3`... if taken (two runs started in the same second)."""
    created += make_writable_dir("logdir", os.path.dirname(path) or os.curdir)
    candidate, n = path, 1
    while True:
        try:
            os.mkdir(candidate)
        except FileExistsError:
            n += 1
            candidate = f"{path}-{n}"
            continue
        created.append(os.path.abspath(candidate))
        return candidate


@contextlib.contextmanager
def hold(
    run_dir: str,
    named: bool,
    checkpoint_dir: str,
    strategy: tf.distribute.Strategy,
) -> Iterator[Directories]:
    """Creates a run's directories and holds them for this run while the block runs.

    Args:
        run_dir: The run directory the setting names.
        named: Whether the user named it (`run_name`): a default name another
            run took in the same second gets a `-2` suffix instead.
        checkpoint_dir: The config's `checkpoint_dir` (empty: `run_dir/checkpoints`).
        strategy: The run's strategy: only its chief writes the run's files.

    Yields:
        The directories, `run_dir` the one claimed.

    Raises:
        ConfigError: naming `logdir` or `checkpoint_dir` when one cannot be written.
        tfmp.run.rundir.RunDirInUseError: when another run holds one of them.
    """
    chief = distribute.is_chief(strategy)
    created: list[str] = []
    try:
        with contextlib.ExitStack() as locks:
            if chief and not named:
                run_dir = _claim_new_dir(run_dir, created)
            writes = distribute.writable_dir(run_dir, strategy)
            created += make_writable_dir("logdir", writes)
            run_checkpoints = checkpoint_dir or os.path.join(run_dir, "checkpoints")
            own_checkpoints = distribute.writable_dir(run_checkpoints, strategy)
            created += make_writable_dir("checkpoint_dir", own_checkpoints)
            if chief:
                # Both: another run may name this run's checkpoint directory as its own checkpoint_dir.
                for directory in dict.fromkeys(os.path.abspath(d) for d in (writes, own_checkpoints)):
                    locks.enter_context(rundir.RunDirLock(directory))
            yield Directories(run_dir, writes, run_checkpoints, own_checkpoints)
    except BaseException:
        rundir.remove_empty_dirs(created)
        raise

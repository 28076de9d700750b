"""A checkpoint directory's files: the `ckpt-N` files by number, whose they are, and setting them aside."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable

__all__ = ["STATE_FILE", "checkpoint_files", "files_of", "not_own", "on_disk", "set_aside"]

STATE_FILE = "checkpoint"  # tf.train.CheckpointManager's list of the checkpoints
# The files of checkpoint N, as tf.train.CheckpointManager names them (prefix "ckpt").
_CHECKPOINT_FILE = re.compile(r"^ckpt-(\d+)\.(?:index|data-\d{5}-of-\d{5})$")


def checkpoint_files(directory: str) -> dict[int, list[str]]:
    """The `ckpt-N` files in `directory` by checkpoint number N (sorted names), listed in a state file or not."""
    try:
        names = sorted(os.listdir(directory or "."))
    except OSError:
        return {}
    files: dict[int, list[str]] = {}
    for name in names:
        if m := _CHECKPOINT_FILE.match(name):
            files.setdefault(int(m.group(1)), []).append(os.path.join(directory, name))
    return files


def on_disk(directory: str) -> list[str]:
    """The checkpoints whose files are in `directory`, listed or not, oldest (lowest number) first."""
    return [os.path.join(directory, f"ckpt-{n}") for n in sorted(checkpoint_files(directory))]


def not_own(directory: str, paths: Iterable[str]) -> list[str]:
    """The `paths` that are not a `ckpt-N` directly in `directory` (symbolic links resolved), in order."""
    home = os.path.realpath(directory or ".")
    return [
        path
        for path in paths
        if not re.fullmatch(r"ckpt-\d+", os.path.basename(path))
        or os.path.realpath(os.path.dirname(path) or ".") != home
    ]


def files_of(prefix: str) -> list[str]:
    """The files of the checkpoint `prefix` (`<dir>/ckpt-N`) that exist."""
    directory, name = os.path.split(prefix)
    number = name.removeprefix("ckpt-")
    return checkpoint_files(directory).get(int(number), []) if number.isdigit() else []


def set_aside(files: list[str]) -> list[str]:
    """Renames each file to `<file>.old` (`.old-2`, ... if taken); returns the new names."""
    moved = []
    for path in files:
        target, n = f"{path}.old", 1
        while os.path.lexists(target):
            n += 1
            target = f"{path}.old-{n}"
        os.rename(path, target)
        moved.append(target)
    return moved

"""TensorFlow's op determinism for the length of a run, restored afterwards.

A run with `TrainConfig.deterministic` turns it on (`tfmp.run.runner`), so that
a resumed run repeats the uninterrupted one bit for bit.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import tensorflow as tf

from tfmp.run import _private_apis

__all__ = ["op_determinism"]


@contextlib.contextmanager
def op_determinism(enabled: bool = True) -> Iterator[None]:
    """Turns TensorFlow's op determinism on inside the block, then restores it.

    `tf.config.experimental.enable_op_determinism` is process-wide and has no
    public off switch; this uses TensorFlow's own internal one to restore the
    previous setting, so a library call does not leave it behind.

    Args:
        enabled: Whether to turn it on; False leaves the setting as it is.

    Yields:
        None, with op determinism on when `enabled`.
    """
    before = _private_apis.is_op_determinism_enabled()
    if enabled and not before:
        tf.config.experimental.enable_op_determinism()
    try:
        yield
    finally:
        if enabled and not before:
            _private_apis.disable_op_determinism()

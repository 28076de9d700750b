"""Layers for speed: a BatchNormalization that runs TensorFlow's fused kernel.

Keras 3's `keras.layers.BatchNormalization` is unfused: it casts its input to
float32 and builds the normalisation from `mean`, `squared_difference`, `mul`
and `add` ops, and autodiff differentiates that whole graph, many small ops
each way where one would do (what that costs a step:
[Performance](../PERFORMANCE.md)). tf.keras 2 ran the same layer
through `FusedBatchNormV3`, one op forward and one backward, with oneDNN
(CPU) and cuDNN (GPU) kernels that take float16/bfloat16 inputs with float32
scale, offset and statistics. `FusedBatchNormalization` brings that back
without changing anything else about the layer:

```python
from tfmp.layers import FusedBatchNormalization, fuse_batch_norms

x = FusedBatchNormalization(momentum=0.9)(x)       # in place of keras.layers.BatchNormalization
backbone = fuse_batch_norms(keras.applications.MobileNetV2(weights=None, include_top=False))
```

`fuse_batch_norms` swaps the layer into an existing functional model
(`keras.applications` builds its own BatchNormalization layers).
"""

from __future__ import annotations

import functools
import random

import keras
import numpy as np
import tensorflow as tf

from tfmp import _compat

__all__ = ["CPU_HALF_CHANNEL_MULTIPLE", "FusedBatchNormalization", "fuse_batch_norms"]

# On a CPU, oneDNN's 16-bit batch norm runs a slow generic kernel
# ("nspc_bnorm:any") unless the channel count is a multiple of this.
CPU_HALF_CHANNEL_MULTIPLE = 16

_FUSED_DTYPES = ("float32", "bfloat16", "float16")
# cuDNN's smallest batch-norm epsilon; tf.keras 2 raised smaller ones to it
# for its fused path, which would change the math, so they stay unfused.
_MIN_FUSED_EPSILON = 1.001e-5


def _in_xla() -> bool:
    """Whether the call is being traced for XLA (`tf.function(jit_compile=True)`)."""
    return _compat.tracing_for_xla()


@functools.cache
def _no_gpu() -> bool:
    # The visible devices are fixed once TensorFlow has initialised them.
    return not tf.config.list_physical_devices("GPU")


def _half_in_float32(dtype: str, channels: int | None, on_cpu: bool) -> bool:
    """Whether a 16-bit input with `channels` channels is normalised in float32.

    Only on a CPU. There, oneDNN's bfloat16 batch norm with a channel count
    that is not a multiple of 16 (the tutorial GAN's 8, a width of 24) falls back
    to a generic kernel many times slower than the float32 one, so two casts
    are much cheaper; with a multiple of 16 the bfloat16 kernel beats float32.
    float16 has no oneDNN kernel without AVX512-FP16 and the Eigen one is
    slower than casting to float32, at any width ([Performance](../PERFORMANCE.md)
    has the figures). On a GPU cuDNN takes
    16-bit inputs of any width with float32 statistics, as tf.keras 2 ran it
    under mixed precision; casting there would only add two full-size memory
    passes to a layer that is bound by memory bandwidth.
    """
    if dtype == "float32" or not on_cpu:
        return False
    return dtype == "float16" or channels is None or channels % CPU_HALF_CHANNEL_MULTIPLE != 0


@keras.saving.register_keras_serializable(package="tfmp")
class FusedBatchNormalization(keras.layers.BatchNormalization):
    """`keras.layers.BatchNormalization` computed by TensorFlow's fused kernel.

    Same arguments, variables (names, shapes, float32 dtype), config and
    semantics as the Keras layer, so weights and checkpoints move between the
    two and `keras.models.clone_model` / `tfmp.float32_layers.float32_copy` work:

    * training (`training=True` and the layer trainable): normalises with the
      batch mean and the biased batch variance, and updates
      `moving_x -= (moving_x - batch_x) * (1 - momentum)` with the biased
      variance, as Keras does (up to rounding: the form is tf.keras 2's, one
      kernel per statistic; `FusedBatchNormV3` returns the Bessel-corrected
      variance, converted back by a constant where the shape is static);
    * inference: normalises with the moving statistics;
    * statistics, gamma and beta are float32 whatever the policy; the output
      has the layer's compute dtype. Under a distribution strategy each
      replica normalises with its own batch's statistics, as Keras's layer
      does with `synchronized=False`.

    4D channels-last float32/bfloat16/float16 inputs take one
    `FusedBatchNormV3` op forward and one gradient op backward (oneDNN on
    CPU, cuDNN on GPU). Anything else falls back to the Keras
    implementation: code compiled by XLA (which fuses Keras's ops itself,
    faster than it runs the fused op), other ranks, `axis` not the last,
    `synchronized=True`, `renorm=True`, a mask, float64, `epsilon` below
    cuDNN's minimum of 1.001e-5, or a backend other than TensorFlow. On a
    CPU, 16-bit inputs whose channel count is not a multiple of 16 are
    normalised in float32 (see `CPU_HALF_CHANNEL_MULTIPLE`).

    A saved model holding this layer needs `tfmp.layers` imported to load.
    """

    def _fusable(self, inputs, mask) -> bool:
        if keras.backend.backend() != "tensorflow" or mask is not None:
            return False
        if self.synchronized or self.renorm or self.epsilon < _MIN_FUSED_EPSILON:
            return False
        if _in_xla():
            # XLA fuses Keras's own ops, and its lowering of FusedBatchNormV3
            # measured slower than them (the Performance report).
            return False
        rank = len(inputs.shape)
        if rank != 4 or self.axis not in (-1, rank - 1):
            return False
        return keras.backend.standardize_dtype(inputs.dtype) in _FUSED_DTYPES

    def call(self, inputs, training=None, mask=None):
        if not self._fusable(inputs, mask):
            return super().call(inputs, training=training, mask=mask)
        channels = inputs.shape[-1]
        x = inputs
        if _half_in_float32(keras.backend.standardize_dtype(x.dtype), channels, _no_gpu()):
            x = tf.cast(x, tf.float32)
        # The variables are created with autocast=False: these reads are float32.
        gamma = tf.convert_to_tensor(self.gamma) if self.scale else tf.ones((channels,), tf.float32)
        beta = tf.convert_to_tensor(self.beta) if self.center else tf.zeros((channels,), tf.float32)
        if training and self.trainable:
            empty = tf.constant([], tf.float32)
            y, mean, variance, _, _, _ = tf.raw_ops.FusedBatchNormV3(
                x=x,
                scale=gamma,
                offset=beta,
                mean=empty,
                variance=empty,
                epsilon=self.epsilon,
                exponential_avg_factor=1.0,
                data_format="NHWC",
                is_training=True,
            )
            # The op normalises with the biased variance but returns n/(n-1)
            # times it; Keras averages the biased one into moving_variance.
            variance = variance * _bias_correction(x)
            decay = 1.0 - self.momentum
            _move_average(self.moving_mean, mean, decay)
            _move_average(self.moving_variance, variance, decay)
        else:
            y, _, _, _, _, _ = tf.raw_ops.FusedBatchNormV3(
                x=x,
                scale=gamma,
                offset=beta,
                mean=tf.convert_to_tensor(self.moving_mean),
                variance=tf.convert_to_tensor(self.moving_variance),
                epsilon=self.epsilon,
                exponential_avg_factor=1.0,
                data_format="NHWC",
                is_training=False,
            )
        return tf.cast(y, self.compute_dtype)


def _bias_correction(x: tf.Tensor) -> tf.Tensor | np.float32:
    """(n - 1) / n for the n values per channel of `x`: a constant when its shape is static."""
    if x.shape[:-1].is_fully_defined():
        n = np.float32(x.shape[:-1].num_elements())
        return np.maximum(n - np.float32(1.0), np.float32(0.0)) / np.maximum(n, np.float32(1.0))
    n = tf.cast(tf.size(x, out_type=tf.int64) // x.shape[-1], tf.float32)  # the channels are static
    return tf.maximum(n - 1.0, 0.0) / tf.maximum(n, 1.0)


def _move_average(variable: keras.Variable, value: tf.Tensor, decay: float) -> None:
    """`variable -= (variable - value) * decay` in one kernel, tf.keras 2's moving-average update.

    `ResourceApplyGradientDescent` computes `var - alpha * delta` in place,
    as tf.keras 2's BatchNormalization did with `assign_sub`; the value is
    Keras 3's `variable * momentum + value * (1 - momentum)` up to rounding.
    Under a strategy, in a replica context, the handle is this replica's;
    TensorFlow's copy-on-write leaves a value read before (a transaction's
    snapshot) as it was.
    """
    # No gradient flows through the update (the op has none), so `value` needs no stop_gradient.
    delta = tf.convert_to_tensor(variable) - value
    tf.raw_ops.ResourceApplyGradientDescent(var=variable.handle, alpha=tf.constant(decay, tf.float32), delta=delta)


def fuse_batch_norms(model: keras.Model) -> keras.Model:
    """A copy of a functional model with `FusedBatchNormalization` for its BatchNorms.

    Every `keras.layers.BatchNormalization` (nested models included) becomes
    a `FusedBatchNormalization` with the same config (name, momentum,
    epsilon, dtype policy); other layers are cloned as they are. The copy
    holds the original's weights, so it computes what the original computes.

    Args:
        model: A functional or sequential `keras.Model`, built.

    Returns:
        The copy (a new model; `model` is unchanged). Making it consumes no
        random numbers, so under `keras.utils.set_random_seed` the layers
        built after it get the same initial weights with or without it.
    """

    def clone(layer: keras.layers.Layer) -> keras.layers.Layer:
        cls = layer.__class__
        if cls is keras.layers.BatchNormalization:
            cls = FusedBatchNormalization
        return cls.from_config(layer.get_config())

    # Keras draws the seed of every unseeded initializer from Python's
    # `random` when a layer is made; the clone's are overwritten below.
    state = random.getstate()
    try:
        copy = keras.models.clone_model(model, clone_function=clone, recursive=True)
    finally:
        random.setstate(state)
    copy.set_weights(model.get_weights())
    return copy
